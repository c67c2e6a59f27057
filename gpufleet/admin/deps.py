"""Dependencies of the routes, as `Annotated` aliases: the context, the live view, the user.

`UserDep` authenticates the bearer token (401), then applies the user's rate limit (429);
`allow(access)` adds a SubjectAccessReview for fixed attributes (403), checked before the
request's parameters and body are validated, so a user without the permission learns nothing
from a validation error. Routes whose attributes depend on the request build an `Access`
and call `check_access` themselves.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from gpufleet.admin.auth import Access, User, check_access, check_rate
from gpufleet.admin.context import AdminContext
from gpufleet.admin.errors import ProblemError
from gpufleet.admin.live import LiveFleet

_bearer = HTTPBearer(
    auto_error=False,
    description="A Kubernetes bearer token (a ServiceAccount token, or the token of your "
    "kubeconfig); checked with a TokenReview, authorized with SubjectAccessReviews.",
)
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="gpufleet"'}


def get_context(request: Request) -> AdminContext:
    context: AdminContext = request.app.state.context
    return context


ContextDep = Annotated[AdminContext, Depends(get_context)]


def current_user(
    request: Request,
    context: ContextDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    if credentials is None or not credentials.credentials.strip():
        raise ProblemError(401, "a bearer token is required", headers=_CHALLENGE)
    user = context.reviewer.authenticate(credentials.credentials.strip())
    if user is None:
        raise ProblemError(401, "the token was not accepted by the API server", headers=_CHALLENGE)
    request.state.user = user  # for the audit line
    check_rate(context.limiter, user)
    return user


UserDep = Annotated[User, Depends(current_user)]


def live_fleet(context: ContextDep) -> LiveFleet:
    if not context.live.ready():
        raise ProblemError(
            503, "the view of the cluster is not synced yet", headers={"Retry-After": "2"}
        )
    return context.live


LiveDep = Annotated[LiveFleet, Depends(live_fleet)]


def allow(access: Access) -> Any:
    """A route dependency: the user may do `access` (SubjectAccessReview), else 403."""

    def dependency(context: ContextDep, user: UserDep) -> User:
        check_access(context.reviewer, user, access)
        return user

    return Depends(dependency)


def json_response(model: BaseModel) -> Response:
    """`model` as JSON, serialized once: FastAPI would validate a returned model against the
    response model again, which for a 1,000-node fleet cost twice the time to build it. The
    route still declares `response_model` for the OpenAPI document (and tests hold the
    responses to it)."""
    return Response(model.model_dump_json(by_alias=True), media_type="application/json")


def single_valued_query(request: Request) -> None:
    """Every query parameter of this API takes one value: a repeated one (`?queue=a&queue=b`)
    is answered 422 naming it, where FastAPI would silently keep the last value."""
    keys = [key for key, _ in request.query_params.multi_items()]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", key),
                    "msg": "given more than once; it takes one value",
                    "type": "repeated",
                }
                for key in repeated
            ]
        )


def audited(request: Request) -> None:
    """Marks a mutating route: the audit middleware logs one line for each call."""
    request.state.audit = True


AUDITED = Depends(audited)
