"""ASGI middleware: the request body limit and the audit log line of mutating calls.

The body limit is checked on the declared Content-Length, or, for a chunked body (which has
none), while the middleware reads it (bodies are small: it replays it to the app), answering
413 as a problem document; the server itself refuses more bytes than the declared length.
The audit line is written once per call of a route marked `AUDITED`, after the response: who
(user, groups), what (method, route template, path), and the outcome (status code), as one
JSON object on the `gpufleet.admin.audit` logger.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.admin.problems import PROBLEM_JSON

audit_log = logging.getLogger("gpufleet.admin.audit")


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                too_big = False
            if too_big:
                await _send_problem(send, scope, 413, self._detail())
                return
        # No declared length (a chunked body): read it here, within the limit, and replay it.
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await _send_problem(send, scope, 413, self._detail())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], receive), send)

    def _detail(self) -> str:
        return f"the request body is larger than {self.max_bytes} bytes"


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """A receive callable giving `messages` first, then whatever `then` gives."""
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is None:
            return {"type": "http.disconnect"}
        return await then()

    return receive


async def _send_problem(send: Send, scope: Scope, status: int, detail: str) -> None:
    body = json.dumps(
        {
            "type": "about:blank",
            "title": "Content Too Large",
            "status": status,
            "detail": detail,
            "instance": scope.get("path", ""),
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", PROBLEM_JSON.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class AuditLog:
    """One JSON line per call of an audited route, with the outcome."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            state: dict[str, Any] = scope.get("state") or {}
            if state.get("audit"):
                audit_log.info(json.dumps(_record(scope, state, status), sort_keys=True))


def _record(scope: Scope, state: dict[str, Any], status: int) -> dict[str, Any]:
    user = state.get("user")
    route = scope.get("route")
    return {
        "user": getattr(user, "username", None),
        "groups": list(getattr(user, "groups", ())),
        "method": scope.get("method"),
        "route": getattr(route, "path", None),
        "path": scope.get("path"),
        "query": scope.get("query_string", b"").decode("latin-1"),
        "status": status,
        "outcome": "succeeded" if status < 400 else "denied" if status in (401, 403) else "failed",
    }
