"""Phases 8 and 0 of the cycle: bindings assumed, sent in one batch, settled later.

Every pod of a placed gang is first assumed in the cache (the next cycle counts its GPUs even
before the watch shows the pod, and before the binding is answered, however long that takes),
then all bindings of the cycle go out as one batch answered in the background (pipelining: the
next cycle may place more gangs meanwhile). A later cycle settles each answered batch: a gang
whose bindings all went through is reported bound; a gang with any failed binding is rolled back
whole (its assumptions forgotten, its bound pods deleted), never left partly bound.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent import futures
from concurrent.futures import Future

from gpufleet.core.decision import GangPlacement
from gpufleet.model.contract.assignment import Assignment
from gpufleet.scheduler.binder import Binder, BindRequest
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.cluster_view import PendingGang
from gpufleet.scheduler.cycle_report import CycleReport
from gpufleet.scheduler.deletions import Deletions

log = logging.getLogger("gpufleet.scheduler")

# A batch in flight: gang id -> its binding requests, and the batch's answer.
_Batch = tuple[dict[str, list[BindRequest]], Future[dict[str, str | None]]]


def bind_annotations(placement: GangPlacement, replica: int) -> dict[str, str]:
    """What the binding writes onto the pod of `replica`: its GPUs, MIG instance, power cap."""
    rp = placement.replicas[replica]
    return Assignment(rp.gpus, placement.gpu_type, rp.mig, placement.power_cap_w).annotations()


class InflightBindings:
    """The binding batches sent and not yet settled."""

    def __init__(self, cache: SchedulerCache, binder: Binder, deletions: Deletions) -> None:
        self.cache = cache
        self.binder = binder
        self.deletions = deletions
        self._batches: list[_Batch] = []

    @property
    def busy(self) -> bool:
        return bool(self._batches)

    def send(
        self,
        placements: Sequence[GangPlacement],
        by_id: Mapping[str, PendingGang],
        report: CycleReport,
        extra: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """Assume every placed gang and start its bindings in one parallel batch; settle the
        batches already answered. `extra`: pod key -> more annotations its binding writes
        (the standbys a borrowing pod borrows from)."""
        extra = extra or {}
        per_gang: dict[str, list[BindRequest]] = {}
        for placement in placements:
            pg = by_id[placement.gang_id]
            if len(placement.replicas) > len(pg.pods):
                report.bind_failures[pg.gang.id] = "placement has more replicas than pods"
                continue
            # Replica i goes to the pod of rank i; an elastic gang may get fewer than its pods.
            per_gang[pg.gang.id] = [
                BindRequest(
                    key,
                    placement.replicas[i].node,
                    {**bind_annotations(placement, i), **extra.get(key, {})},
                )
                for i, key in enumerate(pg.pods[: len(placement.replicas)])
            ]
        requests = [r for rs in per_gang.values() for r in rs]
        if requests:
            for r in requests:
                self.cache.assume(r.pod_key, r.node, r.annotations, in_flight=True)
            keys = [r.pod_key for r in requests]

            def answered(_: Future[dict[str, str | None]]) -> None:
                self.cache.answered(keys)
                self.cache.changed.set()

            future = self.binder.bind_async(requests)
            report.sent = len(requests)
            future.add_done_callback(answered)
            self._batches.append((per_gang, future))
        self.settle(report)

    def settle(self, report: CycleReport, wait: float | None = None) -> None:
        """Report the gangs of answered batches bound; roll back a gang with any failed
        binding: forget its assumptions and delete the pods that were bound. With `wait`,
        first wait up to that long for the batches in flight."""
        if wait is not None and self._batches:
            futures.wait([f for _, f in self._batches], timeout=wait)
        still: list[_Batch] = []
        rollback: list[str] = []
        for per_gang, future in self._batches:
            if not future.done():
                still.append((per_gang, future))
                continue
            rollback += self._settle_batch(per_gang, future, report)
        self._batches = still
        if rollback:
            self.deletions.remember(rollback)
            self.binder.delete_pods(
                rollback, "GangBindingFailed", "another pod of the gang could not be bound"
            )

    def _settle_batch(
        self,
        per_gang: Mapping[str, list[BindRequest]],
        future: Future[dict[str, str | None]],
        report: CycleReport,
    ) -> list[str]:
        """Report one answered batch; the bound pods of its failed gangs."""
        try:
            results = future.result()
        except Exception as exc:  # the writer itself failed: nothing is known to be bound
            results = {
                r.pod_key: f"binding batch failed: {exc}" for rs in per_gang.values() for r in rs
            }
        rollback: list[str] = []
        for gid, rs in per_gang.items():
            failed = [results[r.pod_key] for r in rs if results.get(r.pod_key) is not None]
            if not failed:
                report.bound.append(gid)
                continue
            for r in rs:
                self.cache.forget(r.pod_key)
            bound = [r.pod_key for r in rs if results.get(r.pod_key) is None]
            log.warning(
                "cycle=%d gang %s: %d binding(s) failed (%s); removing its %d bound pod(s)",
                report.cycle, gid, len(failed), failed[0], len(bound),
            )  # fmt: skip
            rollback.extend(bound)
            report.bind_failures[gid] = failed[0] or "failed"
        return rollback
