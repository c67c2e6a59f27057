"""How long each pending gang has waited, in the core's input (scheduler/cluster_view.py).

Aspects: a pending gang's `waited_s` counts from its latest pod's `creationTimestamp` (the
gang could not be offered before its last pod existed; a recreated, evicted gang waits again
from its recreation) to the builder's wall clock, and is 0 for a pod created after that
reading (a skewed clock) or without a creation time, and for a running job's room to grow;
the live cycle hands the waits to the core, so an aged gang of a queue holding GPUs goes
before a fresh gang of an idle queue (the queues' aging, `Policy.queue_aging_s`), which it
did not while the scheduler left every wait at 0; and of many identical gangs, those capped
from a decision are the ones that waited least (the core places the longest waiting first).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import FakeBinder, load, scheduler

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.cluster_view import build_view
from gpufleet.scheduler.offer import cap_identical

CATALOG = load_catalog()
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
HOUR = 3600.0


def gq(name: str) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": {}}  # fmt: skip


def worker(
    gang: str,
    rank: int = 0,
    size: int = 1,
    *,
    ago: float | None = 0.0,
    queue: str | None = None,
    node: str | None = None,
    gpus: int = 1,
) -> dict[str, Any]:
    """Rank `rank` of a gang of `size` workers of `gpus` GPUs, created `ago` seconds before
    NOW (None: no creation time); bound to `node` (its first GPUs) or pending."""
    b = PodBuilder(f"{gang}-{rank}", "ns").gpus(gpus).gang(gang, size, rank)
    if queue is not None:
        b.annotate(names.QUEUE, queue)
    if node is not None:
        b.bound(node, gpus=",".join(str(gpus * rank + i) for i in range(gpus)))
    pod = b.obj()
    if ago is not None:
        pod["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(seconds=ago))
    return pod


def waits(pods: list[dict[str, Any]]) -> dict[str, float]:
    view = build_view(CATALOG, [NodeBuilder("n0").obj()], pods, {}, wall=lambda: NOW)
    return {pg.gang.id: pg.gang.waited_s for pg in view.pending}


def test_a_gang_waits_from_its_latest_pods_creation() -> None:
    pods = [
        worker("old", 0, 2, ago=2 * HOUR),
        worker("old", 1, 2, ago=HOUR),  # the gang could not be offered before this one
        worker("solo", ago=90.0),
        worker("skewed", ago=-30.0),  # created "after" the scheduler's reading
        worker("unstamped", ago=None),
    ]
    assert waits(pods) == {
        "ns/old": HOUR,
        "ns/solo": 90.0,
        "ns/skewed": 0.0,
        "ns/unstamped": 0.0,
    }


def test_an_evicted_gangs_recreated_pods_wait_from_their_recreation() -> None:
    # The job was submitted hours ago and ran; its workers, evicted, were recreated a minute ago.
    pods = [worker("job", r, 2, ago=60.0) for r in range(2)]
    assert waits(pods) == {"ns/job": 60.0}


def test_a_running_jobs_room_to_grow_never_waits() -> None:
    pods = [worker("el", r, 1, ago=2 * HOUR, node="n0") for r in range(2)]
    pods.append(worker("el", 2, 1, ago=2 * HOUR))  # pending growth past the gang of one
    assert waits(pods) == {"ns/el#rest": 0.0}


def test_the_cycle_hands_the_waits_to_the_core_and_an_aged_gang_goes_first() -> None:
    """One free GPU; queue "busy" holds the other seven, queue "idle" none. By fair share the
    fresh gang of "idle" goes first; the gang of "busy" pending for two hours (past the
    policy's aging, an hour) goes before it, and takes the GPU."""
    seen: list[list[Gang]] = []

    def decide(snapshot: Snapshot, gangs: Sequence[Gang], policy: Policy) -> Decision:
        seen.append(list(gangs))
        return place(snapshot, gangs, policy)

    running = [worker("big", r, 7, queue="busy", node="n0") for r in range(7)]
    pods = [
        *running,
        worker("aged", queue="busy", ago=2 * HOUR),
        worker("fresh", queue="idle", ago=10.0),
    ]
    cache = SchedulerCache()
    load(cache, [NodeBuilder("n0").obj()], pods)
    cache.replace_queues([gq("busy"), gq("idle")])
    binder = FakeBinder()
    scheduler(cache, binder, decide=decide, wall=lambda: NOW).run_cycle()
    assert {g.id: g.waited_s for g in seen[-1]} == {"ns/aged": 2 * HOUR, "ns/fresh": 10.0}
    assert sorted(binder.bound) == ["ns/aged-0"]


def test_the_same_gangs_unaged_give_the_gpu_to_the_idle_queue() -> None:
    """The control of the test above: with both gangs fresh, fair share decides."""
    running = [worker("big", r, 7, queue="busy", node="n0") for r in range(7)]
    pods = [*running, worker("aged", queue="busy", ago=60.0), worker("fresh", queue="idle")]
    cache = SchedulerCache()
    load(cache, [NodeBuilder("n0").obj()], pods)
    cache.replace_queues([gq("busy"), gq("idle")])
    binder = FakeBinder()
    scheduler(cache, binder, wall=lambda: NOW).run_cycle()
    assert sorted(binder.bound) == ["ns/fresh-0"]


def test_capping_identical_gangs_keeps_the_longest_waiting() -> None:
    # Eight free GPUs, twelve identical one-GPU gangs: nine are offered (eight fit, plus one).
    # The core places the longest waiting first, so those are the ones kept.
    pods = [worker(f"g{i:02d}", ago=float(i)) for i in range(12)]
    view = build_view(CATALOG, [NodeBuilder("n0").obj()], pods, {}, wall=lambda: NOW)
    offered, capped = cap_identical(list(view.pending), view.snapshot, False, above=4)
    assert [pg.gang.id for pg in offered] == [f"ns/g{i:02d}" for i in range(3, 12)]
    assert capped == {f"ns/g{i:02d}": "ns/g03" for i in range(3)}
