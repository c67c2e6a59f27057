"""Gang-aware preemption: whole gangs only, strictly lower priority, preemptible only, fewest
victims needed, and only when the gain beats the loss."""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import ClusterBuilder, cluster, gang

from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.validate import decision_problems

ENGINES = [Engine.GREEDY, Engine.CPSAT]


def pol(engine: Engine, **kwargs: object) -> Policy:
    return Policy(solver=SolverSettings(engine=engine), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", ENGINES)
def test_high_priority_gang_evicts_a_whole_low_priority_gang(engine: Engine) -> None:
    # r-low spans both nodes; evicting it frees 4 GPUs on each.
    snapshot = (
        cluster()
        .node("a", "A100-80GB", 4)
        .node("b", "A100-80GB", 4)
        .run("r-low", "a", (0, 1, 2, 3), priority=0)
        .run("r-low", "b", (0, 1, 2, 3), priority=0)
        .build()
    )
    pending = [gang("urgent", "A100-80GB", gpus=4, replicas=2, priority=2)]
    decision = place(snapshot, pending, pol(engine))
    assert decision_problems(snapshot, pending, decision) == []
    assert decision.admitted_ids == {"urgent"}
    assert [(p.gang_id, p.for_gang) for p in decision.preemptions] == [("r-low", "urgent")]
    # CP-SAT re-solves with the evicted GPUs and must keep the gang that evicted them.
    assert decision.stats.engine == engine.value


@pytest.mark.parametrize(
    ("victim_priority", "preemptible"),
    [pytest.param(2, True, id="equal-priority"), pytest.param(0, False, id="not-preemptible")],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_no_eviction_of_protected_gangs(
    engine: Engine, victim_priority: int, preemptible: bool
) -> None:
    snapshot = (
        cluster()
        .node("a", "A10", 4)
        .run("r", "a", (0, 1, 2, 3), priority=victim_priority, preemptible=preemptible)
        .build()
    )
    pending = [gang("g", "A10", gpus=4, priority=2)]
    decision = place(snapshot, pending, pol(engine))
    assert decision.preemptions == () and decision.admitted_ids == set()


@pytest.mark.parametrize("engine", ENGINES)
def test_only_the_victims_needed_are_evicted(engine: Engine) -> None:
    snapshot = (
        cluster()
        .node("a", "A10", 4)
        .run("small", "a", (0,), priority=0)
        .run("big", "a", (1, 2, 3), priority=0)
        .build()
    )
    # Needs 3 GPUs: evicting "big" alone suffices; "small" (tried first, cheaper) is put back.
    pending = [gang("g", "A10", gpus=3, priority=1)]
    decision = place(snapshot, pending, pol(engine))
    assert decision_problems(snapshot, pending, decision) == []
    assert [p.gang_id for p in decision.preemptions] == ["big"]


def _whole_and_growing_elastic() -> ClusterBuilder:
    """Four 4-GPU T4 nodes: a whole gang of priority 1 on 8 GPUs; an elastic job of priority
    5 running its 2-replica minimum plus 3 replicas beyond it (each its own priority-0 unit,
    as the live scheduler offers them); 3 GPUs free."""
    builder = cluster()
    for n in range(4):
        builder.node(f"t{n}", "T4", 4)
    for n, g in [(n, g) for n in (0, 1) for g in range(4)]:
        builder.run("whole", f"t{n}", (g,), priority=1)
    for g in (0, 1):
        builder.run("elastic", "t2", (g,), priority=5)
    for i, (node, g) in enumerate([("t2", 2), ("t2", 3), ("t3", 0)], start=2):
        builder.run(f"elastic#extra-{i}", node, (g,), priority=0)
    return builder


@pytest.mark.parametrize("engine", ENGINES)
def test_growth_in_the_same_decision_never_makes_a_whole_gang_go(engine: Engine) -> None:
    # The elastic job may still grow by 3 (priority 0) while a 6-GPU gang of priority 10
    # arrives: the 3 free GPUs are the urgent gang's, it shrinks the elastic job by its 3
    # extras, and the growth waits. Giving the free GPUs to the growth made the urgent gang
    # evict the whole gang instead (the sandbox test saw the elastic job at 8 replicas).
    snapshot = _whole_and_growing_elastic().build()
    growth = replace(gang("elastic#rest", "T4", replicas=(1, 3)), grows_from=5)
    urgent = gang("urgent", "T4", replicas=6, priority=10)
    decision = place(snapshot, [growth, urgent], pol(engine))
    assert decision_problems(snapshot, [growth, urgent], decision) == []
    assert sorted(p.gang_id for p in decision.preemptions) == [
        "elastic#extra-2",
        "elastic#extra-3",
        "elastic#extra-4",
    ]
    assert decision.admitted_ids == {"urgent"}


@pytest.mark.parametrize("engine", ENGINES)
def test_preemption_can_be_disabled(engine: Engine) -> None:
    snapshot = cluster().node("a", "A10", 2).run("r", "a", (0, 1)).build()
    decision = place(
        snapshot, [gang("g", "A10", gpus=2, priority=3)], pol(engine, allow_preemption=False)
    )
    assert decision.preemptions == ()


@pytest.mark.parametrize("engine", ENGINES)
def test_no_eviction_when_free_capacity_suffices(engine: Engine) -> None:
    snapshot = cluster().node("a", "A10", 4).run("r", "a", (0, 1)).build()
    decision = place(snapshot, [gang("g", "A10", gpus=2, priority=3)], pol(engine))
    assert decision.admitted_ids == {"g"} and decision.preemptions == ()


def test_eviction_must_pay_for_itself() -> None:
    # Victim: priority 1 on 4 x H100 (value 2 x 4.8 x 4); winner: priority 2 on 1 x T4-speed job.
    snapshot = cluster().node("a", "H100-80GB", 4).run("r", "a", (0, 1, 2, 3), priority=1).build()
    tiny = gang("tiny", "H100-80GB", gpus=4, priority=2, throughput={"H100-80GB": 0.1})
    decision = place(snapshot, [tiny], Policy())
    assert decision.preemptions == ()
