"""Trace-driven simulator: the core's `place` and baseline policies replayed on public traces.

Modules: `fleet` (fleet YAML, shared with the sandbox), `traces` (Philly and Alibaba loaders),
`profiles` and `speed` (per-job throughput), `cluster` (in-memory cluster), `engine` (discrete-event
loop), `energy` (power integration), `baselines`, `policies`, `metrics`, `report`, `runner` and
`cli` (`gpufleet simulate`). `serving/` is the separate request-level LLM serving model.
"""
