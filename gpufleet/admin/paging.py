"""List pagination with `limit` and an opaque `continue` token, as Kubernetes lists do.

Lists are sorted by a stable key; the token holds the last key of the page (base64url JSON) and
the list it belongs to, so a token of one list handed to another is refused. Objects added or
removed between pages shift nothing: the next page starts after the last key seen.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import TypeVar

from gpufleet.admin.errors import ProblemError
from gpufleet.admin.models.common import ListMeta

T = TypeVar("T")
Key = tuple[str, ...]


def encode_token(list_name: str, key: Key) -> str:
    raw = json.dumps({"list": list_name, "after": list(key)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(list_name: str, token: str) -> Key:
    """The key a page ends with; 400 for a token this list did not hand out."""
    try:
        padded = token + "=" * (-len(token) % 4)
        doc = json.loads(base64.urlsafe_b64decode(padded.encode()))
        after = doc["after"]
        if doc.get("list") != list_name or not isinstance(after, list):
            raise ValueError("wrong list")
        if not all(isinstance(part, str) for part in after):
            raise ValueError("bad key")
        return tuple(after)
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ProblemError(400, f"invalid continue token for {list_name}") from None


def paginate(
    list_name: str,
    items: Sequence[T],
    key: Callable[[T], Key],
    limit: int,
    token: str | None,
) -> tuple[list[T], ListMeta]:
    """One page of `items` (sorted here by `key`) after the token's key."""
    ordered = sorted(items, key=key)
    if token:
        after = decode_token(list_name, token)
        ordered = [item for item in ordered if key(item) > after]
    page = ordered[:limit]
    remaining = len(ordered) - len(page)
    meta = ListMeta(
        continue_=encode_token(list_name, key(page[-1])) if remaining and page else None,
        remaining_item_count=remaining,
    )
    return page, meta
