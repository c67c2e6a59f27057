"""Times as the API server writes them (RFC 3339 in UTC, `2026-01-02T03:04:05Z`): metadata,
status fields and the annotations gpufleet stamps.
"""

from __future__ import annotations

from datetime import datetime


def parse_time(raw: object) -> datetime | None:
    """The time in `raw`, or None when it is missing or not a time (a hand-edited field is read
    as absent rather than failing the pass that reads it)."""
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None


def format_time(t: datetime) -> str:
    """`t` as the API server writes times: whole seconds, `Z` for UTC."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")
