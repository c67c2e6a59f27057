"""A gang is held for packed room (spread_hold.py) only while that room is in sight, so it does
not give its free GPUs to small gangs behind it that would keep them for good: the held-out
mechanism of bench/README.md's fortieth pass (a 24-GPU gang held once, its free GPUs taken by the
gangs behind it, waited 4.6 h), built small, on both engines, with and without queues."""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import checked_decision, cluster, gang

from gpufleet.core.decision import Decision, PendingReason
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Engine
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import RunProgress, Snapshot

ENGINES = [Engine.GREEDY, Engine.CPSAT]
T4 = "T4"


def four_t4s(blockers_left_s: float | None, queues: bool) -> Snapshot:
    """Four 4-GPU T4 nodes: t0 empty, t1 and t2 with one GPU taken each by a one-GPU gang
    expected to run `blockers_left_s` more (None: no estimate), t3 full of a long gang. Eight
    one-GPU replicas fit on 2 nodes, but only t0 is whole: 10 GPUs free, on 3 nodes. With
    `queues`, everything is in one queue whose quota is the whole cluster."""
    q = "q" if queues else None
    builder = cluster().nodes_of("t", T4, 4, count=4)
    builder.run("b1", "t1", (0,), queue=q).run("b2", "t2", (0,), queue=q)
    builder.run("full", "t3", (0, 1, 2, 3), queue=q)
    if queues:
        builder.queues(QueueTree.build([QueueSpec("q", quotas={T4: Quota(16)})]))
    snapshot = builder.build()
    running = []
    for r in snapshot.running:
        left = 36_000.0 if r.id == "full" else blockers_left_s
        progress = None if left is None else RunProgress(expected_remaining_s=left)
        running.append(replace(r, progress=progress))
    return replace(snapshot, running=tuple(running))


def wide(queues: bool) -> Gang:
    # Arrived first (waited longest), so it goes before the small gangs in every order.
    g = gang("wide", T4, replicas=8, waited_s=120.0, queue="q" if queues else None)
    return replace(g, spread_speed=0.2)


def smalls(n: int, queues: bool) -> list[Gang]:
    return [gang(f"s{i}", T4, waited_s=10.0, queue="q" if queues else None) for i in range(n)]


def nodes_of(decision: Decision, gang_id: str) -> set[str]:
    placement = next(p for p in decision.placements if p.gang_id == gang_id)
    return {r.node for r in placement.replicas}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("queues", [False, True])
@pytest.mark.parametrize("left_s", [None, 36_000.0])
def test_with_no_packed_room_in_sight_the_wide_gang_starts_spread_now(
    engine: Engine, queues: bool, left_s: float | None
) -> None:
    # t1 and t2 stay busy past the hold (or nobody knows): holding would only give its 10 free
    # GPUs to the small gangs behind it, which nothing brings back.
    pending = [wide(queues), *smalls(2, queues)]
    decision = checked_decision(four_t4s(left_s, queues), pending, engine)
    assert nodes_of(decision, "wide") == {"t0", "t1", "t2"}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("queues", [False, True])
def test_with_packed_room_in_sight_it_is_held(engine: Engine, queues: bool) -> None:
    # t1's blocker ends in 5 min: t0 + t1 will hold the 8 replicas packed, so it waits; the
    # small gangs behind it take free GPUs meanwhile.
    pending = [wide(queues), *smalls(2, queues)]
    decision = checked_decision(four_t4s(300.0, queues), pending, engine)
    (reason,) = [p for p in decision.pending if p.gang_id == "wide"]
    assert reason.reason is PendingReason.TOPOLOGY and "0.20 of its speed" in reason.message
    assert {p.gang_id for p in decision.placements} == {"s0", "s1"}
