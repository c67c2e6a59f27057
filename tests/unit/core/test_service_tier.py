"""The service tier inside queues (least attained service first, service_tier.py).

Aspects: the attained-service fields and the threshold are validated; the rank is (priority,
tier) and a tier never outranks a higher priority; inside a queue, a fresh gang goes before a
served one of its priority and may evict a served running one (both engines), priced so that
preemption's value check lets it; never a gang of another queue, never one of higher priority,
never a gang outside every queue; a served gang that comes back cannot evict served gangs; with
no threshold (None) the old behaviour holds; the validator judges the same rule; a served gang
left waiting says why; a preemption says whether the tier made it; CP-SAT admits gangs alike
but for their service in the queue's order; a gang of a missing or unusable queue has no tier,
neither in its rank nor in its value; a tier eviction pays for the work the victim has not
checkpointed; with a limit on re-evictions, a gang the tier evicted before is not evicted by the
tier again before its current run has lasted the limit (both engines), while a higher priority
still may, and without a limit (the default) it is evicted as before; the validator judges the
limit independently of the engine's rule, on hand-made decisions and on random queues.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.admission import QueueGate
from gpufleet.core.decision import Decision, PendingReason
from gpufleet.core.demand import Gang, TypeOption
from gpufleet.core.objective import running_value
from gpufleet.core.place import place
from gpufleet.core.policy import SERVICE_TIER_GPU_S, Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.service_tier import (
    SERVED_VALUE_SHARE,
    rank,
    rerun_guarded,
    served_share,
    tier,
)
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang
from tests.unit.core.test_placement_properties import FAST
from tests.unit.core.test_queue_properties import contended

H100 = "H100-80GB"
ENGINES = pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT], ids=str)
THETA = 1800.0
LONG = 10 * THETA  # a running gang's service well past the threshold
TIERS = pytest.mark.parametrize("theta", [THETA, None], ids=["tier", "no-tier"])


def team(name: str, nominal: int) -> QueueSpec:
    return QueueSpec(name, None, 1.0, {H100: Quota(nominal)})


def served(snapshot: Snapshot, **attained: float) -> Snapshot:
    """The snapshot with the named running gangs' attained service set."""
    running = tuple(
        replace(r, attained_gpu_s=attained[r.id]) if r.id in attained else r
        for r in snapshot.running
    )
    return replace(snapshot, running=running)


def decide(
    snapshot: Snapshot,
    pending: list[Gang],
    theta: float | None = THETA,
    engine: Engine = Engine.GREEDY,
    rerun_s: float | None = None,
) -> Decision:
    policy = Policy(
        solver=SolverSettings(engine=engine),
        service_tier_gpu_s=theta,
        service_tier_rerun_s=rerun_s,
    )
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision, theta, rerun_s) == []
    return decision


def two_gpus_of_queue_a(long_priority: int = 0, long_queue: str = "a") -> Snapshot:
    """One node of two H100s: `long` (served) and `short` (fresh) run on one each."""
    snapshot = (
        cluster()
        .node("h0", H100, count=2)
        .run("long", "h0", (0,), priority=long_priority, queue=long_queue)
        .run("short", "h0", (1,), queue="a")
        .queues(QueueTree.build([team("a", 2), team("b", 1 if long_queue == "b" else 0)]))
        .build()
    )
    return served(snapshot, long=LONG, short=THETA / 10)


# --- the API ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1.0, math.nan], ids=["negative", "nan"])
def test_attained_service_is_never_negative(value: float) -> None:
    with pytest.raises(ValueError, match="attained_gpu_s"):
        Gang("g", (TypeOption(H100),), attained_gpu_s=value)
    with pytest.raises(ValueError, match="attained_gpu_s"):
        RunningGang("r", H100, (ReplicaPlacement("n", (0,)),), attained_gpu_s=value)
    assert Gang("g", (TypeOption(H100),), attained_gpu_s=0.0).attained_gpu_s == 0.0


@pytest.mark.parametrize("theta", [0.0, -5.0], ids=["zero", "negative"])
def test_the_threshold_is_positive_or_none(theta: float) -> None:
    with pytest.raises(ValueError, match="service_tier_gpu_s"):
        Policy(service_tier_gpu_s=theta)
    assert Policy(service_tier_gpu_s=None).service_tier_gpu_s is None
    assert Policy().service_tier_gpu_s == SERVICE_TIER_GPU_S


# --- the rank --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attained", "theta", "expected"),
    [
        pytest.param(0.0, THETA, 1, id="fresh"),
        pytest.param(THETA - 1, THETA, 1, id="just-below"),
        pytest.param(THETA, THETA, 0, id="at-the-threshold"),
        pytest.param(LONG, THETA, 0, id="served"),
        pytest.param(0.0, None, 0, id="no-tier"),
    ],
)
def test_the_tier_is_one_below_the_threshold_only(
    attained: float, theta: float | None, expected: int
) -> None:
    assert tier(attained, theta) == expected


def test_the_tier_never_outranks_a_higher_priority() -> None:
    fresh_low = gang("fresh", priority=0)
    served_high = replace(gang("served", priority=1), attained_gpu_s=LONG)
    assert rank(fresh_low, THETA) == (0, 1)
    assert rank(served_high, THETA) == (1, 0)
    assert rank(served_high, THETA) > rank(fresh_low, THETA)
    assert rank(served_high, None) == (1, 0) and rank(fresh_low, None) == (0, 0)


# --- order and eviction inside a queue -------------------------------------------------------


@pytest.mark.parametrize(("priority", "by_tier"), [(0, True), (1, False)], ids=["tier", "priority"])
def test_a_preemption_says_whether_the_tier_made_it(priority: int, by_tier: bool) -> None:
    # The scheduler marks the victims' pods from this (scheduler/victims.py).
    decision = decide(two_gpus_of_queue_a(), [gang("new", queue="a", priority=priority)])
    assert decision.admitted_ids == {"new"}
    assert [p.service_tier for p in decision.preemptions] == [by_tier]


@ENGINES
def test_a_fresh_gang_evicts_a_served_gang_of_its_queue_and_priority(engine: Engine) -> None:
    decision = decide(two_gpus_of_queue_a(), [gang("new", queue="a")], engine=engine)
    assert decision.admitted_ids == {"new"}
    # The served gang goes, not the fresh one beside it; it is not a reclaim.
    assert [(p.gang_id, p.for_gang, p.reclaim) for p in decision.preemptions] == [
        ("long", "new", False)
    ]


def test_without_a_threshold_the_queue_stays_first_come_first_served() -> None:
    decision = decide(two_gpus_of_queue_a(), [gang("new", queue="a")], theta=None)
    assert decision.admitted_ids == set() and decision.preemptions == ()


def test_the_tier_never_evicts_a_higher_priority() -> None:
    snapshot = two_gpus_of_queue_a(long_priority=1)
    decision = decide(snapshot, [gang("new", queue="a")])
    assert decision.admitted_ids == set() and decision.preemptions == ()


def test_the_tier_never_evicts_across_queues() -> None:
    # `long` runs in queue b within b's nominal quota: nothing to reclaim, and tiers are
    # never compared across queues.
    snapshot = two_gpus_of_queue_a(long_queue="b")
    decision = decide(snapshot, [gang("new", queue="a")])
    assert decision.preemptions == ()


def test_the_tier_holds_inside_queues_only() -> None:
    snapshot = served(
        cluster().node("h0", H100, count=1).run("long", "h0", (0,)).build(), long=LONG
    )
    decision = decide(snapshot, [gang("new")])
    assert decision.admitted_ids == set() and decision.preemptions == ()


@ENGINES
def test_a_server_never_evicts_for_the_tier(engine: Engine) -> None:
    # A ServingJob's pending replica has no service: as a trainer it would be fresh.
    replica = replace(gang("replica", queue="a"), service_ranked=False)
    decision = decide(two_gpus_of_queue_a(), [replica], engine=engine)
    assert decision.admitted_ids == set() and decision.preemptions == ()


@ENGINES
def test_a_running_server_is_never_evicted_by_the_tier(engine: Engine) -> None:
    snapshot = two_gpus_of_queue_a()
    running = tuple(
        replace(r, service_ranked=False) if r.id == "long" else r for r in snapshot.running
    )
    decision = decide(replace(snapshot, running=running), [gang("new", queue="a")], engine=engine)
    assert decision.admitted_ids == set() and decision.preemptions == ()


def test_the_validator_refuses_a_tier_eviction_for_a_server() -> None:
    snapshot = two_gpus_of_queue_a()
    pending = [gang("new", queue="a")]
    decision = decide(snapshot, pending)
    replica = replace(pending[0], service_ranked=False)
    assert decision_problems(snapshot, [replica], decision, THETA) == [
        "long evicted by the service tier for new: a server has no tier"
    ]


def test_a_served_gang_that_comes_back_does_not_evict_served_gangs() -> None:
    back = replace(gang("back", queue="a"), attained_gpu_s=THETA)
    decision = decide(two_gpus_of_queue_a(), [back])
    assert decision.admitted_ids == set() and decision.preemptions == ()


@TIERS
@pytest.mark.parametrize(
    ("nominal", "reason"),
    [
        pytest.param(2, PendingReason.LOST_TO_OTHERS, id="capacity"),
        pytest.param(1, PendingReason.QUOTA_EXCEEDED, id="quota"),
    ],
)
def test_a_fresh_gang_goes_before_a_served_one_that_waited_longer(
    theta: float | None, nominal: int, reason: PendingReason
) -> None:
    tree = QueueTree.build([team("a", nominal)])
    snapshot = cluster().node("h0", H100, count=1).queues(tree).build()
    earlier = replace(gang("earlier", queue="a", waited_s=600.0), attained_gpu_s=LONG)
    later = gang("later", queue="a", waited_s=60.0)
    decision = decide(snapshot, [earlier, later], theta)
    assert decision.admitted_ids == ({"later"} if theta is not None else {"earlier"})
    waiting = "earlier" if theta is not None else "later"
    why = decision.pending_for(waiting)
    assert why is not None and why.reason is reason
    note = f"past the service tier of {THETA:.0f} GPU-s, so gangs of queue a and its priority"
    assert (note in why.message) == (theta is not None)


def test_a_served_running_gang_is_worth_half_inside_a_queue_only() -> None:
    snapshot = two_gpus_of_queue_a()
    by_id = {r.id: r for r in snapshot.running}
    policy = Policy(service_tier_gpu_s=THETA)
    full = running_value(snapshot, by_id["short"], policy)
    assert running_value(snapshot, by_id["long"], policy) == pytest.approx(
        SERVED_VALUE_SHARE * full
    )
    untiered = Policy(service_tier_gpu_s=None)
    assert running_value(snapshot, by_id["long"], untiered) == pytest.approx(full)
    outside = replace(snapshot, queues=None)
    assert running_value(outside, by_id["long"], policy) == pytest.approx(full)


def test_the_validator_judges_tier_evictions_by_the_threshold() -> None:
    snapshot = two_gpus_of_queue_a()
    pending = [gang("new", queue="a")]
    decision = decide(snapshot, pending)
    assert decision.preemptions
    assert decision_problems(snapshot, pending, decision, THETA) == []
    assert decision_problems(snapshot, pending, decision, None) == [
        "long preempted inside its queue for new of no higher priority"
    ]


@pytest.mark.parametrize("seed", range(4))
def test_cpsat_keeps_the_queue_order_among_gangs_alike_but_for_their_service(seed: int) -> None:
    # Alike but for id, wait and service: fresh ones first, then the longest waiting, as greedy
    # offers them (fairshare.order_pending); a different service alone does not void the order.
    tree = QueueTree.build([team("a", 4)])
    snapshot = cluster().node("h0", H100, count=3).queues(tree).build()
    pending = [
        replace(gang("s1", queue="a", waited_s=900.0), attained_gpu_s=2 * LONG),
        replace(gang("s2", queue="a", waited_s=600.0), attained_gpu_s=LONG),
        replace(gang("s3", queue="a", waited_s=300.0), attained_gpu_s=3 * LONG),
        replace(gang("f1", queue="a", waited_s=60.0), attained_gpu_s=THETA / 2),
        gang("f2", queue="a", waited_s=30.0),
    ]
    policy = Policy(solver=SolverSettings(engine=Engine.CPSAT, seed=seed))
    decision = place(snapshot, pending, policy)
    assert decision.admitted_ids == {"f1", "f2", "s1"}


# --- a gang without a usable queue has no tier -----------------------------------------------


def _outside_usable_queues(where: str) -> Snapshot:
    """One node of two H100s wholly held by `long` (priority 0, served) of queue `where`:
    "gone" is in no tree, "orphan" has a parent that does not exist (unusable)."""
    orphan = QueueSpec("orphan", "nowhere", 1.0, {H100: Quota(2)})
    snapshot = (
        cluster()
        .node("h0", H100, count=2)
        .run("long", "h0", (0, 1), queue=where)
        .queues(QueueTree.build([team("a", 2), orphan]))
        .build()
    )
    return served(snapshot, long=LONG)


@pytest.mark.parametrize("where", ["gone", "orphan"])
def test_a_gang_without_a_usable_queue_has_no_tier_in_rank_nor_value(where: str) -> None:
    snapshot = _outside_usable_queues(where)
    assert snapshot.queues is not None and not snapshot.queues.usable(where)
    (long,) = snapshot.running
    policy = Policy(service_tier_gpu_s=THETA)
    gate = QueueGate(snapshot, policy.queue_aging_s, tier_gpu_s=THETA)
    assert gate.rank(long) == rank(long, None) == (0, 0) and not gate.served(long)
    # Worth all its work, as outside every queue (the rank and the value agree).
    assert served_share(snapshot, long, THETA) == 1.0
    untiered = Policy(service_tier_gpu_s=None)
    assert running_value(snapshot, long, policy) == pytest.approx(
        running_value(snapshot, long, untiered)
    )


@pytest.mark.parametrize("where", ["gone", "orphan"])
@ENGINES
def test_a_served_gang_without_a_usable_queue_is_priced_in_full(where: str, engine: Engine) -> None:
    # A 1-GPU gang of priority 1 outside the queues is worth 2 x 1; evicting the 2-GPU gang
    # loses 2 (+ the disruption): refused. Priced at half (1), it used to be evicted.
    snapshot = _outside_usable_queues(where)
    decision = decide(snapshot, [gang("urgent", priority=1)], engine=engine)
    assert decision.admitted_ids == set() and decision.preemptions == ()


# --- the work an eviction throws away --------------------------------------------------------


def _long_and_short(progress: RunProgress) -> Snapshot:
    """One 4-GPU H100 node of queue `a`: `long` (3 GPUs, with `progress`) and `short` (1)."""
    snapshot = (
        cluster()
        .node("h0", H100, count=4)
        .run("long", "h0", (0, 1, 2), queue="a")
        .run("short", "h0", (3,), queue="a")
        .queues(QueueTree.build([team("a", 4)]))
        .build()
    )
    running = tuple(
        replace(r, progress=progress) if r.id == "long" else r for r in snapshot.running
    )
    return replace(snapshot, running=running)


@ENGINES
@pytest.mark.parametrize(
    ("unsaved_s", "evicted"),
    [pytest.param(0.0, True, id="just-checkpointed"), pytest.param(3000.0, False, id="50-min")],
)
def test_a_tier_eviction_pays_for_the_work_since_the_last_checkpoint(
    engine: Engine, unsaved_s: float, evicted: bool
) -> None:
    # `long` (3 GPUs, served: worth 1.5) is expected to run 2 h more; the fresh 2-GPU gang
    # gains 2, net 0.5, over those 7,200 s 3,600, against 1.5 x (60 s restart + unsaved):
    # 90 when it has just checkpointed, 4,590 when it ran 50 minutes since.
    progress = RunProgress(expected_remaining_s=7200.0, unsaved_s=unsaved_s, restart_s=60.0)
    snapshot = served(_long_and_short(progress), long=LONG, short=THETA / 10)
    decision = decide(snapshot, [gang("new", gpus=2, queue="a")], engine=engine)
    assert decision.admitted_ids == ({"new"} if evicted else set())
    assert [p.gang_id for p in decision.preemptions] == (["long"] if evicted else [])


@ENGINES
def test_a_priority_eviction_is_not_priced_for_lost_work(engine: Engine) -> None:
    # The same victim, 50 minutes since its checkpoint and (no longer job having finished yet)
    # expected to end at once: a gang of higher priority evicts it all the same.
    progress = RunProgress(expected_remaining_s=0.0, unsaved_s=3000.0, restart_s=60.0)
    snapshot = _long_and_short(progress)
    decision = decide(snapshot, [gang("new", gpus=2, priority=1, queue="a")], engine=engine)
    assert decision.admitted_ids == {"new"}
    assert [p.gang_id for p in decision.preemptions] == ["long"]


# --- the limit on re-evictions ---------------------------------------------------------------

RERUN = 1800.0  # the limit: a re-evicted gang runs this long before the tier may evict it again


def evicted_before(snapshot: Snapshot, times: int, run_s: float) -> Snapshot:
    """The snapshot with `long` evicted by the tier `times` times before, now `run_s` into its
    current run."""
    running = tuple(
        replace(r, tier_evictions=times, run_s=run_s) if r.id == "long" else r
        for r in snapshot.running
    )
    return replace(snapshot, running=running)


@pytest.mark.parametrize(
    ("field", "value"), [("tier_evictions", -1), ("run_s", -1.0), ("run_s", math.nan)]
)
def test_the_eviction_history_is_never_negative(field: str, value: float) -> None:
    with pytest.raises(ValueError, match="tier_evictions and run_s"):
        RunningGang("r", H100, (ReplicaPlacement("n", (0,)),), **{field: value})


@pytest.mark.parametrize("rerun_s", [0.0, -5.0], ids=["zero", "negative"])
def test_the_limit_is_positive_or_none(rerun_s: float) -> None:
    with pytest.raises(ValueError, match="service_tier_rerun_s"):
        Policy(service_tier_rerun_s=rerun_s)
    assert Policy().service_tier_rerun_s is None


@pytest.mark.parametrize(
    ("times", "run_s", "rerun_s", "guarded"),
    [
        pytest.param(1, 0.0, RERUN, True, id="just-back"),
        pytest.param(3, RERUN - 1, RERUN, True, id="short-run"),
        pytest.param(1, RERUN, RERUN, False, id="ran-the-limit"),
        pytest.param(0, 0.0, RERUN, False, id="never-evicted"),
        pytest.param(1, 0.0, None, False, id="no-limit"),
    ],
)
def test_the_guard_holds_after_a_tier_eviction_for_the_limit_only(
    times: int, run_s: float, rerun_s: float | None, guarded: bool
) -> None:
    victim = RunningGang(
        "r", H100, (ReplicaPlacement("n", (0,)),), tier_evictions=times, run_s=run_s
    )
    assert rerun_guarded(victim, rerun_s) is guarded


@ENGINES
@pytest.mark.parametrize(
    ("run_s", "rerun_s", "evicted"),
    [
        pytest.param(600.0, RERUN, False, id="run-short"),
        pytest.param(RERUN, RERUN, True, id="run-the-limit"),
        pytest.param(600.0, None, True, id="no-limit"),
    ],
)
def test_the_tier_does_not_evict_a_gang_it_evicted_before_until_it_has_run_the_limit(
    engine: Engine, run_s: float, rerun_s: float | None, evicted: bool
) -> None:
    snapshot = evicted_before(two_gpus_of_queue_a(), 1, run_s)
    decision = decide(snapshot, [gang("new", queue="a")], engine=engine, rerun_s=rerun_s)
    assert decision.admitted_ids == ({"new"} if evicted else set())
    # Never the fresh gang beside it instead: the tier evicts served gangs only.
    assert [p.gang_id for p in decision.preemptions] == (["long"] if evicted else [])


def test_the_limit_leaves_evictions_for_a_higher_priority() -> None:
    snapshot = evicted_before(two_gpus_of_queue_a(), 2, 0.0)
    decision = decide(snapshot, [gang("new", queue="a", priority=1)], rerun_s=RERUN)
    assert decision.admitted_ids == {"new"}
    assert [(p.gang_id, p.service_tier) for p in decision.preemptions] == [("long", False)]


@pytest.mark.parametrize(
    ("times", "run_s", "priority", "problem"),
    [
        pytest.param(1, 600.0, 0, True, id="re-evicted-early"),
        pytest.param(1, RERUN, 0, False, id="ran-the-limit"),
        pytest.param(0, 0.0, 0, False, id="first-eviction"),
        pytest.param(1, 0.0, 1, False, id="higher-priority"),
    ],
)
def test_the_validator_judges_tier_evictions_by_the_limit(
    times: int, run_s: float, priority: int, problem: bool
) -> None:
    # The decision made without the limit, judged with it.
    snapshot = evicted_before(two_gpus_of_queue_a(), times, run_s)
    pending = [gang("new", queue="a", priority=priority)]
    decision = decide(snapshot, pending)
    assert [p.gang_id for p in decision.preemptions] == ["long"]
    expected = (
        [f"long evicted by the service tier again for new after {run_s:g} s of its run, "
         f"under the limit of {RERUN:g} s"]
        if problem
        else []
    )  # fmt: skip
    assert decision_problems(snapshot, pending, decision, THETA, RERUN) == expected
    assert decision_problems(snapshot, pending, decision, THETA, None) == []


@st.composite
def with_history(draw: st.DrawFn) -> tuple[Snapshot, list[Gang]]:
    """`contended` queues, every gang of one priority (so that inside a queue only the tier
    evicts), the running ones served or not, some evicted by the tier before and some way into
    their current run; fresh pending gangs."""
    snapshot, pending = draw(contended())
    running = tuple(
        replace(
            r,
            priority=0,
            attained_gpu_s=draw(st.sampled_from((0.0, LONG, LONG))),
            tier_evictions=draw(st.sampled_from((0, 1, 1, 2))),
            run_s=draw(st.sampled_from((0.0, RERUN / 3, 2 * RERUN / 3, RERUN - 1, RERUN))),
        )
        for r in snapshot.running
    )
    return replace(snapshot, running=running), [replace(g, priority=0) for g in pending]


@FAST
@given(case=with_history(), engine=st.sampled_from(list(Engine)))
def test_no_decision_breaks_the_limit(case: tuple[Snapshot, list[Gang]], engine: Engine) -> None:
    snapshot, pending = case
    decide(snapshot, pending, engine=engine, rerun_s=RERUN)
