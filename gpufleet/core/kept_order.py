"""The queues' order after a CP-SAT solve: what the repair pass and the later evictions may take.

The model keeps every gang greedy admitted ahead, on the GPU types it may use, of the gangs behind
it in the queues' order (cpsat.py `_build_queue_order`): one behind is placed on those types only
if the one ahead is placed too. The model may still leave such a gang ahead pending (a gang
before it took its room, or the counts could not be mapped onto GPUs), and what runs after the
solve, greedy's repair pass (cpsat.py) and the evictions for the gangs still stuck (place.py),
tried the gangs behind it on every type: a smaller gang behind then took the type the one ahead
waits for. Here each gang behind a pending gang that greedy admitted is offered only the types
that gang may not use, for as long as the caller runs greedy or the evictions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from gpufleet.core.decision import GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import Memo, usable_types
from gpufleet.core.policy import Policy
from gpufleet.core.state import ClusterState

__all__ = ["closed_types", "queue_line", "within_order"]


def queue_line(state: ClusterState, pending: Sequence[Gang]) -> list[Gang]:
    """The queues' order greedy tries `pending` in, from `state` before any of them took GPUs
    or quota (empty without queues). Leaves `state` as it was (the gate keeps the queues'
    shares of the first gangs it orders)."""
    return [] if state.gate is None else state.gate.copy().order(pending)


def closed_types(
    state: ClusterState,
    line: Sequence[Gang],
    greedy: Mapping[str, GangPlacement],
    placed: Mapping[str, GangPlacement],
    policy: Policy,
    memo: Memo,
) -> dict[str, frozenset[str]]:
    """Per gang of `line` not in `placed`: the types kept for the gangs ahead of it that greedy
    admitted and that are not placed (their usable types). Growth of running jobs comes last,
    as in the model; it keeps no place itself."""
    closed: set[str] = set()
    out: dict[str, frozenset[str]] = {}
    growth: list[Gang] = []
    for gang in line:
        if gang.id in placed:
            continue
        if gang.grows_from:
            growth.append(gang)
            continue
        out[gang.id] = frozenset(closed)
        if gang.id in greedy:
            closed.update(usable_types(state, gang, policy, memo))
    for gang in growth:
        out[gang.id] = frozenset(closed)
    return out


@contextmanager
def within_order(
    state: ClusterState,
    gangs: Sequence[Gang],
    closed: Mapping[str, frozenset[str]],
    policy: Policy,
    memo: Memo,
) -> Iterator[list[Gang]]:
    """The gangs with a type left open to them, while each one's usable types in `memo` are
    those `closed` leaves it (greedy, preemption and the elastic growth all read them there);
    the memo's types are restored after."""
    saved: dict[str, list[str]] = {}
    open_gangs: list[Gang] = []
    try:
        for gang in gangs:
            shut = closed.get(gang.id, frozenset())
            types = usable_types(state, gang, policy, memo)
            if shut.isdisjoint(types):
                open_gangs.append(gang)
                continue
            saved[gang.id] = types
            left = [t for t in types if t not in shut]
            memo.types[gang.id] = left
            if left:
                open_gangs.append(gang)
        yield open_gangs
    finally:
        memo.types.update(saved)
