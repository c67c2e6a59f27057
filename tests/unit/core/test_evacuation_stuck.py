"""The quick test that passes a node over before a reclaim's what-if (evacuation.py `_stuck`).

For a gang owed its nominal quota, relocation and reclaim with moves try every node of its
types; on a busy fleet most of them hold a gang no reclaim may take that cannot move, or more
than `MAX_RELOCATED` such gangs. `_stuck` finds those nodes without the what-if on the queues'
accounts, so it must never pass over a node the what-if would have kept as an option: checked
on random full nodes (`test_queue_properties.blocked`) with gangs of the owed gang's own queue,
of mixed priorities, some not disruptable, and an owed gang of a random priority; and on the
relocation test's node, which is an option, and stuck once one of its two blockers may not be
disrupted.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.admission import QueueGate
from gpufleet.core.demand import Gang
from gpufleet.core.evacuation import (
    MAX_RELOCATED,
    _blocking,
    _movable,
    _split,
    _stuck,
)
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import RunningGang, Snapshot
from gpufleet.core.state import ClusterState
from tests.unit.core.test_placement_properties import FAST
from tests.unit.core.test_queue_properties import blocked
from tests.unit.core.test_queue_reclaim_relocation import lender, snapshot


def gated(snap: Snapshot, policy: Policy) -> ClusterState:
    state = ClusterState(snap)
    state.gate = QueueGate(snap, policy.queue_aging_s, tier_gpu_s=policy.service_tier_gpu_s)
    return state


def option(found: list[RunningGang] | None, wide: Gang, policy: Policy) -> bool:
    """Whether blockers found by a what-if make the node an option (`_relocation`,
    `_clearing`): at most `MAX_RELOCATED` of them, each movable."""
    return (
        found is not None
        and len(found) <= MAX_RELOCATED
        and all(_movable(b, wide, policy) for b in found)
    )


@FAST
@given(case=blocked(), data=st.data())
def test_a_node_passed_over_at_once_is_never_an_option(
    case: tuple[Snapshot, list[Gang]], data: st.DataObject
) -> None:
    snapshot, pending = case
    running = []
    for r in snapshot.running:
        queue = "lender" if data.draw(st.integers(0, 4)) == 0 else r.queue
        priority = data.draw(st.integers(0, 2))
        disruptable = data.draw(st.integers(0, 9)) > 0
        running.append(replace(r, queue=queue, priority=priority, disruptable=disruptable))
    snapshot = replace(snapshot, running=tuple(running))
    wide = replace(pending[0], priority=data.draw(st.integers(0, 2)))
    policy = Policy()
    state = gated(snapshot, policy)
    for n in range(len(state.nodes)):
        relocation = _blocking(state, n, wide, frozenset())
        if _stuck(state, n, wide, frozenset(), policy, in_queue=False):
            assert not (relocation and option(relocation, wide, policy))
        split = _split(state, n, wide, frozenset())
        if _stuck(state, n, wide, frozenset(), policy, in_queue=True):
            assert not (split is not None and option(split[1], wide, policy))


def test_the_node_of_borrowers_and_two_movable_blockers_is_tried() -> None:
    # a0: six one-GPU borrowers a reclaim takes and two `keeper` gangs, the second of which it
    # may not take once the first is gone (test_queue_reclaim_relocation.py).
    policy, wide = Policy(), lender()
    state = gated(snapshot(), policy)
    a0 = state.node_index["a0"]
    assert not _stuck(state, a0, wide, frozenset(), policy, in_queue=False)
    found = _blocking(state, a0, wide, frozenset())
    assert [b.id for b in found] == ["keep-1"] and option(found, wide, policy)
    # The two keeper gangs in the lender's own queue (its nominal 10: still owed 8 more):
    # `_split` (reclaims only) keeps both, still an option (two movable blockers).
    own = snapshot(lender_nominal=10)
    own = replace(
        own,
        running=tuple(
            replace(r, queue="lender") if r.id.startswith("keep") else r for r in own.running
        ),
    )
    state = gated(own, policy)
    assert not _stuck(state, a0, wide, frozenset(), policy, in_queue=True)
    split = _split(state, a0, wide, frozenset())
    assert split is not None and option(split[1], wide, policy) and len(split[1]) == 2
    # One keeper gang a disruption budget protects now: it can neither go nor move.
    pinned = snapshot()
    pinned = replace(
        pinned,
        running=tuple(
            replace(r, disruptable=False) if r.id == "keep-1" else r for r in pinned.running
        ),
    )
    state = gated(pinned, policy)
    assert _stuck(state, a0, wide, frozenset(), policy, in_queue=False)
    assert not option(_blocking(state, a0, wide, frozenset()), wide, policy)
