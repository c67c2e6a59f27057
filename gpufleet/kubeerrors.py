"""Errors of the Kubernetes API as one line: `<status> <reason>: <message>` from the Status
object the API server answers with, so a log line, a pending reason or a retry message says
what was refused (which disruption budget, which missing permission). Shared by the adapters
that write to the API (scheduler, operator).
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

__all__ = ["api_error_text", "status_text"]


def api_error_text(exc: ApiException) -> str:
    """`<status> <reason>: <message>` of a client error, from its Status body."""
    body = exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
    return status_text(int(exc.status or 0), body) if exc.status else str(exc)


def status_text(status: int, answer: bytes) -> str:
    """`<status> <reason>: <message>` from a Status body (the transport error for status 0)."""
    if status == 0:
        return answer.decode(errors="replace")
    try:
        doc = json.loads(answer)
    except ValueError:
        return f"{status} {answer[:200].decode(errors='replace')}".strip()
    reason, message = doc.get("reason", ""), doc.get("message", "")
    for cause in (doc.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "DisruptionBudget" or cause.get("type") == "DisruptionBudget":
            message = f"{message} {cause.get('message', '')}".strip()
    return f"{status} {reason}" + (f": {message}" if message else "")
