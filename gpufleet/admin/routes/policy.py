"""GET and PUT /policy: the live placement preset and weights, with ETags and If-Match."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Response

from gpufleet.admin.auth import Access, User, check_access
from gpufleet.admin.context import AdminContext
from gpufleet.admin.deps import AUDITED, ContextDep, UserDep, json_response
from gpufleet.admin.policy import PolicyDocument, PolicyPublic, etag, public
from gpufleet.admin.problems import responses
from gpufleet.admin.routes import API_PREFIX

router = APIRouter(prefix=f"{API_PREFIX}/policy", tags=["policy"])

_ETAG = {
    "headers": {
        "ETag": {
            "description": "The stored policy's version; send it as If-Match to change it.",
            "schema": {"type": "string"},
        }
    }
}


def _access(context: AdminContext, verb: str) -> Access:
    # RBAC on the ConfigMap itself: whoever may update it may change the policy.
    settings = context.settings
    return Access(
        verb=verb,
        resource="configmaps",
        namespace=settings.namespace,
        name=settings.policy_configmap,
    )


def may_get(context: ContextDep, user: UserDep) -> User:
    check_access(context.reviewer, user, _access(context, "get"))
    return user


def may_update(context: ContextDep, user: UserDep) -> User:
    check_access(context.reviewer, user, _access(context, "update"))
    return user


def _answer(context: AdminContext, stored: dict[str, Any] | None) -> Response:
    watch = context.policy
    live = watch.read(stored) if stored is not None else watch.base
    meta = (stored or {}).get("metadata") or {}
    response = json_response(public(live, meta))
    response.headers["ETag"] = etag(meta.get("resourceVersion"))
    return response


@router.get(
    "",
    response_model=PolicyPublic,
    summary="The live placement policy",
    name="get",
    responses={200: _ETAG, **responses(401, 403, 429, 503)},
)
def get(context: ContextDep, user: Annotated[User, Depends(may_get)]) -> Response:
    """The preset and weights the scheduler decides with, where they come from (the stored
    policy or the settings), and the ETag to change them with."""
    return _answer(context, context.policy_store.read())


@router.put(
    "",
    response_model=PolicyPublic,
    summary="Change the live placement policy",
    name="replace",
    dependencies=[AUDITED],
    openapi_extra={"requestBody": {"description": "The preset and weight overrides to use."}},
    responses={200: _ETAG, **responses(400, 401, 403, 412, 413, 422, 428, 429, 503)},
)
def put(
    context: ContextDep,
    user: Annotated[User, Depends(may_update)],
    document: Annotated[PolicyDocument, Body()],
    if_match: Annotated[
        str | None,
        Header(alias="If-Match", description="The ETag of the policy this change replaces."),
    ] = None,
) -> Response:
    """Store the policy; the scheduler uses it from its next cycle on, and after restarts.
    Needs `update` on the policy ConfigMap and If-Match (428 without, 412 when stale)."""
    return _answer(context, context.policy_store.write(document, if_match, user.username))
