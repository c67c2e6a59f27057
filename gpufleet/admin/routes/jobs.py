"""GET /jobs and GET /jobs/{namespace}/{kind}/{name}: placement, reasons, queue, usage.

A user sees the jobs of the namespaces where RBAC lets them list that kind: without a
`namespace` filter the list holds exactly those (a cluster-wide permission shows all); with one,
a user who may list neither kind there gets 403.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from gpufleet.admin.auth import Access, User, check_access
from gpufleet.admin.context import AdminContext
from gpufleet.admin.deps import ContextDep, LiveDep, UserDep, json_response
from gpufleet.admin.errors import ProblemError
from gpufleet.admin.jobs import all_jobs
from gpufleet.admin.live import JOB_KINDS
from gpufleet.admin.models.jobs import JobKind, JobListPublic, JobPublic
from gpufleet.admin.paging import paginate
from gpufleet.admin.problems import responses
from gpufleet.admin.routes import API_PREFIX
from gpufleet.model.crd_common import API_GROUP

router = APIRouter(prefix=f"{API_PREFIX}/jobs", tags=["jobs"])

NamePath = Annotated[
    str, Path(min_length=1, max_length=253, description="Name of the job's namespace or job.")
]


def job_access(verb: str, kind: str, namespace: str = "", name: str = "") -> Access:
    return Access(
        verb=verb, group=API_GROUP, resource=JOB_KINDS[kind], namespace=namespace, name=name
    )


def _visible(context: AdminContext, user: User, kind: str, namespace: str) -> bool:
    allowed, _ = context.reviewer.authorize(user, job_access("list", kind, namespace))
    return allowed


@router.get(
    "",
    response_model=JobListPublic,
    summary="List jobs",
    name="list",
    responses=responses(400, 401, 403, 422, 429, 503),
)
def list_(
    context: ContextDep,
    user: UserDep,
    live: LiveDep,
    namespace: Annotated[
        str | None, Query(max_length=253, description="Only jobs of this namespace.")
    ] = None,
    kind: Annotated[JobKind | None, Query(description="Only TrainingJobs or ServingJobs.")] = None,
    queue: Annotated[
        str | None, Query(max_length=63, description="Only jobs of this queue.")
    ] = None,
    phase: Annotated[
        str | None, Query(max_length=32, description="Only jobs in this phase, e.g. Queued.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most jobs in one page.")] = 100,
    continue_: Annotated[
        str | None,
        Query(alias="continue", description="The `metadata.continue` of the previous page."),
    ] = None,
) -> Response:
    """TrainingJobs and ServingJobs the user may list, sorted by namespace, kind and name."""
    kinds = [kind.value] if kind else list(JOB_KINDS)
    if namespace is not None:
        allowed_kinds = [k for k in kinds if _visible(context, user, k, namespace)]
        if not allowed_kinds:
            check_access(context.reviewer, user, job_access("list", kinds[0], namespace))
        kinds = allowed_kinds
    cluster_wide = {k for k in kinds if _visible(context, user, k, "")}
    observed = live.observe()
    jobs = all_jobs(observed)  # queue positions count every waiting job, seen or not
    seen: dict[tuple[str, str], bool] = {}

    def may_see(ns: str, k: str) -> bool:
        if k in cluster_wide:
            return True
        if (ns, k) not in seen:
            seen[(ns, k)] = _visible(context, user, k, ns)
        return seen[(ns, k)]

    chosen = [
        j
        for j in jobs
        if j.kind in kinds
        and (namespace is None or j.namespace == namespace)
        and (queue is None or j.queue == queue)
        and (phase is None or j.phase == phase)
        and may_see(j.namespace, j.kind)
    ]
    page, meta = paginate("jobs", chosen, lambda j: (j.namespace, j.kind, j.name), limit, continue_)
    return json_response(JobListPublic(items=page, metadata=meta))


@router.get(
    "/{namespace}/{kind}/{name}",
    response_model=JobPublic,
    summary="One job",
    responses=responses(401, 403, 404, 422, 429, 503),
)
def get(
    context: ContextDep,
    user: UserDep,
    live: LiveDep,
    namespace: NamePath,
    kind: Annotated[JobKind, Path(description="TrainingJob or ServingJob.")],
    name: NamePath,
) -> Response:
    """Where the job runs, why it waits (the core's reason code and message), its position in
    its queue, and the GPU time and energy it used."""
    check_access(context.reviewer, user, job_access("get", kind.value, namespace, name))
    observed = live.observe()
    if (namespace, kind.value, name) not in observed.jobs:
        raise ProblemError(404, f"{kind.value} {namespace}/{name} not found")
    for job in all_jobs(observed):
        if (job.namespace, job.kind, job.name) == (namespace, kind, name):
            return json_response(job)
    raise ProblemError(404, f"{kind.value} {namespace}/{name} not found")
