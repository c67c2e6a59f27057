"""Phase 1 of the cycle, for the service tier: the service each gang of a queue has received
(the core's `Gang.attained_gpu_s` and `RunningGang.attained_gpu_s`), from its pods and the
clock (`model.contract.service`).

- Ended runs: the GPU-seconds the operator wrote on the job's pods (from its
  `status.attainedGpuSeconds`, recorded when the current run's pods were created). The largest
  value among the gang's pods counts: a worker recreated while the rest of its gang was still
  being evicted carries the value of the run before.
- Current run: each running pod of the job, its GPUs (a MIG slice its compute fraction) times
  the seconds since its `status.startTime`, up to now. A pending gang has none (its pods do not
  run), but for a running job's room to grow (`<gang>#rest`), which gets the job's whole
  service like the running gang named after the job: a served job's growth is no fresh gang.
  The tier ranks jobs: an elastic job's growth units (`<gang>#extra-<i>`, priority 0) and the
  parts of a gang split over two types get none, as in the simulator.
- A running job the tier evicted before also gets its eviction history, for the tier's limit
  on re-evictions: the count the operator wrote on its pods (the largest among them, as for
  the service) and how long its current run has lasted (`model.contract.service.run_s`).
- A ServingJob's replicas get none, and are marked as servers (`service_ranked` False), which
  the tier neither evicts nor evicts for: a server has no finish time that least attained
  service could favour, and its `preemptible` promises eviction by higher priorities and
  reclaims only.
Nothing here looks past now: a pod's service ends at the clock's reading, and a start time
after it counts nothing. The tier acts only inside queues and with a threshold
(`Policy.service_tier_gpu_s`); otherwise the view is left as it is (every attained 0).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import RunningGang
from gpufleet.model.contract import names
from gpufleet.model.contract.service import read_attained, read_tier_evictions, run_gpu_s, run_s
from gpufleet.model.gpus import Catalog
from gpufleet.scheduler import pods
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang
from gpufleet.scheduler.pods import Pod

__all__ = ["AttainedService", "job_of"]


def job_of(gang_id: str) -> str:
    """The gang (job) a running unit or pending rest belongs to: `ns/job#rest` -> `ns/job`."""
    return gang_id.split("#", 1)[0]


class AttainedService:
    """Gives the gangs of queues their attained service, by the wall clock `wall`."""

    def __init__(
        self, catalog: Catalog, wall: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.catalog = catalog
        self.wall = wall

    def attach(self, view: ClusterView, policy: Policy) -> ClusterView:
        """`view` with the attained service of every gang (running or pending) charged to a
        queue, when the policy has a service tier and the snapshot has queues."""
        snapshot = view.snapshot
        if policy.service_tier_gpu_s is None or snapshot.queues is None:
            return view
        running = [g for g in snapshot.running if g.queue is not None and "#" not in g.id]
        pending = [pg for pg in view.pending if pg.gang.queue is not None]
        jobs = {job_of(g.id) for g in running} | {job_of(pg.gang.id) for pg in pending}
        if not jobs:
            return view
        members: dict[str, list[Pod]] = defaultdict(list)
        servers: set[str] = set()
        for f in view.facts.values():
            if not (f.ours and f.gang in jobs):
                continue
            # A ServingJob's pods count nothing: its replicas keep no service (docstring).
            if names.SERVINGJOB_LABEL in pods.pod_labels(f.pod):
                servers.add(f.gang)
            else:
                members[f.gang].append(f.pod)
        now = self.wall()
        served = {
            job: max((read_attained(pods.pod_annotations(p)) for p in members[job]), default=0.0)
            + run_gpu_s(members[job], self.catalog, now)
            for job in jobs
        }
        evictions = {
            job: max(
                (read_tier_evictions(pods.pod_annotations(p)) for p in members[job]), default=0
            )
            for job in jobs
        }

        def running_gang(g: RunningGang) -> RunningGang:
            if g.queue is None or "#" in g.id:
                return g
            if g.id in servers:
                return replace(g, service_ranked=False)
            value = served[g.id]
            ranked = replace(g, attained_gpu_s=value) if value else g
            return _with_history(ranked, evictions[g.id], members[g.id], now)

        def pending_gang(pg: PendingGang) -> PendingGang:
            job = job_of(pg.gang.id)
            if job in servers:
                return PendingGang(replace(pg.gang, service_ranked=False), pg.pods)
            if pg.gang.queue is None or not served[job]:
                return pg
            return PendingGang(replace(pg.gang, attained_gpu_s=served[job]), pg.pods)

        with_running = tuple(running_gang(g) for g in snapshot.running)
        with_pending = tuple(pending_gang(pg) for pg in view.pending)
        return replace(view, snapshot=replace(snapshot, running=with_running), pending=with_pending)


def _with_history(
    gang: RunningGang, evictions: int, members: list[Pod], now: datetime
) -> RunningGang:
    """`gang` with its eviction history by the tier, when the tier has evicted it."""
    if not evictions:
        return gang
    return replace(gang, tier_evictions=evictions, run_s=run_s(members, now))
