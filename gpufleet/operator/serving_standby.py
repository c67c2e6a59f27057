"""Standby replicas of a ServingJob's pools on the cluster: the operator's side of
`gpufleet.core.standby`.

A pool with `spec.autoscaling.standby.<pool>.replicas` keeps up to that many of its pods
asleep (`gpufleet.model.contract.standby`): they stay in the pool's Deployment, so its scale is
awake plus asleep replicas, but the autoscaler sees only the awake ones. `Standbys` holds a
job's pools as one pass read them, in three steps:

- `settle`, every pass: a pool whose standbys are switched off (autoscaling disabled, or the
  pool's entry removed) wakes its asleep pods, and a pool holding more asleep pods than its
  standby count removes the excess;
- `observe`: each pool's (awake, ready awake) replicas, what the autoscaler decides on: asleep
  pods are not counted, and a woken pod counts as starting (not ready) until it is awake again;
- `scale`, the autoscaler's `ReplicaWriter`: it carries a new awake count out by
  `plan_standby` (wake asleep pods first, create only the rest; put pods to sleep up to the
  standby count, remove the rest), marking pods before it changes the Deployment's scale;
- `sync_gates`, last: writes each gated pod's awake condition (`model.contract.standby`), so
  the pool's Service routes to awake replicas only; `ready` counts them for the status.

A pod is awake (condition True) unless it is marked asleep, or was woken less than the pool's
`wakeSeconds` ago (a pod removed this pass is deleted, not marked). Removing replicas: asleep
pods are not Ready, and a ReplicaSet's scale-down removes pods that are not Ready before it
looks at deletion costs, so a lower scale alone would take standbys first. The operator deletes
the replicas it removes itself (pending ones first, then the newest), then lowers the scale by
as many.

With a `ServerSleep` (the opt-in `operator.vllm_sleep_api`: `vllm_sleep.VllmSleepApi`) the
server is put to sleep or woken before its pod is marked (a pod going to sleep leaves the
Service first): a replica whose sleep fails is removed instead, and a failed wake raises
`SleepApiError` (the pod stays marked asleep; the next tick tries again). A woken pod is awake
as soon as the server's `/is_sleeping` says so (not after `wakeSeconds`).

Lent standbys (`gpufleet.model.contract.lending`): a standby the scheduler marked `lent-to` is
not woken but recalled (marked, left asleep and out of its Service) until the scheduler has
preempted its borrower and removed the mark; standbys nobody borrows from are woken first. A
wake is conditional on the resourceVersion read, so a standby lent meanwhile is not woken under
its borrower (the pass is retried).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from gpufleet.core.standby import plan_standby
from gpufleet.model.contract import lending
from gpufleet.model.contract import standby as marks
from gpufleet.model.contract.names import POOL_LABEL
from gpufleet.model.servingjob import ServingJobSpec
from gpufleet.operator.vllm_sleep import SleepApiError

__all__ = ["PodWrites", "ServerSleep", "Standbys", "Writer", "asleep_counts"]

Obj = Mapping[str, Any]
log = logging.getLogger("gpufleet.operator")


class ServerSleep(Protocol):
    """Puts a pod's server to sleep and wakes it (raises `SleepApiError` when it cannot)."""

    def sleep(self, pod: Mapping[str, Any], port: int) -> None: ...

    def wake(self, pod: Mapping[str, Any], port: int) -> None: ...

    def is_sleeping(self, pod: Mapping[str, Any], port: int) -> bool: ...


class Writer(Protocol):
    """What the autoscaler writes a pool's new replica count through (its `ReplicaWriter`)."""

    def scale(self, pool: str, replicas: int) -> None: ...


def _live(pods: Sequence[Obj], pool: str) -> list[Obj]:
    """The pool's pods that are not being deleted, in name order."""
    out = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(POOL_LABEL) == pool
        and not p["metadata"].get("deletionTimestamp")
    ]
    return sorted(out, key=lambda p: str(p["metadata"]["name"]))


def _condition(pod: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _running(pod: Obj) -> bool:
    """Running with its containers ready: Ready but for the awake gate (the kubelet's
    ContainersReady; Ready on a pod that does not report it)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    kinds = {c.get("type") for c in status.get("conditions") or ()}
    return _condition(pod, "ContainersReady" if "ContainersReady" in kinds else "Ready")


def _removal_order(pods: Sequence[Obj]) -> list[Obj]:
    """Awake replicas in the order a scale-down removes them: unbound, then not running, then
    the newest (as a ReplicaSet ranks them, deletion costs aside)."""
    out = sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
    out.reverse()
    out.sort(key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), _running(p)))
    return out


class PodWrites(Protocol):
    """The writes `Standbys` makes in the job's namespace."""

    def patch(self, pod: str, body: dict[str, Any]) -> None:
        """Merge-patch the pod's metadata (marks)."""

    def patch_status(self, pod: str, body: dict[str, Any]) -> None:
        """Strategic-merge-patch the pod's status (the awake condition)."""

    def delete(self, pod: str) -> None:
        """Delete the pod (gone already is fine)."""

    def scale(self, pool: str, replicas: int) -> None:
        """Set the pool's Deployment's scale."""


def asleep_counts(pods: Sequence[Obj], pools: Sequence[str]) -> dict[str, int]:
    """Asleep pods per pool."""
    return {pool: sum(marks.is_asleep(p) for p in _live(pods, pool)) for pool in pools}


def _wake_time(spec: ServingJobSpec, pool: str) -> timedelta:
    """The pool's wakeSeconds, also while autoscaling is off (its standbys are being woken)."""
    standbys = spec.autoscaling.standby if spec.autoscaling is not None else None
    entry = standbys.of(pool) if standbys is not None else None
    return timedelta(seconds=entry.wake_seconds if entry is not None else 0)


class Standbys:
    """A job's pools with standbys, as read this pass: `settle` first, then `observe` for the
    autoscaler, which writes through `scale` (its `ReplicaWriter`: `scale(pool, n)` makes `n`
    the pool's awake replicas by the standby rule), then `sync_gates` (module docstring)."""

    def __init__(
        self,
        spec: ServingJobSpec,
        scales: Mapping[str, int],
        pods: Sequence[Obj],
        cluster: PodWrites,
        now: datetime,
        server: ServerSleep | None = None,
        port: int = 0,
    ) -> None:
        self.spec = spec
        self.scales = dict(scales)
        self.pods = pods
        self.cluster = cluster
        self.now = now
        # This pass's changes, which the listing does not show yet.
        self.woken: set[str] = set()
        self.slept: set[str] = set()
        self.removed: set[str] = set()
        self.server = server  # the servers' own sleep endpoints, if gpufleet calls them
        self.port = port
        self._server_awake: dict[str, bool] = {}

    def _name(self, pod: Obj) -> str:
        return str(pod["metadata"]["name"])

    def _live(self, pool: str) -> list[Obj]:
        return [p for p in _live(self.pods, pool) if self._name(p) not in self.removed]

    def _asleep(self, pod: Obj) -> bool:
        name = self._name(pod)
        return (marks.is_asleep(pod) and name not in self.woken) or name in self.slept

    def awake(self, pod: Obj) -> bool:
        """The pod's awake condition as this pass decides it (module docstring)."""
        name = self._name(pod)
        if self._asleep(pod) or name in self.woken or name in self.removed:
            return False
        if self.server is None or not marks.is_woken(pod):
            return not marks.waking(pod, self.now, _wake_time(self.spec, self._pool(pod)))
        if marks.awake_status(pod):  # the server said so already
            return True
        if name not in self._server_awake:  # woken, not yet seen awake: ask the server once
            try:
                self._server_awake[name] = not self.server.is_sleeping(pod, self.port)
            except SleepApiError as exc:
                log.info("asking whether a woken standby is awake: %s", exc)
                self._server_awake[name] = False
        return self._server_awake[name]

    def _pool(self, pod: Obj) -> str:
        return str((pod["metadata"].get("labels") or {}).get(POOL_LABEL))

    def _wake(self, pod: Obj) -> None:
        if lending.lent_to(pod) is not None:
            # The scheduler lent its GPUs: ask for them back and leave it asleep (out of its
            # Service) until the borrower is gone and the mark with it; a later pass wakes it.
            if not lending.recalled(pod):
                self.cluster.patch(self._name(pod), lending.recall_patch(self.now))
            return
        if self.server is not None:
            self.server.wake(pod, self.port)  # SleepApiError: stays marked, retried next tick
        rv = pod["metadata"].get("resourceVersion")
        self.cluster.patch(self._name(pod), marks.wake_patch(self.now, rv))
        self.woken.add(self._name(pod))

    def _sleep(self, pod: Obj) -> bool:
        """Take the pod out of its Service, put its server to sleep and mark it; False (left
        awake, to be removed) when the server refuses."""
        name = self._name(pod)
        if marks.gated(pod):
            self.cluster.patch_status(name, marks.awake_patch(False, "Asleep", self.now))
        if self.server is not None:
            try:
                self.server.sleep(pod, self.port)
            except SleepApiError as exc:
                log.warning("standby not put to sleep, removed instead: %s", exc)
                return False
        self.cluster.patch(name, marks.sleep_patch())
        self.slept.add(name)
        return True

    def _set_scale(self, pool: str, replicas: int) -> None:
        if replicas != self.scales.get(pool):
            self.cluster.scale(pool, replicas)
            self.scales[pool] = replicas

    def _remove(self, pods: Sequence[Obj]) -> None:
        """Delete `pods` (the caller lowers the scale by as many next: module docstring)."""
        for pod in pods:
            self.cluster.delete(self._name(pod))
            self.removed.add(self._name(pod))

    def scale(self, pool: str, replicas: int) -> None:
        entry = self.spec.standby_of(pool)
        standby = entry.replicas if entry is not None else 0
        live = self._live(pool)
        asleep = [p for p in live if self._asleep(p)]
        total = self.scales.get(pool, len(live))
        awake = max(0, total - len(asleep))
        plan = plan_standby(awake, len(asleep), replicas, standby)
        # Standbys whose GPUs nobody borrows wake at once: they go first.
        asleep.sort(key=lambda p: lending.lent_to(p) is not None)
        for pod in asleep[: plan.wake]:
            self._wake(pod)
        slept = 0
        if plan.sleep:
            # Only a running replica can sleep (it holds its GPU and its loaded weights); the
            # newest go first. Pods still waiting for a GPU are removed instead.
            running = [p for p in live if not self._asleep(p) and _running(p)]
            running.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
            for pod in reversed(running[max(0, len(running) - plan.sleep) :]):
                if self._sleep(pod):
                    slept += 1
        # Asleep pods stay in the Deployment: its scale is awake plus asleep replicas.
        new_total = replicas + len(asleep) - plan.wake + slept
        if new_total < total:
            # Replicas the Deployment has not created yet go first (a lower scale drops
            # them), then awake pods, which the operator deletes itself.
            missing = max(0, total - len(live))
            doomed = max(0, total - new_total - missing)
            self._remove(_removal_order([p for p in live if not self._asleep(p)])[:doomed])
        self._set_scale(pool, new_total)

    def settle(self) -> dict[str, int]:
        """Wake the asleep pods of pools without standbys and remove asleep pods beyond a
        pool's standby count (module docstring); the Deployments' scales afterwards."""
        for pool, total in list(self.scales.items()):
            asleep = [p for p in self._live(pool) if self._asleep(p)]
            if not asleep:
                continue
            entry = self.spec.standby_of(pool)
            if entry is None:
                for pod in asleep:
                    self._wake(pod)
                continue
            excess = asleep[entry.replicas :]
            if excess:
                self._remove(excess)
                self._set_scale(pool, max(0, total - len(excess)))
        return dict(self.scales)

    def observe(self) -> dict[str, tuple[int, int]]:
        """(awake replicas, ready awake replicas) per pool: what the autoscaler decides on."""
        ready, asleep = self.ready(), self.asleep()
        return {pool: (max(0, n - asleep[pool]), ready[pool]) for pool, n in self.scales.items()}

    def asleep(self) -> dict[str, int]:
        """Asleep pods per pool after this pass's changes."""
        return {pool: sum(self._asleep(p) for p in self._live(pool)) for pool in self.scales}

    def ready(self) -> dict[str, int]:
        """Per pool, the replicas that serve: running and awake (what the Service routes to
        once the gates are written)."""
        return {
            pool: sum(_running(p) and self.awake(p) for p in self._live(pool))
            for pool in self.scales
        }

    def sync_gates(self) -> None:
        """Write the awake condition of every gated pod whose condition differs."""
        for pool in self.scales:
            for pod in self._live(pool):
                if not marks.gated(pod) or self._name(pod) in self.slept:  # written by _sleep
                    continue
                awake = self.awake(pod)
                if marks.awake_status(pod) is not awake:
                    why = "Awake" if awake else ("Asleep" if self._asleep(pod) else "Waking")
                    self.cluster.patch_status(
                        self._name(pod), marks.awake_patch(awake, why, self.now)
                    )
