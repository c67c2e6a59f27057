"""GET /fleet: nodes, GPUs, MIG slices and who holds them, power, pending reconfigurations."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from gpufleet.admin.auth import Access
from gpufleet.admin.deps import ContextDep, LiveDep, allow, json_response
from gpufleet.admin.fleet import fleet_public
from gpufleet.admin.models.fleet import FleetPublic
from gpufleet.admin.problems import responses
from gpufleet.admin.routes import API_PREFIX

router = APIRouter(prefix=f"{API_PREFIX}/fleet", tags=["fleet"])

# Who may see the fleet: whoever may list nodes.
FLEET_ACCESS = Access(verb="list", resource="nodes")

Limit = Annotated[
    int, Query(ge=1, le=5000, description="Most nodes in one page (they are sorted by name).")
]
Continue = Annotated[
    str | None,
    Query(alias="continue", description="The `metadata.continue` of the previous page."),
]


@router.get(
    "",
    response_model=FleetPublic,
    summary="The fleet now",
    dependencies=[allow(FLEET_ACCESS)],
    responses=responses(400, 401, 403, 422, 429, 503),
)
def get(
    context: ContextDep, live: LiveDep, limit: Limit = 500, continue_: Continue = None
) -> Response:
    """Every GPU node with its GPUs, MIG slices and their holders (pod, gang, job, queue),
    cordon and taints, MIG layout state and estimated power, plus capacity totals."""
    return json_response(fleet_public(live.observe(), limit, continue_, context.fleet_memo))
