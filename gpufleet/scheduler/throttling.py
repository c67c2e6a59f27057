"""Waiting out the API server's throttling: HTTP 429 with `Retry-After`.

With API Priority and Fairness (or the older in-flight limits) the API server refuses a request
it has no room for with 429 and a `Retry-After` header, before handling it; client-go waits and
sends it again (up to ten times). gpufleet does the same on all its paths: the lean writer
(`apiwriter.py`) for bindings and pending reasons, the generated client through `ThrottleRetry`
(Lease, evictions, deletions, MIG labels, the operator's pods and Services, the informers'
lists), and kopf through its own back-offs, which honour `Retry-After` as well.

A 429 that carries a JSON `Status` is not throttling but an API handler's answer (the Eviction
API refusing an eviction that a PodDisruptionBudget does not allow): it goes back to the caller
at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

# How long one request may wait out 429 answers in all before its caller gets the 429.
THROTTLE_LIMIT_S = 60.0
RETRY_AFTER_MAX_S = 10.0  # one wait at most this long, whatever the server names
THROTTLE_RETRIES = 10  # client-go's limit of retries on a Retry-After answer


def retry_after(headers: Mapping[str, str]) -> float:
    """The seconds a 429 answer asks to wait (`retry-after`, lower-case key; 1 when absent or
    unreadable), within [0.1, RETRY_AFTER_MAX_S]."""
    try:
        wait = float(headers.get("retry-after", "1"))
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.1), RETRY_AFTER_MAX_S)


def _is_status(response: Any) -> bool:
    return "json" in str(response.headers.get("Content-Type") or "")


class ThrottleRetry(Retry):
    """urllib3's retries as the generated client had them (connection errors; read errors of
    idempotent requests; three each), plus a 429 with `Retry-After` for any method, waited out
    as told: the server refused it before handling it, so even a POST is safe to send again."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("total", None)
        kwargs.setdefault("connect", 3)
        kwargs.setdefault("read", 3)
        kwargs.setdefault("redirect", 3)
        kwargs.setdefault("status", THROTTLE_RETRIES)
        kwargs.setdefault("other", 0)
        kwargs.setdefault("raise_on_status", False)  # the last 429 goes back to the caller
        super().__init__(**kwargs)

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if status_code == 429 and has_retry_after:
            return True
        return bool(super().is_retry(method, status_code, has_retry_after))

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: TracebackType | None = None,
    ) -> ThrottleRetry:
        if response is not None and response.status == 429 and _is_status(response):
            # An API handler's refusal, not throttling: answered as it is (raise_on_status).
            raise MaxRetryError(_pool, url or "", None)
        return super().increment(method, url, response, error, _pool, _stacktrace)

    def get_retry_after(self, response: Any) -> float | None:
        wait = super().get_retry_after(response)
        return None if wait is None else min(wait, RETRY_AFTER_MAX_S)
