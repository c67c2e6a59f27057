"""The admin API application: routers under /api/v1, problem handlers, middleware, lifespan.

Operation ids are `<tag>-<route name>` (stable: clients generated from the OpenAPI document keep
their method names). The lifespan starts the informers of a standalone API (not waiting for
them: /readyz says when they are synced) and closes what the context opened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from gpufleet.admin import problems
from gpufleet.admin.context import AdminContext
from gpufleet.admin.deps import single_valued_query
from gpufleet.admin.middleware import AuditLog, BodyLimit
from gpufleet.admin.routes import (
    API_PREFIX,
    dashboard,
    fleet,
    health,
    jobs,
    nodes,
    policy,
    queues,
    whatif,
)

TITLE = "gpufleet admin API"


def operation_id(route: APIRoute) -> str:
    tag = route.tags[0] if route.tags else "api"
    return f"{tag}-{route.name}"


def create_app(context: AdminContext) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if context.owns_live:
            for informer in context.live.informers:
                informer.start()
        try:
            yield
        finally:
            if context.owns_live:
                context.live.stop()
            context.nodes.close()
            for close in context.closers:
                close()

    app = FastAPI(
        title=TITLE,
        version="v1",
        summary="Fleet, jobs, queues, what-if placement, node actions and policy of gpufleet.",
        description="Authenticated with Kubernetes bearer tokens (TokenReview) and authorized "
        "by Kubernetes RBAC (SubjectAccessReview). Errors are RFC 9457 problem details.",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        dependencies=[Depends(single_valued_query)],
    )
    app.state.context = context
    problems.install(app)
    routers = (fleet, jobs, queues, whatif, nodes, policy, health)
    for module in routers:
        app.include_router(module.router)
    app.include_router(dashboard.router)
    app.mount("/static", StaticFiles(directory=dashboard.STATIC_DIR), name="static")
    app.add_middleware(AuditLog)
    app.add_middleware(BodyLimit, max_bytes=context.settings.max_body_bytes)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with error responses only as application/problem+json."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                for status, response in (operation.get("responses") or {}).items():
                    content = response.get("content") or {}
                    if status[0] in "45" and problems.PROBLEM_JSON in content:
                        content.pop("application/json", None)
        app.openapi_schema = schema
    return app.openapi_schema
