"""Refilling a spent single-type reserve (core/refill.py).

Aspects: with every H100 held and the estimate expecting H100-only tasks, a flexible one-GPU
gang moves to a free A100 (both engines; a valid decision; as many as the reserve is short,
the cheapest first); the price by hand (the throughput it loses over its remaining time
against the reserve unit's price); no refill without single-type demand, for a gang that is
not preemptible, is under a disruption budget, has no progress, moved within the hour or holds
a MIG slice, onto GPUs another reserve keeps or a GPU in MIG mode, or when the scarcity weight
makes the unit worth less than the loss; the validator refuses a refill that stays on the type.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang, layout

from gpufleet.core.decision import Decision, Move
from gpufleet.core.moves import move_gain_s
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings, Weights
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.core.workload import TaskShape, WorkloadEstimate
from gpufleet.model.mig import MigLayout

ENGINES = [Engine.GREEDY, Engine.CPSAT]
H100, A100 = "H100-80GB", "A100-80GB"
HOUR = 3600.0
FLEXIBLE = gang("flex", (A100, H100))
PROGRESS = RunProgress(10 * HOUR, 0.0, 60.0, 0)


def h100_only(share: float, a100_only: float = 0.0) -> WorkloadEstimate:
    """One-GPU tasks: `share` accept only H100, `a100_only` only A100, the rest either."""
    shapes = {TaskShape((H100,), 1): share, TaskShape((A100, H100), 1): 1 - share - a100_only}
    if a100_only:
        shapes[TaskShape((A100,), 1)] = a100_only
    return WorkloadEstimate.of(shapes)


def full_h100(
    flexible: dict[int, RunProgress | None],
    workload: WorkloadEstimate | None,
    a100_held: tuple[int, ...] = (),
    preemptible: bool = True,
    disruptable: bool = True,
    a100_mig: dict[int, MigLayout] | None = None,
    v100: bool = False,
) -> Snapshot:
    """Every GPU of the 8-GPU H100 node held: flexible one-GPU gangs `f<g>` on GPUs `flexible`
    (with that progress; None: none known), H100-only gangs on the others; an 8-GPU A100 node
    with `a100_held` GPUs held (and `a100_mig` layouts); with `v100`, an empty 8-GPU V100 node
    the flexible gangs do not accept."""
    builder = cluster().node("h", H100).node("a", A100, mig=a100_mig)
    if v100:
        builder.node("v", "V100-32GB")
    for g in range(8):
        name = f"f{g}" if g in flexible else f"c{g}"
        builder.run(name, "h", (g,), preemptible=preemptible)
    for g in a100_held:
        builder.run(f"a{g}", "a", (g,))
    built = builder.build()
    running: list[RunningGang] = []
    for r in built.running:
        if r.id.startswith("f"):
            progress = flexible[int(r.id[1:])]
            demand = replace(FLEXIBLE, id=r.id)
            r = replace(r, demand=demand, progress=progress, disruptable=disruptable)
        running.append(r)
    return replace(built, running=tuple(running), workload=workload)


def decide(snapshot: Snapshot, engine: Engine, weights: Weights | None = None) -> Decision:
    policy = Policy(weights=weights or Weights(), solver=SolverSettings(engine=engine))
    decision = place(snapshot, [], policy)
    assert decision_problems(snapshot, [], decision) == []
    return decision


def refills(decision: Decision) -> list[tuple[str, str, str | None]]:
    return [(m.gang_id, m.placement.gpu_type, m.for_reserve) for m in decision.moves]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_spent_reserve_is_refilled_from_a_flexible_gang(engine: Engine) -> None:
    # 8 A100 GPUs spare; an H100-only share of 0.1 expects 0.8 H100 GPU, kept as 2; none is
    # empty. The one flexible gang on the H100s moves to an A100 GPU for the reserve.
    decision = decide(full_h100({7: PROGRESS}, h100_only(0.1)), engine)
    assert refills(decision) == [("f7", A100, H100)]
    (move,) = decision.moves
    assert move.from_type == H100
    # It finishes later: restart plus its remaining 10 h at 2.8 / 4.8 of the speed.
    assert move.gain_s == pytest.approx(move_gain_s(10 * HOUR, 0.0, 60.0, 2.8 / 4.8))
    assert move.gain_s < 0


@pytest.mark.parametrize("engine", ENGINES)
def test_only_as_many_as_the_reserve_is_short_cheapest_first(engine: Engine) -> None:
    # A share of 0.05 expects 0.4 GPU over 8 spare: one H100 is kept, so one of the three
    # flexible gangs moves: the one with the least remaining time finishes the least later.
    progress = {
        5: RunProgress(30 * HOUR, 0.0, 60.0, 0),
        6: RunProgress(2 * HOUR, 0.0, 60.0, 0),
        7: RunProgress(20 * HOUR, 0.0, 60.0, 0),
    }
    decision = decide(full_h100(progress, h100_only(0.05)), engine)
    assert refills(decision) == [("f6", A100, H100)]


def test_the_price_by_hand() -> None:
    # The unit is worth scarcity x H100 worth 4.8 (9.6 at the default 2). Over its remaining
    # time R the gang loses 4.8 x loss / (R + loss) of work rate, 4.8 - 2.8 = 2 without a
    # restart; where it lands, the free A100 it takes was a fragment for the H100-only tenth
    # of the tasks (fragmentation -0.1). At scarcity 0.35 (1.68) even the slowdown stays.
    assert decide(full_h100({7: PROGRESS}, h100_only(0.1)), Engine.GREEDY).moves != ()
    weights = Weights(scarcity=0.35)
    assert decide(full_h100({7: PROGRESS}, h100_only(0.1)), Engine.GREEDY, weights).moves == ()
    # At 0.45 (2.16): without a restart 2 - 0.1 = 1.9 pays; with a restart of half its remaining
    # time (loss 1.21 h of R = 1 h) 4.8 x 1.21 / 2.21 - 0.1 = 2.53 does not.
    weights = Weights(scarcity=0.45)
    fast = RunProgress(HOUR, 0.0, 0.0, 0)
    slow = RunProgress(HOUR, 0.0, HOUR / 2, 0)
    assert refills(decide(full_h100({7: fast}, h100_only(0.1)), Engine.GREEDY, weights)) == [
        ("f7", A100, H100)
    ]
    assert decide(full_h100({7: slow}, h100_only(0.1)), Engine.GREEDY, weights).moves == ()


@pytest.mark.parametrize(
    "snapshot",
    [
        # No single-type demand: no reserve to refill.
        pytest.param(
            full_h100({7: PROGRESS}, WorkloadEstimate.of({TaskShape((A100, H100), 1): 1.0})),
            id="no-single-type-demand",
        ),
        pytest.param(full_h100({7: PROGRESS}, None), id="no-estimate"),
        pytest.param(
            full_h100({7: PROGRESS}, h100_only(0.1), preemptible=False), id="not-preemptible"
        ),
        pytest.param(full_h100({7: PROGRESS}, h100_only(0.1), disruptable=False), id="pdb"),
        pytest.param(full_h100({7: None}, h100_only(0.1)), id="no-progress"),
        pytest.param(
            full_h100({7: RunProgress(10 * HOUR, 0.0, 60.0, 1)}, h100_only(0.1)),
            id="moved-within-the-hour",
        ),
        # 2 A100 GPUs spare: an A100-only share of 0.3 expects 0.6 and keeps both, so the move
        # would take one the A100 reserve keeps.
        pytest.param(
            full_h100({7: PROGRESS}, h100_only(0.1, a100_only=0.3), a100_held=tuple(range(6))),
            id="room-another-reserve-keeps",
        ),
        # The one free A100 GPU is in MIG mode: taking it whole would switch its layout, which
        # a refill never does (a move in the same decision may be leaving it). 9 GPUs spare.
        pytest.param(
            full_h100(
                {7: PROGRESS},
                h100_only(0.1),
                a100_held=tuple(range(1, 8)),
                a100_mig={0: layout("3g.40gb@0", "3g.40gb@4")},
                v100=True,
            ),
            id="no-layout-change",
        ),
    ],
)
def test_no_refill(snapshot: Snapshot) -> None:
    for engine in ENGINES:
        assert decide(snapshot, engine).moves == ()


def test_a_mig_gang_is_not_moved_to_refill() -> None:
    builder = cluster().node("h", H100, mig={7: layout("1g.10gb@0")}).node("a", A100)
    for g in range(7):
        builder.run(f"c{g}", "h", (g,))
    builder.run("m", "h", (7,), mig="1g.10gb@0")
    built = builder.build()
    mig = replace(gang("m", (A100, H100), mig="1g.10gb"))
    running = tuple(
        replace(r, demand=mig, progress=PROGRESS) if r.id == "m" else r for r in built.running
    )
    snapshot = replace(built, running=running, workload=h100_only(0.1))
    assert decide(snapshot, Engine.GREEDY).moves == ()


def test_the_validator_refuses_a_refill_that_stays_on_the_type() -> None:
    snapshot = full_h100({6: PROGRESS, 7: PROGRESS}, h100_only(0.1))
    (f7,) = [r for r in snapshot.running if r.id == "f7"]
    decision = decide(snapshot, Engine.GREEDY)
    placement = replace(
        decision.moves[0].placement,
        gang_id="f7",
        gpu_type=H100,
        replicas=(ReplicaPlacement("h", (7,)),),
    )
    bad = replace(decision, moves=(Move("f7", H100, placement, -1.0, for_reserve=H100),))
    assert any("refilled the H100-80GB reserve" in p for p in decision_problems(snapshot, [], bad))
    assert f7.gpu_type == H100
