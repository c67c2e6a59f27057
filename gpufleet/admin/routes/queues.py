"""GET /queues and GET /queues/{name}: each GPUQueue's usage, borrowing, lending, demand,
shares and whether it takes jobs, computed live as the scheduler computes its status."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from gpufleet.admin.auth import Access
from gpufleet.admin.deps import LiveDep, allow, json_response
from gpufleet.admin.errors import ProblemError
from gpufleet.admin.models.queues import QueueListPublic, QueuePublic
from gpufleet.admin.paging import paginate
from gpufleet.admin.problems import responses
from gpufleet.admin.queues import queues_public
from gpufleet.admin.routes import API_PREFIX
from gpufleet.model.crd_common import API_GROUP

router = APIRouter(prefix=f"{API_PREFIX}/queues", tags=["queues"])

# GPUQueues are cluster-scoped: whoever may list (or get) them sees their figures.
LIST_ACCESS = Access(verb="list", group=API_GROUP, resource="gpuqueues")
GET_ACCESS = Access(verb="get", group=API_GROUP, resource="gpuqueues")


@router.get(
    "",
    response_model=QueueListPublic,
    summary="List queues",
    name="list",
    dependencies=[allow(LIST_ACCESS)],
    responses=responses(400, 401, 403, 422, 429, 503),
)
def list_(
    live: LiveDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most queues in one page.")] = 100,
    continue_: Annotated[
        str | None,
        Query(alias="continue", description="The `metadata.continue` of the previous page."),
    ] = None,
) -> Response:
    """Every GPUQueue, sorted by name, with the figures its status shows: per GPU type and MIG
    profile its nominal quota, used, borrowed, lent, pending and held GPUs; its fair and
    attained share; its running and waiting jobs; whether it takes jobs."""
    queues = queues_public(live.observe())
    page, meta = paginate("queues", queues, lambda q: (q.name,), limit, continue_)
    return json_response(QueueListPublic(items=page, metadata=meta))


@router.get(
    "/{name}",
    response_model=QueuePublic,
    summary="One queue",
    dependencies=[allow(GET_ACCESS)],
    responses=responses(401, 403, 404, 422, 429, 503),
)
def get(
    live: LiveDep,
    name: Annotated[str, Path(min_length=1, max_length=253, description="Queue name.")],
) -> Response:
    """One GPUQueue's figures, as in the list; 404 for a queue that does not exist (or whose
    spec cannot be read: the scheduler leaves it out too)."""
    for queue in queues_public(live.observe()):
        if queue.name == name:
            return json_response(queue)
    raise ProblemError(404, f"GPUQueue {name} not found")
