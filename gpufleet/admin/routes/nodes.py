"""Node actions: POST cordon, uncordon, drain; PUT mig-layout. Each needs `patch nodes`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Query

from gpufleet.admin.auth import Access, User, check_access
from gpufleet.admin.deps import AUDITED, ContextDep, LiveDep, UserDep
from gpufleet.admin.models.nodes import CordonPublic, DrainPublic, MigLayoutPublic, MigLayoutRequest
from gpufleet.admin.problems import responses
from gpufleet.admin.routes import API_PREFIX

router = APIRouter(prefix=f"{API_PREFIX}/nodes", tags=["nodes"])

NodeName = Annotated[str, Path(min_length=1, max_length=253, description="Node name.")]


def may_patch(context: ContextDep, user: UserDep, name: NodeName) -> User:
    check_access(context.reviewer, user, Access(verb="patch", resource="nodes", name=name))
    return user


_GUARDS = [AUDITED, Depends(may_patch)]
_ERRORS = responses(401, 403, 404, 422, 429, 503)


@router.post(
    "/{name}/cordon",
    response_model=CordonPublic,
    summary="Cordon a node",
    dependencies=_GUARDS,
    responses=_ERRORS,
)
def cordon(context: ContextDep, live: LiveDep, name: NodeName) -> CordonPublic:
    """Mark the node unschedulable: no scheduler places new pods there."""
    return context.nodes.cordon(name, True)


@router.post(
    "/{name}/uncordon",
    response_model=CordonPublic,
    summary="Uncordon a node",
    dependencies=_GUARDS,
    responses=_ERRORS,
)
def uncordon(context: ContextDep, live: LiveDep, name: NodeName) -> CordonPublic:
    """Make the node schedulable again."""
    return context.nodes.cordon(name, False)


@router.post(
    "/{name}/drain",
    response_model=DrainPublic,
    summary="Drain a node's GPU jobs",
    dependencies=_GUARDS,
    responses=_ERRORS,
)
def drain(
    context: ContextDep,
    live: LiveDep,
    name: NodeName,
    dry_run: Annotated[
        bool, Query(alias="dryRun", description="Only show which gangs would move.")
    ] = False,
) -> DrainPublic:
    """Cordon the node and evict every gang holding its GPUs, each as a whole (all its pods,
    wherever they run) through the Eviction API, after checking its PodDisruptionBudgets for
    the whole gang; a gang a budget protects stays and is reported `blocked`."""
    return context.nodes.drain(name, dry_run)


@router.put(
    "/{name}/mig-layout",
    response_model=MigLayoutPublic,
    summary="Change a node's MIG layout",
    openapi_extra={"requestBody": {"description": "The layout, and whether to drain first."}},
    dependencies=_GUARDS,
    responses=responses(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
def set_mig_layout(
    context: ContextDep,
    live: LiveDep,
    name: NodeName,
    request: Annotated[MigLayoutRequest, Body()],
) -> MigLayoutPublic:
    """Ask the MIG manager for a layout of the mig-parted config (`nvidia.com/mig.config`).
    Refused with 409 while the node's GPUs are in use, unless `drain` is true."""
    return context.nodes.set_mig_layout(name, request)
