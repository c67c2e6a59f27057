"""Probes and metrics: /healthz, /readyz (no authentication), /metrics (`get /metrics`)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from pydantic import Field

from gpufleet.admin.auth import Access
from gpufleet.admin.deps import ContextDep, allow
from gpufleet.admin.errors import ProblemError
from gpufleet.admin.models.common import PublicModel
from gpufleet.admin.problems import responses

router = APIRouter(tags=["health"])

# Like kube-rbac-proxy: a non-resource URL that RBAC grants (ClusterRole nonResourceURLs).
METRICS_ACCESS = Access(verb="get", path="/metrics")


class HealthPublic(PublicModel):
    """A probe's answer."""

    status: str = Field(description="ok")


@router.get("/healthz", response_model=HealthPublic, summary="Liveness")
def healthz() -> HealthPublic:
    """The process answers."""
    return HealthPublic(status="ok")


@router.get("/readyz", response_model=HealthPublic, summary="Readiness", responses=responses(503))
def readyz(context: ContextDep) -> HealthPublic:
    """The view of the cluster is synced, so the API can answer."""
    if not context.live.ready():
        raise ProblemError(503, "the view of the cluster is not synced yet")
    return HealthPublic(status="ok")


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    dependencies=[allow(METRICS_ACCESS)],
    response_class=Response,
    responses={
        200: {
            "description": "Metrics in the Prometheus text format.",
            "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
        },
        **responses(401, 403, 429),
    },
)
def metrics() -> Response:
    """Every gpufleet_ series of this process."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
