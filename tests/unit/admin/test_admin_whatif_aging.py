"""The what-if counts the pending gangs' waits as the scheduler does (scheduler/cluster_view.py):
it builds its view with the same `ViewBuilder`, so a gang of a queue pending past the policy's
aging goes before the asked-for job of an idle queue, which would otherwise take the one free
GPU by fair share (the asked-for job's own pods do not exist yet: it has waited 0).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.admin.live import JobStore, LiveFleet
from gpufleet.admin.whatif import what_if
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.gpus import load_catalog
from gpufleet.model.trainingjob import TrainingJob
from gpufleet.scheduler.cache import SchedulerCache
from tests.unit.scheduler.scheduler_builders import NodeBuilder, PodBuilder, job_manifest
from tests.unit.scheduler.scheduler_fakes import GREEDY, load


def gq(name: str) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": {}}  # fmt: skip


def worker(gang: str, rank: int, size: int, ago_s: float, node: str | None = None) -> Any:
    """Rank `rank` of a gang of one-GPU workers in queue "busy", created `ago_s` ago."""
    b = PodBuilder(f"{gang}-{rank}", "ns").gpus(1).gang(gang, size, rank)
    b.annotate(names.QUEUE, "busy")
    if node is not None:
        b.bound(node, gpus=str(rank))
    pod = b.obj()
    created = datetime.now(UTC) - timedelta(seconds=ago_s)
    pod["metadata"]["creationTimestamp"] = format_time(created)
    return pod


def idle_job() -> TrainingJob:
    return job_manifest("new", 1, "H100-80GB", queue="idle")


def fleet(pending_ago_s: float) -> LiveFleet:
    """One 8-GPU node, seven GPUs held by queue busy, one busy gang pending `pending_ago_s`."""
    cache = SchedulerCache()
    running = [worker("big", r, 7, 3 * 3600.0, node="n0") for r in range(7)]
    load(cache, [NodeBuilder("n0").obj()], [*running, worker("old", 0, 1, pending_ago_s)])
    cache.replace_queues([gq("busy"), gq("idle")])
    return LiveFleet(cache, JobStore(), load_catalog())


def test_an_aged_gang_goes_before_the_asked_for_job() -> None:
    (gang,) = what_if(fleet(2 * 3600.0), idle_job(), GREEDY, "greedy").gangs
    assert not gang.placed and gang.waiting is not None


def test_a_fresh_gang_gives_the_gpu_to_the_idle_queue() -> None:
    (gang,) = what_if(fleet(60.0), idle_job(), GREEDY, "greedy").gangs
    assert gang.placed
