"""Where an evicted gang goes back in line, live (`Policy.requeue_timestamp`, cluster_view.py).

Aspects: with `eviction` (the default) a gang's place in line is its wait, from its latest pod's
creation (`queued_s` None), so a job whose pods were recreated after an eviction goes after its
queue's jobs submitted later than it but pending longer; with `creation` it is in line since
its job's submission as its pods say (`gpufleet.io/submitted-at`, written by the operator),
else since its earliest pod's creation (bare pods), and goes before them, while its wait (queue
aging) still counts from its recreated pods, so it is not aged at once; a gang never evicted
and a running job's room to grow carry no separate place in line; an unreadable annotation
reads as absent; of many identical gangs, those capped are the latest in line.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import FakeBinder, load, scheduler

from gpufleet.core.policy import RequeueTimestamp
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.cluster_view import build_view
from gpufleet.scheduler.offer import cap_identical

CATALOG = load_catalog()
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
HOUR = 3600.0
EVICTION, CREATION = RequeueTimestamp.EVICTION, RequeueTimestamp.CREATION


def gq(name: str) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": {}}  # fmt: skip


def ago(seconds: float) -> str:
    return format_time(NOW - timedelta(seconds=seconds))


def worker(
    gang: str,
    rank: int = 0,
    size: int = 1,
    *,
    created: float = 0.0,
    submitted: float | str | None = None,
    queue: str | None = None,
    node: str | None = None,
) -> dict[str, Any]:
    """Rank `rank` of a gang of `size` one-GPU workers created `created` seconds before NOW,
    whose pods say their job was submitted `submitted` seconds before NOW (a string: written
    as is; None: they do not say); bound to `node` or pending."""
    b = PodBuilder(f"{gang}-{rank}", "ns").gpus(1).gang(gang, size, rank)
    if queue is not None:
        b.annotate(names.QUEUE, queue)
    if submitted is not None:
        b.annotate(names.SUBMITTED_AT, submitted if isinstance(submitted, str) else ago(submitted))
    if node is not None:
        b.bound(node, gpus=str(rank))
    pod = b.obj()
    pod["metadata"]["creationTimestamp"] = ago(created)
    return pod


def lines(
    pods: list[dict[str, Any]], requeue: RequeueTimestamp
) -> dict[str, tuple[float, float | None]]:
    """Gang -> (waited_s, queued_s) in the view built with `requeue`."""
    view = build_view(
        CATALOG, [NodeBuilder("n0").obj()], pods, {}, wall=lambda: NOW, requeue=requeue
    )
    return {pg.gang.id: (pg.gang.waited_s, pg.gang.queued_s) for pg in view.pending}


# Submitted two hours ago, evicted: its two workers recreated a minute ago.
EVICTED = [worker("job", r, 2, created=60.0, submitted=2 * HOUR) for r in range(2)]


def test_by_eviction_an_evicted_job_is_in_line_from_its_recreated_pods() -> None:
    assert lines(EVICTED, EVICTION) == {"ns/job": (60.0, None)}


def test_by_creation_it_is_in_line_since_its_submission_and_waits_from_its_eviction() -> None:
    assert lines(EVICTED, CREATION) == {"ns/job": (60.0, 2 * HOUR)}


def test_bare_pods_are_in_line_since_their_earliest_pods_creation() -> None:
    pods = [worker("bare", 0, 2, created=2 * HOUR), worker("bare", 1, 2, created=HOUR)]
    assert lines(pods, CREATION) == {"ns/bare": (HOUR, 2 * HOUR)}
    assert lines(pods, EVICTION) == {"ns/bare": (HOUR, None)}


def test_a_gang_never_evicted_and_a_room_to_grow_have_no_place_of_their_own() -> None:
    pods = [
        worker("fresh", created=90.0, submitted=90.0),
        worker("garbled", created=90.0, submitted="yesterday"),  # read as absent
        *[worker("el", r, 1, created=2 * HOUR, submitted=2 * HOUR, node="n0") for r in range(2)],
        worker("el", 2, 1, created=60.0, submitted=2 * HOUR),  # pending growth past its size
    ]
    assert lines(pods, CREATION) == {
        "ns/fresh": (90.0, None),
        "ns/garbled": (90.0, None),
        "ns/el#rest": (0.0, None),
    }


def one_free_gpu(requeue: RequeueTimestamp, *pending: dict[str, Any]) -> list[str]:
    """Seven of n0's eight GPUs held by queue "busy"; the pods bound by one cycle."""
    running = [worker("big", r, 7, queue="busy", created=3 * HOUR, node="n0") for r in range(7)]
    cache = SchedulerCache()
    load(cache, [NodeBuilder("n0").obj()], [*running, *pending])
    cache.replace_queues([gq("busy"), gq("idle")])
    binder = FakeBinder()
    loop = scheduler(cache, binder, wall=lambda: NOW)
    loop.policy = replace(loop.policy, requeue_timestamp=requeue)
    loop.run_cycle()
    return sorted(binder.bound)


def test_the_cycle_gives_the_gpu_to_the_evicted_job_only_by_creation() -> None:
    """Two jobs of queue "busy" wait for the one free GPU: "evicted", submitted two hours ago
    and recreated a minute ago, and "later", submitted (and pending) for half an hour."""
    evicted = worker("evicted", queue="busy", created=60.0, submitted=2 * HOUR)
    later = worker("later", queue="busy", created=HOUR / 2, submitted=HOUR / 2)
    assert one_free_gpu(EVICTION, evicted, later) == ["ns/later-0"]
    assert one_free_gpu(CREATION, evicted, later) == ["ns/evicted-0"]


def test_by_creation_an_evicted_job_is_not_aged_at_once() -> None:
    """Its place in line is two hours old, past the aging (an hour), but its wait is a minute:
    the fair-share order gives the GPU to the idle queue's job, as by eviction."""
    evicted = worker("evicted", queue="busy", created=60.0, submitted=2 * HOUR)
    fresh = worker("fresh", queue="idle", created=10.0, submitted=10.0)
    assert one_free_gpu(CREATION, evicted, fresh) == ["ns/fresh-0"]
    aged = worker("aged", queue="busy", created=2 * HOUR, submitted=2 * HOUR)
    assert one_free_gpu(CREATION, aged, fresh) == ["ns/aged-0"]  # the control: aged by its wait


def test_capping_identical_gangs_keeps_the_earliest_in_line() -> None:
    # Eight free GPUs, twelve identical one-GPU gangs all recreated a minute ago, submitted
    # i hours ago: nine are offered (eight fit, plus one), those submitted first.
    pods = [worker(f"g{i:02d}", created=60.0, submitted=(i + 1) * HOUR) for i in range(12)]
    view = build_view(
        CATALOG, [NodeBuilder("n0").obj()], pods, {}, wall=lambda: NOW, requeue=CREATION
    )
    offered, capped = cap_identical(list(view.pending), view.snapshot, False, above=4)
    assert [pg.gang.id for pg in offered] == [f"ns/g{i:02d}" for i in range(3, 12)]
    assert capped == {f"ns/g{i:02d}": "ns/g03" for i in range(3)}
