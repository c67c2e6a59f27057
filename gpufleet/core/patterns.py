"""Node fill patterns: the multisets of replica "items" one node can hold at once.

The CP-SAT model does not decide per GPU. Nodes with the same free capacity (free GPUs per NVLink
domain) form a group, and the model picks how many nodes of each group use each pattern. An item
is (size, nvlink): `size` GPUs on one node, all inside one NVLink domain when `nvlink` is set. A
pattern is feasible when its nvlink items pack into the domains and the rest fits in what is left.
"""

from __future__ import annotations

from collections.abc import Sequence

Item = tuple[int, bool]  # (GPUs, must sit in one NVLink domain)
Pattern = tuple[Item, ...]  # sorted, largest first
Signature = tuple[int, ...]  # free GPUs per NVLink domain, largest first, zeros dropped


def canonical_item(size: int, nvlink: bool, signature: Signature) -> Item:
    """Collapse items that are equivalent on this node shape.

    A 1-GPU item always sits in one domain, and on a single-domain node every item does, so
    such items are stored as nvlink items (which also serve non-nvlink demand).
    """
    if size == 1 or len(signature) <= 1:
        return (size, True)
    return (size, nvlink)


def _packs(nvlink_sizes: Sequence[int], capacity: list[int]) -> bool:
    """Can these items each go into one domain (first-fit with backtracking)?"""
    if not nvlink_sizes:
        return True
    first, rest = nvlink_sizes[0], nvlink_sizes[1:]
    seen: set[int] = set()
    for i, cap in enumerate(capacity):
        if cap >= first and cap not in seen:
            seen.add(cap)  # domains with equal room are interchangeable
            capacity[i] -= first
            ok = _packs(rest, capacity)
            capacity[i] += first
            if ok:
                return True
    return False


def feasible(pattern: Pattern, signature: Signature) -> bool:
    total = sum(size for size, _ in pattern)
    if total > sum(signature):
        return False
    nvlink_sizes = sorted((size for size, nv in pattern if nv), reverse=True)
    return _packs(nvlink_sizes, list(signature))


def enumerate_patterns(items: Sequence[Item], signature: Signature) -> list[Pattern]:
    """Every feasible pattern over `items` (including the empty one), in a stable order."""
    room, widest = sum(signature), max(signature, default=0)
    kinds = sorted(
        {canonical_item(s, nv, signature) for s, nv in items if s <= (widest if nv else room)},
        reverse=True,
    )
    out: list[Pattern] = []

    def extend(start: int, current: list[Item], used: int) -> None:
        out.append(tuple(current))
        for i in range(start, len(kinds)):
            size = kinds[i][0]
            if used + size > room:
                continue
            current.append(kinds[i])
            if feasible(tuple(current), signature):
                extend(i, current, used + size)
            current.pop()

    extend(0, [], 0)
    return out


def pattern_size(pattern: Pattern) -> int:
    return sum(size for size, _ in pattern)
