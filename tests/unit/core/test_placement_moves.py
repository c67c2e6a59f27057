"""Move decisions (core/moves.py): restart a running gang on a faster type when one is free.

Aspects: the gain formula and the remaining-time estimate by hand; both engines move a long job
from T4s to free H100s, keep a short one or one with much unsaved progress where it is, respect
the hourly budget and the minimum speed-up, never move a gang whose caller gave no progress,
and never take GPUs a pending gang gets in the same decision; the objective counts a move's
value and the validator checks moves; properties on random clusters: every decision validates,
each move goes to a faster type with a positive expected gain.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import CATALOG, cluster, gang

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.moves import expected_remaining, move_gain_s
from gpufleet.core.objective import evaluate
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, MoveRule, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import RunningGang, RunProgress, Snapshot
from gpufleet.core.validate import decision_problems

ENGINES = [Engine.GREEDY, Engine.CPSAT]
H100, T4 = "H100-80GB", "T4"
HOUR = 3600.0


@pytest.mark.parametrize(
    ("remaining", "unsaved", "restart", "speedup", "expected"),
    [
        pytest.param(1000.0, 0.0, 60.0, 2.0, 440.0, id="twice-as-fast"),
        pytest.param(100.0, 0.0, 60.0, 2.0, -10.0, id="too-short-to-pay-the-restart"),
        pytest.param(1000.0, 500.0, 60.0, 2.0, 190.0, id="unsaved-progress-is-redone"),
        pytest.param(1000.0, 0.0, 0.0, 1.0, 0.0, id="same-speed-no-gain"),
    ],
)
def test_gain_by_hand(
    remaining: float, unsaved: float, restart: float, speedup: float, expected: float
) -> None:
    assert move_gain_s(remaining, unsaved, restart, speedup) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("completed", "attained", "expected"),
    [
        pytest.param([10.0, 20.0, 30.0, 100.0], 15.0, (20 + 30 + 100) / 3 - 15, id="longer-ones"),
        pytest.param([10.0, 20.0], 25.0, 25.0, id="longer-than-all-seen"),
        pytest.param([], 5.0, 5.0, id="nothing-seen"),
        pytest.param([10.0, 20.0], 10.0, 10.0, id="exactly-one-length"),
    ],
)
def test_expected_remaining_by_hand(
    completed: list[float], attained: float, expected: float
) -> None:
    assert expected_remaining(completed, attained) == pytest.approx(expected)


def on_t4(
    remaining_s: float = 10 * HOUR, unsaved_s: float = 0.0, recent_moves: int = 0
) -> Snapshot:
    """A 4-GPU job running on a T4 node; an empty H100 node beside it."""
    demand = gang("job", (H100, T4), gpus=4)
    snapshot = cluster().node("t", T4, count=4).node("h", H100).run("job", "t", (0, 1, 2, 3))
    built = snapshot.build()
    (job,) = built.running
    progress = RunProgress(remaining_s, unsaved_s, 60.0, recent_moves)
    return replace(built, running=(replace(job, demand=demand, progress=progress),))


def decide(
    snapshot: Snapshot, pending: list[Gang], engine: Engine, rule: MoveRule | None = None
) -> Decision:
    policy = Policy(solver=SolverSettings(engine=engine), moves=rule or MoveRule())
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_job_moves_to_a_faster_type(engine: Engine) -> None:
    snapshot = on_t4()
    decision = decide(snapshot, [], engine)
    (move,) = decision.moves
    assert (move.gang_id, move.from_type, move.placement.gpu_type) == ("job", T4, H100)
    assert len(move.placement.replicas) == 1 and len(move.placement.replicas[0].gpus) == 4
    # 10 h on T4 at 0.35, or 60 s + 10 h x 0.35 / 4.8 on H100.
    assert move.gain_s == pytest.approx(10 * HOUR - (60 + 10 * HOUR * 0.35 / 4.8))
    policy = Policy()
    assert evaluate(snapshot, [], decision, policy).objective > 0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("snapshot", "rule"),
    [
        pytest.param(on_t4(remaining_s=30.0), None, id="too-short"),
        pytest.param(on_t4(unsaved_s=1000 * HOUR), None, id="too-much-unsaved"),
        pytest.param(on_t4(recent_moves=1), None, id="moved-this-hour"),
        pytest.param(on_t4(), MoveRule(enabled=False), id="moves-off"),
        pytest.param(on_t4(), MoveRule(min_speedup=20.0), id="not-fast-enough"),
        pytest.param(on_t4(), MoveRule(min_gain_s=20 * HOUR), id="gain-below-the-minimum"),
    ],
)
def test_no_move_when_not_worth_it(engine: Engine, snapshot: Snapshot, rule: MoveRule) -> None:
    assert decide(snapshot, [], engine, rule).moves == ()


@pytest.mark.parametrize("engine", ENGINES)
def test_no_move_without_progress(engine: Engine) -> None:
    snapshot = on_t4()
    (job,) = snapshot.running
    assert decide(replace(snapshot, running=(replace(job, progress=None),)), [], engine).moves == ()


@pytest.mark.parametrize("engine", ENGINES)
def test_pending_work_comes_first(engine: Engine) -> None:
    waiting = gang("waiting", H100, gpus=8)
    decision = decide(on_t4(), [waiting], engine)
    assert decision.admitted_ids == {"waiting"}
    assert decision.moves == ()


def in_queue(h100_quota: int) -> Snapshot:
    """`on_t4`, the job charged to queue `a` with room for it on T4 and `h100_quota` H100s."""
    snapshot = on_t4()
    (job,) = snapshot.running
    quotas = {T4: Quota(4, borrowing_limit=0), H100: Quota(h100_quota, borrowing_limit=0)}
    tree = QueueTree.build([QueueSpec("a", None, 1.0, quotas)])
    job = replace(job, queue="a", demand=replace(job.demand, queue="a") if job.demand else None)
    return replace(snapshot, running=(job,), queues=tree)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_move_is_charged_to_its_queue_on_the_new_type(engine: Engine) -> None:
    (move,) = decide(in_queue(h100_quota=4), [], engine).moves
    assert move.placement.gpu_type == H100


@pytest.mark.parametrize("engine", ENGINES)
def test_no_move_beyond_the_queue_quota_of_the_new_type(engine: Engine) -> None:
    assert decide(in_queue(h100_quota=2), [], engine).moves == ()


TYPES = ("H100-80GB", "A100-80GB", "T4", "L4")


@st.composite
def moving_clusters(draw: st.DrawFn) -> Snapshot:
    builder = cluster()
    names = []
    for i in range(draw(st.integers(2, 4))):
        builder.node(f"n{i}", draw(st.sampled_from(TYPES)), count=4)
        names.append(f"n{i}")
    running: list[RunningGang] = []
    for name in names:
        if draw(st.booleans()):
            size = draw(st.sampled_from((1, 2, 4)))
            builder.run(f"r-{name}", name, tuple(range(size)))
    built = builder.build()
    for r in built.running:
        types = tuple(sorted({r.gpu_type, *draw(st.lists(st.sampled_from(TYPES), max_size=2))}))
        demand = gang(r.id, types, gpus=len(r.replicas[0].gpus))
        progress = RunProgress(
            draw(st.floats(0.0, 100 * HOUR)),
            draw(st.floats(0.0, HOUR)),
            60.0,
            draw(st.integers(0, 2)),
        )
        running.append(replace(r, demand=demand, progress=progress))
    return replace(built, running=tuple(running))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(snapshot=moving_clusters(), engine=st.sampled_from(ENGINES))
def test_moves_are_valid_and_worth_it(snapshot: Snapshot, engine: Engine) -> None:
    pending = [gang("p", TYPES[:2], gpus=1)]
    decision = decide(snapshot, pending, engine)
    running = {r.id: r for r in snapshot.running}
    rule = MoveRule()
    for move in decision.moves:
        r = running[move.gang_id]
        assert r.demand is not None and r.progress is not None
        assert r.progress.recent_moves < rule.max_per_hour
        assert move.gain_s > rule.min_gain_s
        new, old = CATALOG[move.placement.gpu_type], CATALOG[r.gpu_type]
        assert new.relative_throughput > (1 + rule.min_speedup) * old.relative_throughput
        assert move.placement.gpu_type in r.demand.type_names()
