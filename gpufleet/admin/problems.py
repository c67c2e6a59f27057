"""Errors as RFC 9457 problem details (`application/problem+json`), for every status.

Every error the API answers has the same shape: `type`, `title`, `status`, `detail`,
`instance`, plus `errors` for a request that did not validate. Routes raise `ProblemError` (or
FastAPI's `HTTPException`); request validation errors become 422 problems; anything else is a
bug, logged with its traceback and answered as a 500 problem that says nothing of the internals.
The `PROBLEM_RESPONSES` dict documents the error responses in the OpenAPI description.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpufleet.admin.errors import ProblemError

log = logging.getLogger("gpufleet.admin")

PROBLEM_JSON = "application/problem+json"
# Problem types gpufleet defines; `about:blank` (the status alone) for the others.
VALIDATION_TYPE = "urn:gpufleet:problem:validation-error"


class FieldError(BaseModel):
    """One reason a request was not valid."""

    model_config = ConfigDict(extra="forbid")

    loc: list[str | int] = Field(
        description="Where the error is: the part of the request (body, query, path, header) "
        "followed by the field path."
    )
    msg: str = Field(description="What is wrong, for a person.")
    type: str = Field(description="Stable error code from the validator, e.g. missing.")


class Problem(BaseModel):
    """An error, as RFC 9457 problem details."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(
        default="about:blank",
        description="URI naming the kind of problem; about:blank when the status says it all.",
    )
    title: str = Field(description="Short summary of the kind of problem.")
    status: int = Field(ge=400, le=599, description="The HTTP status code.")
    detail: str | None = Field(default=None, description="What went wrong in this request.")
    instance: str | None = Field(default=None, description="The request path.")
    errors: list[FieldError] | None = Field(
        default=None, description="Each validation failure, for 422 responses."
    )


def problem_response(
    request: Request,
    status: int,
    detail: str | None,
    *,
    type: str = "about:blank",
    headers: Mapping[str, str] | None = None,
    errors: list[FieldError] | None = None,
) -> JSONResponse:
    body = Problem(
        type=type,
        title=_title(status),
        status=status,
        detail=detail,
        instance=request.url.path,
        errors=errors,
    )
    return JSONResponse(
        jsonable_encoder(body, exclude_none=True),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=dict(headers or {}),
    )


def _title(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _loc(part: Any) -> str | int:
    return part if isinstance(part, int) else str(part)


def install(app: FastAPI) -> None:
    """Answer every error of `app` with a problem document."""

    @app.exception_handler(ProblemError)
    async def _problem(request: Request, exc: ProblemError) -> JSONResponse:
        return problem_response(request, exc.status, exc.detail, type=exc.type, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail: str | None = exc.detail if isinstance(exc.detail, str) else None
        if detail == _title(exc.status_code):
            detail = None  # Starlette's default detail repeats the title
        return problem_response(request, exc.status_code, detail, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            FieldError(
                loc=[_loc(p) for p in e.get("loc", ())],
                msg=str(e.get("msg", "")),
                type=str(e.get("type", "")),
            )
            for e in exc.errors()
        ]
        first = errors[0] if errors else None
        detail = (
            f"{'.'.join(str(p) for p in first.loc)}: {first.msg}"
            if first is not None
            else "the request is not valid"
        )
        if len(errors) > 1:
            detail += f" (and {len(errors) - 1} more)"
        return problem_response(request, 422, detail, type=VALIDATION_TYPE, errors=errors)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        # A last resort: every expected failure has its own 4xx/503 above. Log it whole.
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return problem_response(request, 500, "internal error; see the server's log")


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for the problem statuses a route can answer."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        out[status] = {
            "model": Problem,
            "description": _DESCRIPTIONS.get(status, _title(status)),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    return out


_DESCRIPTIONS = {
    400: "The request is malformed: a body that is not JSON, or an invalid continue token.",
    401: "No bearer token, or the API server did not accept it.",
    403: "The user lacks the Kubernetes permission the route needs.",
    404: "No such object.",
    409: "The object's state does not allow the change now.",
    412: "If-Match does not match the current ETag.",
    413: "The request body is too large.",
    422: "The request did not validate; `errors` lists each failure.",
    428: "The request needs an If-Match header.",
    429: "Too many requests from this user; retry after the Retry-After seconds.",
    503: "The Kubernetes API server could not be reached or the view is not synced yet.",
}
