"""Node reserves keep the whole nodes that GPU reserves of their types need.

Aspects: `claimed_slots` by hand (a GPU reserve that finds its GPUs outside the free slots
claims none; one that needs them claims a slot per node's worth begun; a reserve with a type the
slot kind lacks claims none); the node reserve adds the claimed slots (`Reserve.claimed`); both
engines place a flexible one-GPU gang on a 4-GPU T4 node rather than break either empty 8-GPU
node when one of them is all the room an A100-only class has and the other is the room the next
8-GPU task needs (the held-out Alibaba `multigpu20` orders 9 and 23, where small pods took the
8-GPU V100 nodes, a MIG pod the last empty A100 node, and an 8-GPU pod waited with 30 GPUs free);
a running job is not moved onto either for its speed, as a node reserve that claims nothing
would let it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import checked_decision, cluster, gang

from gpufleet.core.policy import Engine, Policy
from gpufleet.core.pricing import Pricing
from gpufleet.core.scarcity import Reserve, SlotKind, claimed_slots
from gpufleet.core.snapshot import RunProgress, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.workload import TaskShape, WorkloadEstimate

ENGINES = [Engine.GREEDY, Engine.CPSAT]
A100, V100, T4 = "A100-80GB", "V100-32GB", "T4"
EIGHT = SlotKind((A100, V100), 8, False)


def kept(gpus: float) -> dict[tuple[str, ...], Reserve]:
    """An A100-only GPU reserve keeping `gpus` GPUs (free and price do not matter here)."""
    return {(A100,): Reserve(A100, 8.0, gpus, 1.0)}


@pytest.mark.parametrize(
    ("empty", "slots", "reserves", "claimed"),
    [
        # 6 kept, 6 empty A100 GPUs on partly used nodes: none inside a free slot is needed.
        pytest.param({A100: 14}, {A100: 1}, kept(6), 0, id="room-outside-the-slots"),
        # 6 kept, all 8 empty A100 GPUs are one free slot: it is claimed.
        pytest.param({A100: 8}, {A100: 1}, kept(6), 1, id="the-only-empty-node"),
        # 10 kept, 2 outside, two free slots: 8 more GPUs, one slot.
        pytest.param({A100: 18}, {A100: 2}, kept(10), 1, id="eight-short-one-slot"),
        # 11 kept, 2 outside: 9 short, two slots begun.
        pytest.param({A100: 18}, {A100: 2}, kept(11), 2, id="nine-short-two-slots"),
        # A reserve over A100 and T4 may keep its GPUs on T4, which the kind lacks.
        pytest.param(
            {A100: 8, T4: 4},
            {A100: 1},
            {(A100, T4): Reserve(f"{A100},{T4}", 12.0, 6.0, 1.0)},
            0,
            id="a-type-outside-the-kind",
        ),
    ],
)
def test_claimed_slots_by_hand(
    empty: dict[str, int],
    slots: dict[str, int],
    reserves: dict[tuple[str, ...], Reserve],
    claimed: int,
) -> None:
    assert claimed_slots(EIGHT, slots, empty, reserves) == claimed


# Task counts: one-GPU A100-only tasks, 8-GPU tasks of A100 or V100, one-GPU tasks of any type.
# Shares of the GPUs: 0.2 / 1.14, 0.16 / 1.14 and 0.78 / 1.14.
WORKLOAD = WorkloadEstimate.of(
    {
        TaskShape((A100,), 1): 0.2,
        TaskShape((A100, V100), 8): 0.02,
        TaskShape((A100, T4, V100), 1): 0.78,
    }
)
FLEXIBLE = gang("small", (A100, T4, V100))


def empty_fleet() -> Snapshot:
    """An empty 8-GPU A100 node, an empty 8-GPU V100 node, an empty 4-GPU T4 node."""
    built = cluster().node("a", A100).node("v", V100).node("t", T4, 4).build()
    return replace(built, workload=WORKLOAD)


def test_the_node_reserve_adds_the_slot_the_a100_reserve_needs() -> None:
    # Spare: 20 empty GPUs - 1 asked = 19. A100-only: 0.2 / 1.14 x 19 = 3.33 GPUs expected,
    # kept as 6 whole (Poisson(3.33) <= 5: 0.88, <= 6: 0.95), all on node a: one slot claimed.
    # 8-GPU tasks: 0.16 / 1.14 x 19 / 8 = 0.33 slots expected, plus the claimed one.
    pricing = Pricing(ClusterState(empty_fleet()), Policy(), [FLEXIBLE])
    gpu_reserve = pricing.gpu_reserves[(A100,)]
    assert gpu_reserve.reserved == 6.0
    reserve = pricing.slot_reserves[EIGHT]
    assert reserve.claimed == 1.0
    assert reserve.reserved == pytest.approx(0.16 / 1.14 * 19 / 8 + 1)
    assert reserve.free == 2.0


@pytest.mark.parametrize("engine", ENGINES)
def test_a_flexible_gang_leaves_both_8_gpu_nodes_whole(engine: Engine) -> None:
    # Without the claimed slot 0.33 slots were kept of 2 free: the gang took an A100 for its
    # speed, breaking the node the A100-only class needs, and the next 8-GPU task found only V100.
    decision = checked_decision(empty_fleet(), [FLEXIBLE], engine)
    assert [(p.gang_id, p.gpu_type) for p in decision.placements] == [("small", T4)]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_running_job_is_not_moved_onto_a_claimed_node(engine: Engine) -> None:
    # The job runs on the T4 node; a move to an A100 or a V100 is much faster. A move keeps
    # the one slot the next 8-GPU task needs and the slot the A100 reserve claims: 1.33 of the
    # 2 free slots, so breaking either costs. Before, a move kept at most one slot and went to
    # an A100.
    built = cluster().node("a", A100).node("v", V100).node("t", T4, 4).run("small", "t", (0,))
    snapshot = built.build()
    progress = RunProgress(10 * 3600.0, 0.0, 60.0, 0)
    running = tuple(replace(r, demand=FLEXIBLE, progress=progress) for r in snapshot.running)
    snapshot = replace(snapshot, running=running, workload=WORKLOAD)
    assert checked_decision(snapshot, [], engine).moves == ()
