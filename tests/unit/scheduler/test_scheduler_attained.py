"""The service each gang of a queue has received, in the core's input (scheduler/attained.py).

Aspects: a running gang's attained service is its ended runs' (the pods' annotation, which the
operator copies from the job's status) plus its current run's (each running pod's GPUs times
the seconds since its start); a pending gang's is its ended runs' alone, the largest value
among its pods; an elastic job's gang and its room to grow get the whole job's (its growth's
GPUs included), its growth units none (as in the simulator); gangs outside queues, and every
gang when the policy has no service tier, get none, and so do a ServingJob's replicas, however
long they have run (a server has no finish time to favour), and are marked as servers; a
restarted scheduler (a new tracker) computes the same values from the same pods, and a later
clock only adds the time between; the live cycle hands the values to the core; a gang evicted
for a gang of its own queue and priority is marked as evicted by the service tier, one evicted
for a higher priority is not; a running gang the tier evicted before (the count the operator
wrote on its pods, the largest among them) carries the count and how long its whole gang has
run, a gang never evicted by the tier and a pending one carry none.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import FakeBinder, load, scheduler

from gpufleet.core.decision import Decision, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler.attained import AttainedService
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.cluster_view import ClusterView, build_view

CATALOG = load_catalog()
T0 = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
POLICY = Policy(service_tier_gpu_s=600.0)


JOB_OWNER = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "TrainingJob", "name": "long",
             "uid": "job-long", "controller": True}  # fmt: skip


def gq(name: str) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": {}}  # fmt: skip


def worker(
    gang: str,
    rank: int,
    size: int = 2,
    *,
    node: str | None = None,
    ended: float | None = None,
    queue: str | None = "team",
    started: datetime = T0,
) -> dict[str, Any]:
    """Rank `rank` of a gang of `size` two-GPU workers; bound to `node` (running since
    `started`) or pending; `ended`: the ended runs' GPU-seconds its annotation states."""
    b = PodBuilder(f"{gang}-{rank}", "ns").gpus(2).gang(gang, size, rank)
    if queue is not None:
        b.annotate(names.QUEUE, queue)
    if ended is not None:
        b.annotate(names.ATTAINED, f"{ended:.1f}")
    if node is not None:
        b.bound(node, gpus=f"{2 * rank},{2 * rank + 1}")
    pod = b.obj()
    if node is not None:
        pod["status"]["startTime"] = format_time(started)
    return pod


def view(pods: list[dict[str, Any]]) -> ClusterView:
    nodes = [NodeBuilder("n0").obj(), NodeBuilder("n1").obj()]
    return build_view(CATALOG, nodes, pods, {}, queues=[gq("team")])


def attained(v: ClusterView) -> dict[str, float]:
    out = {g.id: g.attained_gpu_s for g in v.snapshot.running}
    return out | {pg.gang.id: pg.gang.attained_gpu_s for pg in v.pending}


def at(seconds: float) -> AttainedService:
    return AttainedService(CATALOG, wall=lambda: T0 + timedelta(seconds=seconds))


PODS = [
    # "long" ran 500 GPU-s before and runs again since T0 on 2 x 2 GPUs.
    worker("long", 0, node="n0", ended=500.0),
    worker("long", 1, node="n0", ended=500.0),
    # "back" was preempted after 300 GPU-s; its rank 0 was recreated before its rank 1's
    # eviction ended the run, so it still carries the run before's value.
    worker("back", 0, ended=120.0),
    worker("back", 1, ended=300.0),
    worker("fresh", 0),
    worker("fresh", 1),
    # "free" runs outside every queue.
    worker("free", 0, size=1, node="n1", queue=None),
]


def test_running_gangs_add_their_current_run_and_pending_ones_only_their_ended_runs() -> None:
    out = attained(at(100).attach(view(PODS), POLICY))
    assert out == {
        "ns/long": pytest.approx(500.0 + 2 * 2 * 100),
        "ns/back": 300.0,
        "ns/fresh": 0.0,
        "ns/free": 0.0,
    }


def test_serving_replicas_never_accrue_service() -> None:
    server = worker("srv", 0, size=1, node="n1")
    server["metadata"]["labels"][names.SERVINGJOB_LABEL] = "srv"
    out = attained(at(3600).attach(view([*PODS, server]), POLICY))
    assert out["ns/srv"] == 0.0
    assert out["ns/long"] == pytest.approx(500.0 + 2 * 2 * 3600)  # training still counts


def test_serving_replicas_are_marked_as_servers_running_or_pending() -> None:
    running = worker("srv", 0, size=1, node="n1")
    waiting = worker("srv2", 0, size=1)
    for pod, job in ((running, "srv"), (waiting, "srv2")):
        pod["metadata"]["labels"][names.SERVINGJOB_LABEL] = job
    v = at(60).attach(view([*PODS, running, waiting]), POLICY)
    ranked = {g.id: g.service_ranked for g in v.snapshot.running}
    ranked |= {pg.gang.id: pg.gang.service_ranked for pg in v.pending}
    assert {g for g, r in ranked.items() if not r} == {"ns/srv", "ns/srv2"}


def test_without_a_tier_the_view_is_left_as_it_is() -> None:
    v = view(PODS)
    assert at(100).attach(v, replace(POLICY, service_tier_gpu_s=None)) is v
    outside = build_view(CATALOG, [NodeBuilder("n0").obj()], PODS[:2], {})  # no queues
    assert at(100).attach(outside, POLICY) is outside


def test_a_restarted_scheduler_finds_the_same_service_and_time_only_adds() -> None:
    first = attained(at(100).attach(view(PODS), POLICY))
    again = attained(at(100).attach(view(PODS), POLICY))  # a new tracker: no memory
    assert again == first
    later = attained(at(160).attach(view(PODS), POLICY))
    assert later["ns/long"] - first["ns/long"] == pytest.approx(2 * 2 * 60)
    assert later["ns/back"] == first["ns/back"]


def test_an_elastic_job_and_its_room_to_grow_carry_its_service_its_growth_units_none() -> None:
    pods = [worker("el", r, size=1, node="n0", ended=50.0) for r in range(3)]
    pods.append(worker("el", 3, size=1, ended=50.0))  # its room to grow, pending
    out = attained(at(10).attach(view(pods), POLICY))
    job = pytest.approx(50.0 + 3 * 2 * 10)  # the gang of one, with its growth's GPUs
    assert out == {
        "ns/el": job,
        "ns/el#extra-1": 0.0,  # growth units stay fresh, as in the simulator
        "ns/el#extra-2": 0.0,
        "ns/el#rest": job,  # a served job's growth is no fresh gang
    }


def test_the_cycle_hands_the_service_to_the_core() -> None:
    seen: list[tuple[Snapshot, list[Gang]]] = []

    def decide(snapshot: Snapshot, gangs: Sequence[Gang], policy: Policy) -> Decision:
        seen.append((snapshot, list(gangs)))
        return place(snapshot, gangs, policy)

    cache = SchedulerCache()
    load(cache, [NodeBuilder("n0").obj()], PODS[:4])
    cache.replace_queues([gq("team")])
    sched = scheduler(cache, FakeBinder(), decide=decide)
    sched.attained.wall = lambda: T0 + timedelta(seconds=30)
    sched.run_cycle()
    snapshot, gangs = seen[-1]
    assert {g.id: g.attained_gpu_s for g in snapshot.running} == {"ns/long": 500.0 + 4 * 30}
    assert {g.id: g.attained_gpu_s for g in gangs} == {"ns/back": 300.0}


@pytest.mark.parametrize(
    ("priority", "cause"),
    [
        pytest.param(0, names.SERVICE_PREEMPTED_REASON, id="same-priority-service-tier"),
        pytest.param(5, names.PREEMPTED_REASON, id="higher-priority"),
    ],
)
def test_a_victim_of_the_service_tier_is_marked_so(priority: int, cause: str) -> None:
    def decide(snapshot: Snapshot, gangs: Sequence[Gang], policy: Policy) -> Decision:
        # As the core states it: an eviction at the same priority is the service tier's.
        tier = priority == 0
        return Decision(preemptions=(Preemption("ns/long", "ns/fresh", service_tier=tier),))

    fresh = [worker("fresh", r) for r in range(2)]
    for p in fresh:
        p["metadata"]["annotations"][names.PRIORITY] = str(priority)
    # long's workers (TrainingJob long's) carry the tier's count from their creation: 1, and
    # 2 on the rank recreated after a later eviction was counted.
    long = copy.deepcopy(PODS[:2])
    for p, count in zip(long, ("1", "2"), strict=True):
        p["metadata"]["ownerReferences"] = [JOB_OWNER]
        p["metadata"]["annotations"][names.TIER_EVICTIONS] = count
    cache = SchedulerCache()
    load(cache, [NodeBuilder("n0").obj()], [*long, *fresh])
    cache.replace_queues([gq("team")])
    binder = FakeBinder()
    scheduler(cache, binder, decide=decide).run_cycle()
    assert sorted(binder.evicted) == [("ns/long-0", cause), ("ns/long-1", cause)]
    # The tier's eviction is recorded on the job at once (one more than its pods carry), so
    # it is counted even if they vanish before the operator sees them.
    job = {**{k: JOB_OWNER[k] for k in ("apiVersion", "kind", "name", "uid")}, "namespace": "ns"}
    assert binder.tier_records == ([(job, 3)] if cause == names.SERVICE_PREEMPTED_REASON else [])


def test_a_running_gang_the_tier_evicted_carries_its_count_and_run() -> None:
    late = T0 + timedelta(seconds=40)  # its rank 1 started 40 s after its rank 0
    pods = [
        worker("long", 0, node="n0", ended=500.0),
        worker("long", 1, node="n0", ended=500.0, started=late),
        worker("back", 0, ended=300.0),
        worker("back", 1, ended=300.0),
        worker("never", 0, size=1, node="n1", ended=900.0),
    ]
    # The rank recreated first may carry the count before the last eviction (as for service).
    pods[0]["metadata"]["annotations"][names.TIER_EVICTIONS] = "1"
    pods[1]["metadata"]["annotations"][names.TIER_EVICTIONS] = "2"
    for p in pods[2:4]:
        p["metadata"]["annotations"][names.TIER_EVICTIONS] = "3"
    v = at(100).attach(view(pods), POLICY)
    history = {g.id: (g.tier_evictions, g.run_s) for g in v.snapshot.running}
    assert history == {"ns/long": (2, pytest.approx(60.0)), "ns/never": (0, 0.0)}
    assert [pg.gang.id for pg in v.pending] == ["ns/back"]  # a pending gang has no run
