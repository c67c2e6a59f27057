"""The queues' order across queues holds with CP-SAT as with greedy (cpsat.py `_build_queue_order`).

Greedy offers pending gangs in the queues' order (fairshare.py: the queue furthest below its
fair share first, a gang waiting past `queue_aging_s` ahead of both) and admits each one that
fits. CP-SAT used that order as its hint only: its objective, which counts one more started gang
as worth more, passed over an 8-GPU gang of a queue under its share for two 4-GPU gangs of a
queue over it, and over an aged gang the same way. Now a gang greedy admits keeps its place for
the GPU types it may use: a gang behind it is placed on those types only if it is placed too.

Aspects, with both engines: fair share and aging across queues; aging inside a queue against
the model's chain of alike gangs (the service tier's fresh ones first); a gang ahead that
greedy could not fit binds nothing (one behind it still takes the free GPUs); the solver still
improves on greedy where that keeps the order (a gang ahead moved to another type to make room
for one behind); what runs after the solve keeps the order too (the greedy repair pass and the
evictions for the gangs still stuck: kept_order.py); and a property on random queued clusters:
a gang greedy admits is left pending by CP-SAT only if no gang behind it in the queues' order is
placed on a type it may use, and greedy's decision, which hints every boolean of the order, is a
solution of the model.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.admission import QueueGate
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import greedy_order
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from tests.unit.core.placement_builders import checked_decision, cluster, gang
from tests.unit.core.test_cpsat_hint import solved_on_the_hint, unhinted
from tests.unit.core.test_placement_properties import FAST
from tests.unit.core.test_queue_properties import NAMES, queued

H100, A100 = "H100-80GB", "A100-80GB"
ENGINES = pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT], ids=str)
AGED = 7200.0  # past the default queue_aging_s (3,600 s)


def rich_and_poor() -> Snapshot:
    """Two 8-GPU H100 nodes; queue rich (no nominal quota) runs one 8-GPU gang on h1, queue
    poor (no nominal quota either) runs nothing: poor is furthest below its fair share."""
    tree = QueueTree.build([QueueSpec("rich", quotas={H100: Quota(0)}), QueueSpec("poor")])
    return (
        cluster()
        .node("h0", H100)
        .node("h1", H100)
        .run("r0", "h1", tuple(range(8)), queue="rich")
        .queues(tree)
        .build()
    )


@ENGINES
def test_a_queue_under_its_share_goes_before_one_over_it(engine: Engine) -> None:
    # Two 4-GPU gangs start one more gang than the 8-GPU one: CP-SAT took them, leaving poor's
    # gang pending behind the queue that already held half the cluster.
    pending = [gang(f"r{i}", gpus=4, queue="rich") for i in (1, 2)] + [
        gang("p1", gpus=8, queue="poor")
    ]
    decision = checked_decision(rich_and_poor(), pending, engine)
    assert decision.admitted_ids == {"p1"}
    assert decision.stats.engine == engine.value


@ENGINES
def test_an_aged_gang_goes_before_the_fair_share_order(engine: Engine) -> None:
    # Fresh, poor's two gangs would go first; rich's 8-GPU gang has waited past the aging time.
    pending = [
        gang("p1", gpus=4, queue="poor"),
        gang("p2", gpus=4, queue="poor"),
        gang("r1", gpus=8, queue="rich", waited_s=AGED),
    ]
    assert checked_decision(rich_and_poor(), pending, engine).admitted_ids == {"r1"}
    fresh = [g if g.id != "r1" else gang("r1", gpus=8, queue="rich") for g in pending]
    assert checked_decision(rich_and_poor(), fresh, engine).admitted_ids == {"p1", "p2"}


def aged_and_fresh() -> tuple[Snapshot, list[Gang]]:
    """Queue poor, on two H100 nodes: h0 free; on h1 a served gang (past the service tier's
    threshold) runs on GPUs 0-3 beside a non-preemptible one. Pending, alike but for wait and
    service: `served` (8 GPUs, a run before, waiting past the aging time) and `fresh` (8 GPUs,
    just come); then `small` (4 GPUs, fresh). In line the aged gang goes first (fairshare.py),
    ahead of the service tier's order. Greedy: `served` on h0, `fresh` finds no room and no
    victims, `small` evicts the served runner on h1 (service tier) and must be admitted."""
    tree = QueueTree.build([QueueSpec("poor")])
    snapshot = (
        cluster()
        .node("h0", H100)
        .node("h1", H100)
        .run("old", "h1", (0, 1, 2, 3), queue="poor")
        .run("pinned", "h1", (4, 5, 6, 7), preemptible=False, queue="poor")
        .queues(tree)
        .build()
    )
    running = tuple(
        replace(r, attained_gpu_s=1e5) if r.id == "old" else r for r in snapshot.running
    )
    served = replace(gang("served", gpus=8, queue="poor", waited_s=AGED), attained_gpu_s=1e5)
    pending = [
        gang("fresh", gpus=8, queue="poor", waited_s=60.0),
        served,
        gang("small", gpus=4, queue="poor"),
    ]
    return replace(snapshot, running=running), pending


@ENGINES
def test_an_aged_gang_goes_before_a_fresh_alike_one(engine: Engine) -> None:
    # The model's first-come chain of alike gangs put the service tier's fresh gang first, the
    # queues' order the aged one; with `small` (behind both) bound to be admitted, the model had
    # no solution and the decision fell back to greedy's.
    snapshot, pending = aged_and_fresh()
    decision = checked_decision(snapshot, pending, engine)
    assert decision.admitted_ids == {"served", "small"}
    assert [p.gang_id for p in decision.preemptions] == ["old"]
    assert decision.stats.engine == engine.value


def test_greedy_admitting_the_aged_gang_is_a_solution_of_the_model() -> None:
    snapshot, pending = aged_and_fresh()
    with solved_on_the_hint() as built:
        hinted = place(snapshot, pending, Policy(solver=SolverSettings(engine=Engine.CPSAT)))
    assert built
    assert hinted.stats.status.startswith(("OPTIMAL", "FEASIBLE"))
    assert hinted.admitted_ids == {"served", "small"}


@ENGINES
def test_a_gang_ahead_that_fits_nowhere_keeps_no_gpus(engine: Engine) -> None:
    # poor's 16-GPU gang is first in line but fits on no node: rich's gang behind it starts.
    pending = [gang("p1", gpus=8, replicas=2, queue="poor"), gang("r1", gpus=4, queue="rich")]
    assert checked_decision(rich_and_poor(), pending, engine).admitted_ids == {"r1"}


def test_cpsat_still_places_a_gang_ahead_elsewhere_to_make_room_behind_it() -> None:
    # One free H100 and one free A100 node. poor's gang, first in line, may use either type and
    # greedy gives it the faster H100; rich's H100-only gang behind it then finds no room.
    # CP-SAT puts poor's gang on the A100s and starts both: the gang ahead is placed, so the
    # gang behind may take the type it could have used.
    tree = QueueTree.build([QueueSpec("rich"), QueueSpec("poor")])
    snapshot = (
        cluster()
        .node("h0", H100)
        .node("a0", A100)
        .node("h1", H100)
        .run("r0", "h1", tuple(range(8)), queue="rich")
        .queues(tree)
        .build()
    )
    pending = [
        gang("p1", (H100, A100), gpus=8, queue="poor"),
        gang("r1", H100, gpus=8, queue="rich"),
    ]
    assert checked_decision(snapshot, pending, Engine.GREEDY).admitted_ids == {"p1"}
    decision = checked_decision(snapshot, pending, Engine.CPSAT)
    assert decision.admitted_ids == {"p1", "r1"}
    p1 = decision.placement("p1")
    assert p1 is not None and p1.gpu_type == A100


def speeds(h100: float, a100: float) -> dict[str, float]:
    return {H100: h100, A100: a100}


def passed_over() -> tuple[Snapshot, list[Gang]]:
    """In line (one queue, by wait): w (4 GPUs, H100 or A100, twice as fast on H100), x (8 H100
    GPUs, ten times as fast), a (6 A100 GPUs); then b of queue qb (4 A100 GPUs, priority 1), qb
    far over its share (two L4 nodes). h0 is a free H100 node; on a0 (A100) qb's r0 runs on 2
    GPUs. Greedy: w on h0, x waits, a on a0's 6 free GPUs, and b finds no room (evicting r0
    frees only 2 GPUs). CP-SAT puts w on a0 and x on h0 (worth more), so a, ahead of b, waits."""
    tree = QueueTree.build([QueueSpec("qa"), QueueSpec("qb")])
    snapshot = (
        cluster()
        .node("h0", H100)
        .node("a0", A100)
        .node("l0", "L4")
        .node("l1", "L4")
        .run("r0", "a0", (0, 1), queue="qb")
        .run("r1", "l0", tuple(range(8)), queue="qb", preemptible=False)
        .run("r2", "l1", tuple(range(8)), queue="qb", preemptible=False)
        .queues(tree)
        .build()
    )
    pending = [
        gang("w", (H100, A100), gpus=4, queue="qa", waited_s=AGED + 3, throughput=speeds(2, 1)),
        gang("x", H100, gpus=8, queue="qa", waited_s=AGED + 2, throughput=speeds(10, 0)),
        gang("a", A100, gpus=6, queue="qa", waited_s=AGED + 1, throughput=speeds(0, 1)),
        gang("b", A100, gpus=4, queue="qb", priority=1, throughput=speeds(0, 1)),
    ]
    return snapshot, pending


def test_a_gang_behind_takes_no_type_after_the_solve_that_a_pending_one_ahead_may_use() -> None:
    # The model keeps b off A100 while a waits; the evictions for the gangs still stuck after
    # the solve evicted r0 for b (a0's 2 free GPUs and r0's 2), putting b on the A100 node a
    # waits for, ahead of it.
    snapshot, pending = passed_over()
    assert queue_line(snapshot, pending) == ["w", "x", "a", "b"]
    assert checked_decision(snapshot, pending, Engine.GREEDY).admitted_ids == {"w", "a"}
    decision = checked_decision(snapshot, pending, Engine.CPSAT)
    assert decision.stats.engine == "cpsat"
    assert decision.admitted_ids == {"w", "x"}
    assert decision.preemptions == ()


def test_the_repair_pass_after_the_solve_keeps_a_gang_ahead_its_type() -> None:
    # One queue; in line by wait: w (8 GPUs, H100 or A100, twice as fast on H100), x (8 H100
    # GPUs, ten times as fast), a (8 A100 GPUs), b (4 A100 GPUs). h0 (H100) and a0 (A100) are
    # free, a1 (A100) half held. Greedy: w on h0, x waits, a on a0, b on a1. CP-SAT: w on a0,
    # x on h0 (worth more); a no longer fits, and the model keeps b, behind it, off A100. The
    # greedy repair pass after the solve put b on a1's free half, ahead of a.
    snapshot = (
        cluster()
        .node("h0", H100)
        .node("a0", A100)
        .node("a1", A100)
        .run("r0", "a1", (0, 1, 2, 3), queue="q")
        .queues(QueueTree.build([QueueSpec("q")]))
        .build()
    )
    pending = [
        gang("w", (H100, A100), gpus=8, queue="q", waited_s=400, throughput=speeds(2, 1)),
        gang("x", H100, gpus=8, queue="q", waited_s=300, throughput=speeds(10, 0)),
        gang("a", A100, gpus=8, queue="q", waited_s=200, throughput=speeds(0, 1)),
        gang("b", A100, gpus=4, queue="q", waited_s=100, throughput=speeds(0, 1)),
    ]
    assert queue_line(snapshot, pending) == ["w", "x", "a", "b"]
    assert checked_decision(snapshot, pending, Engine.GREEDY).admitted_ids == {"w", "a", "b"}
    decision = checked_decision(snapshot, pending, Engine.CPSAT)
    assert decision.stats.engine == "cpsat"
    assert decision.admitted_ids == {"w", "x"}


@st.composite
def lines(draw: st.DrawFn) -> tuple[Snapshot, list[Gang]]:
    """`queued` clusters and gangs, some of whose gangs have waited past the aging time."""
    snapshot, pending = draw(queued())
    waits = st.sampled_from((0.0, 60.0, AGED, 2 * AGED))
    return snapshot, [replace(g, waited_s=draw(waits)) if g.queue in NAMES else g for g in pending]


def queue_line(snapshot: Snapshot, pending: list[Gang]) -> list[str]:
    """The queues' order greedy tries the gangs in (those their queue takes)."""
    gate = QueueGate(snapshot, Policy().queue_aging_s, tier_gpu_s=Policy().service_tier_gpu_s)
    state = ClusterState(snapshot)
    state.gate = gate
    return [g.id for g in greedy_order([g for g in pending if gate.refusal(g) is None], state)]


@st.composite
def contested(draw: st.DrawFn) -> tuple[Snapshot, list[Gang]]:
    """8-GPU H100 nodes partly held by gangs of queues without nominal quota (so the queues
    stand at different shares) and pending gangs of those queues, of 1 to 8 GPUs, some aged:
    fewer free GPUs than asked for, where the order decides who starts."""
    queues = list(NAMES[: draw(st.integers(2, 3))])
    builder = cluster().queues(QueueTree.build([QueueSpec(q) for q in queues]))
    for n in range(draw(st.integers(1, 3))):
        builder.node(f"h{n}", H100)
        held = draw(st.sampled_from((0, 0, 4, 8)))
        if held:
            builder.run(f"r{n}", f"h{n}", tuple(range(held)), queue=draw(st.sampled_from(queues)))
    pending = [
        gang(
            f"p{i}",
            gpus=draw(st.sampled_from((1, 2, 4, 4, 8))),
            queue=draw(st.sampled_from(queues)),
            waited_s=draw(st.sampled_from((0.0, 60.0, AGED))),
        )
        for i in range(draw(st.integers(2, 6)))
    ]
    return builder.build(), pending


@FAST
@given(case=lines() | contested())
def test_cpsat_passes_over_no_gang_greedy_admits_for_one_behind_it(
    case: tuple[Snapshot, list[Gang]],
) -> None:
    snapshot, pending = case
    greedy = checked_decision(snapshot, pending, Engine.GREEDY)
    with solved_on_the_hint() as built:
        hinted = place(snapshot, pending, Policy(solver=SolverSettings(engine=Engine.CPSAT)))
    for model in built:  # the order's booleans are hinted (greedy admitted their gangs)
        assert [v for v in unhinted(model.model) if v.startswith("in_line")] == []
    if built:  # and greedy's decision is a solution of the model with them
        assert hinted.stats.status.startswith(("OPTIMAL", "FEASIBLE"))
    cpsat = checked_decision(snapshot, pending, Engine.CPSAT)
    if cpsat.stats.engine != "cpsat":
        return  # greedy's decision, kept
    line = queue_line(snapshot, pending)
    by_id = {g.id: g for g in pending}
    for ahead in greedy.admitted_ids - cpsat.admitted_ids:
        types = set(by_id[ahead].type_names())
        behind = line[line.index(ahead) + 1 :]
        passed = [
            p.gang_id for p in cpsat.placements if p.gang_id in behind and p.gpu_type in types
        ]
        assert passed == [], ahead
