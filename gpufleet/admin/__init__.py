"""The REST admin API and dashboard: FastAPI routes over the scheduler's live view.

Layout (FastAPI's "bigger applications" shape): `main.py` builds the app, `deps.py` holds the
`Annotated` dependencies, `routes/` one module per resource, `models/` the `*Public` response
models (separate from the CRD models in `gpufleet.model`), `auth.py` TokenReview and
SubjectAccessReview, `problems.py` RFC 9457 errors. Reads come from the scheduler's cache and
`ViewBuilder`; what-ifs call the pure core; writes go to the API server.
"""
