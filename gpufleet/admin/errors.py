"""The error the admin API's parts raise to answer with a problem (RFC 9457).

Kept apart from `problems`, which renders it with FastAPI, so that the parts the operator runs
whether or not it serves the API (the live view, the fleet metrics) import no web framework.
"""

from __future__ import annotations

from collections.abc import Mapping


class ProblemError(Exception):
    """Raise in a route to answer with a problem."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        type: str = "about:blank",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.type = type
        self.headers = dict(headers or {})
