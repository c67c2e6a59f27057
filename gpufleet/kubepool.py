"""Keep the Kubernetes client's connections in its pool: an answer asked for with
`_preload_content=False` is urllib3's raw response, and urllib3 puts its connection back in the
pool only once the body has been read to the end. A write whose answer is dropped unread leaves
its connection out of the pool for good (closed when the response is collected), so the next
request opens a new TCP and TLS connection: under load the operator spent its passes in TLS
handshakes although the pool holds 64 connections. Every caller that does not read the answer
hands it to `release`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["release"]


def release(answer: Any) -> None:
    """Read `answer` (an unread urllib3 response) to its end and give its connection back."""
    answer.drain_conn()
    answer.release_conn()
