"""POST /whatif: where a manifest would run now, which jobs it would preempt, or why it waits."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from gpufleet.admin.auth import check_access
from gpufleet.admin.deps import ContextDep, LiveDep, UserDep
from gpufleet.admin.models.whatif import Manifest, WhatIfPublic
from gpufleet.admin.problems import responses
from gpufleet.admin.routes import API_PREFIX
from gpufleet.admin.routes.jobs import job_access
from gpufleet.admin.whatif import what_if

router = APIRouter(prefix=f"{API_PREFIX}/whatif", tags=["whatif"])


@router.post(
    "",
    response_model=WhatIfPublic,
    summary="Place a manifest hypothetically",
    name="evaluate",
    openapi_extra={
        "requestBody": {
            "description": "A TrainingJob or ServingJob manifest, as for kubectl apply."
        }
    },
    responses=responses(400, 401, 403, 409, 413, 422, 429, 503),
)
def post(
    context: ContextDep,
    user: UserDep,
    live: LiveDep,
    manifest: Annotated[Manifest, Body()],
) -> WhatIfPublic:
    """Decides with the pure core on the live snapshot and the live policy; writes nothing.
    Needs the permission to create such a job in its namespace."""
    namespace = manifest.metadata.namespace or "default"
    check_access(context.reviewer, user, job_access("create", manifest.kind, namespace))
    live_policy = context.policy.current()
    return what_if(live, manifest, live_policy.policy, live_policy.name)
