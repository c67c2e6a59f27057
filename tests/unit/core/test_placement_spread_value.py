"""A wide gang with no packed room on its best type takes a packed placement on a slower type
when that is worth more at the speeds the two would get (`Gang.spread_speed`), and one slow
spread with no packed room anywhere waits a while for it (spread_hold.py), on both engines."""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import checked_decision, cluster, gang

from gpufleet.core.decision import Decision, PendingReason
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Engine
from gpufleet.core.snapshot import RunProgress, Snapshot
from gpufleet.core.spread_hold import HOLD_S
from gpufleet.core.workload import TaskShape, WorkloadEstimate

ENGINES = [Engine.GREEDY, Engine.CPSAT]


def placed(decision: Decision, gang_id: str) -> tuple[str, list[str]]:
    placement = next(p for p in decision.placements if p.gang_id == gang_id)
    return placement.gpu_type, sorted({r.node for r in placement.replicas})


def half_full_h100s() -> Snapshot:
    """Four 8-GPU H100 nodes with 4 GPUs free on each (16 free, but no 2 nodes hold 16) and two
    empty 8-GPU A100 nodes."""
    builder = cluster().nodes_of("h", "H100-80GB", 4).nodes_of("a", "A100-80GB", 2)
    for i in range(4):
        builder.run(f"r{i}", f"h{i}", (0, 1, 2, 3))
    return builder.build()


def wide(spread_speed: float) -> Gang:
    g = gang(
        "wide",
        ("H100-80GB", "A100-80GB"),
        replicas=16,
        throughput={"H100-80GB": 2.0, "A100-80GB": 1.5},
    )
    return replace(g, spread_speed=spread_speed)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_packed_slower_type_beats_a_slow_spread_on_the_faster_one(engine: Engine) -> None:
    # H100 spread over 4 nodes: 2.0 x 0.3 = 0.6 per GPU; A100 on 2 whole nodes: 1.5.
    decision = checked_decision(half_full_h100s(), [wide(0.3)], engine)
    assert placed(decision, "wide") == ("A100-80GB", ["a0", "a1"])


@pytest.mark.parametrize("engine", ENGINES)
def test_priced_types_weigh_the_spread_too(engine: Engine) -> None:
    # With a workload estimate, greedy compares the types' plans net of their prices.
    shapes = {TaskShape(("A100-80GB", "H100-80GB"), 1): 1.0}
    snapshot = replace(half_full_h100s(), workload=WorkloadEstimate.of(shapes))
    decision = checked_decision(snapshot, [wide(0.3)], engine)
    assert placed(decision, "wide") == ("A100-80GB", ["a0", "a1"])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_mild_spread_on_the_faster_type_is_still_taken(engine: Engine) -> None:
    # 2.0 x 0.9 = 1.8 per GPU beats the packed A100's 1.5.
    decision = checked_decision(half_full_h100s(), [wide(0.9)], engine)
    gpu_type, nodes = placed(decision, "wide")
    assert gpu_type == "H100-80GB" and len(nodes) == 4


def half_full_h100s_only() -> Snapshot:
    """Four 8-GPU H100 nodes with 4 GPUs free on each: 16 free, but no 2 nodes hold 16 until
    the gangs on them end, expected in 5 minutes (packed room in sight)."""
    builder = cluster().nodes_of("h", "H100-80GB", 4)
    for i in range(4):
        builder.run(f"r{i}", f"h{i}", (0, 1, 2, 3))
    snapshot = builder.build()
    soon = RunProgress(expected_remaining_s=300.0)
    return replace(snapshot, running=tuple(replace(r, progress=soon) for r in snapshot.running))


def waiting_wide(spread_speed: float, waited_s: float) -> Gang:
    g = gang("wide", "H100-80GB", replicas=16, waited_s=waited_s)
    return replace(g, spread_speed=spread_speed)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_slow_spread_gang_waits_a_while_for_packed_room(engine: Engine) -> None:
    decision = checked_decision(half_full_h100s_only(), [waiting_wide(0.3, 60.0)], engine)
    assert not decision.placements
    (reason,) = [p for p in decision.pending if p.gang_id == "wide"]
    assert reason.reason is PendingReason.TOPOLOGY and "0.30 of its speed" in reason.message


@pytest.mark.parametrize("engine", ENGINES)
def test_it_starts_spread_once_it_has_waited_the_bound(engine: Engine) -> None:
    decision = checked_decision(half_full_h100s_only(), [waiting_wide(0.3, HOLD_S)], engine)
    assert len(placed(decision, "wide")[1]) == 4


@pytest.mark.parametrize("engine", ENGINES)
def test_a_gang_that_loses_little_spread_starts_at_once(engine: Engine) -> None:
    decision = checked_decision(half_full_h100s_only(), [waiting_wide(0.9, 0.0)], engine)
    assert len(placed(decision, "wide")[1]) == 4


@pytest.mark.parametrize("engine", ENGINES)
def test_a_gang_with_packed_room_on_another_type_is_not_held(engine: Engine) -> None:
    decision = checked_decision(half_full_h100s(), [replace(wide(0.3), waited_s=0.0)], engine)
    assert placed(decision, "wide") == ("A100-80GB", ["a0", "a1"])
