"""Serving borrows GPUs from training: who the core evicts for a higher-priority gang.

Aspects under test (unit cases and hypothesis properties over random full fleets): a
non-preemptible gang or one of equal or higher priority is never a victim; among candidates the
victim loses the least work (priority first, then unsaved progress plus restart times its GPUs,
then the longest remaining time); an elastic job is shrunk through its extra units before any
gang is preempted whole and never below its minimum; a borrower is refused only when too few
candidates exist or the work they would lose is not paid back before they are expected to end;
the decision is deterministic and valid; lost work and the unit split themselves.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import CATALOG, gang

from gpufleet.core.borrowing import (
    DEFAULT_RESTART_S,
    elastic_units,
    jobs_of,
    lost_work_gpu_s,
    restarts_paid_back,
    victim_key,
)
from gpufleet.core.objective import running_value
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.core.valuation import gang_value
from gpufleet.model.inventory import make_node

GREEDY = Policy(solver=SolverSettings(engine=Engine.GREEDY))
SERVING_PRIORITY = 5


def one_gpu(gang_id: str, node: str, gpu: int, **kwargs: object) -> RunningGang:
    return RunningGang(gang_id, "H100-80GB", (ReplicaPlacement(node, (gpu,)),), **kwargs)  # type: ignore[arg-type]


def full_node(running: list[RunningGang]) -> Snapshot:
    node = make_node("n0", CATALOG["H100-80GB"], len(running))
    return Snapshot(CATALOG, (node,), tuple(running))


def serving_replica(priority: int = SERVING_PRIORITY) -> list:  # type: ignore[type-arg]
    return [gang("web-prefill-3", "H100-80GB", gpus=1, priority=priority)]


def test_lost_work_is_checkpoint_age_plus_restart_times_gpus() -> None:
    two = RunningGang(
        "t",
        "H100-80GB",
        (ReplicaPlacement("n0", (0, 1)),),
        progress=RunProgress(expected_remaining_s=900.0, unsaved_s=120.0, restart_s=30.0),
    )
    assert lost_work_gpu_s(two) == pytest.approx(2 * 150.0)
    unknown = RunningGang("u", "H100-80GB", (ReplicaPlacement("n0", (2,)),))
    assert lost_work_gpu_s(unknown) == pytest.approx(DEFAULT_RESTART_S)


def test_the_gang_with_the_youngest_checkpoint_is_evicted() -> None:
    running = [
        one_gpu("old-ckpt", "n0", 0, progress=RunProgress(3600.0, unsaved_s=1500.0)),
        one_gpu("fresh-ckpt", "n0", 1, progress=RunProgress(3600.0, unsaved_s=10.0)),
        one_gpu("mid-ckpt", "n0", 2, progress=RunProgress(3600.0, unsaved_s=400.0)),
    ]
    decision = place(full_node(running), serving_replica(), GREEDY)
    assert [p.gang_id for p in decision.preemptions] == ["fresh-ckpt"]


def test_a_gang_about_to_finish_is_spared_when_losses_are_equal() -> None:
    running = [
        one_gpu("finishing", "n0", 0, progress=RunProgress(30.0)),
        one_gpu("long", "n0", 1, progress=RunProgress(20_000.0)),
    ]
    decision = place(full_node(running), serving_replica(), GREEDY)
    assert [p.gang_id for p in decision.preemptions] == ["long"]


def test_a_cheap_restart_beats_a_costly_one() -> None:
    running = [
        one_gpu("slow-restart", "n0", 0, progress=RunProgress(5000.0, restart_s=300.0)),
        one_gpu("fast-restart", "n0", 1, progress=RunProgress(5000.0, restart_s=20.0)),
    ]
    decision = place(full_node(running), serving_replica(), GREEDY)
    assert [p.gang_id for p in decision.preemptions] == ["fast-restart"]


def test_elastic_job_shrinks_before_anything_is_preempted_whole() -> None:
    node = make_node("n0", CATALOG["H100-80GB"], 4)
    units = elastic_units(
        "elastic",
        "H100-80GB",
        [ReplicaPlacement("n0", (g,)) for g in range(3)],
        min_replicas=1,
        priority=1,
        preemptible=True,
    )
    rigid = one_gpu("rigid", "n0", 3, priority=0, progress=RunProgress(1.0, restart_s=1.0))
    snapshot = Snapshot(CATALOG, (node,), (*units, rigid))
    # Two replicas needed: the elastic job's two extras (priority 0, default restart cost)
    # and the rigid gang (priority 0, cheaper) tie on priority; the cheap rigid gang goes first,
    # then one extra; the job's minimum replica is never taken.
    pending = [gang("web-prefill", "H100-80GB", gpus=1, replicas=2, priority=SERVING_PRIORITY)]
    decision = place(snapshot, pending, GREEDY)
    victims = {p.gang_id for p in decision.preemptions}
    assert "elastic" not in victims
    assert victims == {"rigid", "elastic#extra-2"} or victims == {"rigid", "elastic#extra-1"}


def test_elastic_units_split_base_and_extras() -> None:
    reps = [ReplicaPlacement("n0", (g,)) for g in range(4)]
    progress = RunProgress(100.0, unsaved_s=5.0)
    units = elastic_units(
        "j", "H100-80GB", reps, 2, priority=3, preemptible=False, progress=progress
    )
    assert [u.id for u in units] == ["j", "j#extra-2", "j#extra-3"]
    assert units[0].replicas == tuple(reps[:2]) and units[0].priority == 3
    assert not units[0].preemptible
    assert all(u.preemptible and u.priority == 0 and u.progress == progress for u in units[1:])
    assert elastic_units("k", "H100-80GB", reps[:1], 2, priority=0, preemptible=True)[0].id == "k"


def test_victim_key_orders_priority_then_loss_then_remaining() -> None:
    a = one_gpu("a", "n0", 0, priority=1, progress=RunProgress(10.0, unsaved_s=0.0))
    b = one_gpu("b", "n0", 1, priority=0, progress=RunProgress(10.0, unsaved_s=900.0))
    c = one_gpu("c", "n0", 2, priority=0, progress=RunProgress(10.0, unsaved_s=10.0))
    d = one_gpu("d", "n0", 3, priority=0, progress=RunProgress(99.0, unsaved_s=10.0))
    assert [g.id for g in sorted([a, b, c, d], key=victim_key({}))] == ["d", "c", "b", "a"]


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Snapshot, list[RunningGang]]:
    """One full 8-GPU node of 1-GPU gangs with random priority, preemptibility and progress."""
    running = []
    for g in range(8):
        running.append(
            one_gpu(
                f"t{g}",
                "n0",
                g,
                priority=draw(st.integers(0, 6)),
                preemptible=draw(st.booleans()),
                progress=draw(
                    st.one_of(
                        st.none(),
                        st.builds(
                            RunProgress,
                            expected_remaining_s=st.floats(0, 1e5),
                            unsaved_s=st.floats(0, 3600),
                            restart_s=st.floats(0, 600),
                        ),
                    )
                ),
            )
        )
    return full_node(running), running


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.integers(1, 3), st.sampled_from([Engine.GREEDY, Engine.CPSAT]))
def test_victims_are_protected_minimal_and_deterministic(
    fleet: tuple[Snapshot, list[RunningGang]], replicas: int, engine: Engine
) -> None:
    snapshot, running = fleet
    policy = Policy(solver=SolverSettings(engine=engine))
    pending = [gang("web", "H100-80GB", gpus=1, replicas=replicas, priority=SERVING_PRIORITY)]
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision) == []
    assert decision == place(snapshot, pending, policy)
    by_id = {g.id: g for g in running}
    victims = [by_id[p.gang_id] for p in decision.preemptions]
    # Never a non-preemptible gang, never one of the borrower's priority or higher.
    assert all(v.preemptible and v.priority < SERVING_PRIORITY for v in victims)
    candidates = [g for g in running if g.preemptible and g.priority < SERVING_PRIORITY]
    if decision.admitted_ids:
        assert len(victims) == replicas
        # The victims are the first `replicas` candidates in the least-lost-work order.
        key = victim_key({})
        chosen = sorted(key(v)[:3] for v in victims)
        best = sorted(key(c)[:3] for c in candidates)[:replicas]
        assert chosen == best
    else:
        # Too few candidates, or the first `replicas` of them (the one victim set on one node)
        # lose work the gang would not pay back before they are expected to end.
        assert victims == []
        values = {g.id: running_value(snapshot, g, policy) for g in running}
        first = sorted(candidates, key=victim_key(values))[:replicas]
        gain = gang_value(pending[0], CATALOG["H100-80GB"], policy, replicas)
        net = gain - sum(values[v.id] for v in first)
        assert len(candidates) < replicas or not restarts_paid_back(
            net, first, values, jobs_of(running)
        )
