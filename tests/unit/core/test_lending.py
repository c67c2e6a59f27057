"""Standby replicas lend their GPUs (core/lending.py).

Aspects under test: a preemptible gang of lower priority borrows a sleeping replica's GPU and
the loan is reported; a non-preemptible gang, or one of the lender's priority or higher, never
does; a gang that fits on free GPUs is placed there without a loan; borrowing never preempts;
without lenders the decision is `place`'s.
"""

from __future__ import annotations

from placement_builders import CATALOG, gang

from gpufleet.core.lending import place_with_lending
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.model.inventory import make_node

POLICY = Policy(solver=SolverSettings(engine=Engine.GREEDY))


def fleet(free: int = 0) -> tuple[Snapshot, list[RunningGang]]:
    """A 4-GPU node: two awake training gangs, two asleep standbys, `free` more GPUs."""
    node = make_node("n0", CATALOG["H100-80GB"], 4 + free)
    running = (
        RunningGang("train-a", "H100-80GB", (ReplicaPlacement("n0", (0,)),), 0, False),
        RunningGang("train-b", "H100-80GB", (ReplicaPlacement("n0", (1,)),), 0, False),
    )
    standbys = [
        RunningGang(
            f"web-prefill-standby-{g}", "H100-80GB", (ReplicaPlacement("n0", (g,)),), 5, False
        )
        for g in (2, 3)
    ]
    return Snapshot(CATALOG, (node,), running), standbys


def test_a_preemptible_low_priority_gang_borrows_and_the_loan_is_named() -> None:
    snapshot, standbys = fleet()
    pending = [gang("job", "H100-80GB", gpus=2, priority=0)]
    result = place_with_lending(snapshot, pending, POLICY, standbys)
    assert result.decision.admitted_ids == {"job"}
    assert result.borrowed == (
        ("web-prefill-standby-2", "job"),
        ("web-prefill-standby-3", "job"),
    )
    assert result.decision.preemptions == ()
    assert decision_problems(snapshot, pending, result.decision) == []


def test_protected_or_higher_priority_gangs_do_not_borrow() -> None:
    snapshot, standbys = fleet()
    pending = [
        gang("rigid", "H100-80GB", gpus=1, priority=0, preemptible=False),
        gang("urgent", "H100-80GB", gpus=1, priority=5),
    ]
    result = place_with_lending(snapshot, pending, POLICY, standbys)
    assert result.decision.admitted_ids == set()
    assert result.borrowed == ()
    assert {p.gang_id for p in result.decision.pending} == {"rigid", "urgent"}


def test_only_the_gangs_the_caller_accepts_borrow() -> None:
    snapshot, standbys = fleet()
    pending = [gang("loses-work", "H100-80GB", gpus=1), gang("on-signal", "H100-80GB", gpus=1)]
    result = place_with_lending(
        snapshot, pending, POLICY, standbys, may_lend_to=lambda g: g.id == "on-signal"
    )
    assert result.decision.admitted_ids == {"on-signal"}
    assert [b for _, b in result.borrowed] == ["on-signal"]
    assert {p.gang_id for p in result.decision.pending} == {"loses-work"}


def test_free_gpus_are_used_before_lent_ones() -> None:
    snapshot, standbys = fleet(free=2)
    pending = [gang("job", "H100-80GB", gpus=2, priority=0)]
    result = place_with_lending(snapshot, pending, POLICY, standbys)
    placement = result.decision.placement("job")
    assert placement is not None and set(placement.replicas[0].gpus) == {4, 5}
    assert result.borrowed == ()


def test_without_lenders_it_is_place() -> None:
    snapshot, _ = fleet(free=1)
    pending = [gang("job", "H100-80GB", gpus=1)]
    assert place_with_lending(snapshot, pending, POLICY, []).decision == place(
        snapshot, pending, POLICY
    )
