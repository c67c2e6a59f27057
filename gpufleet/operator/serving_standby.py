"""Standby replicas of a ServingJob's pools on the cluster: the operator's side of
`gpufleet.core.standby`.

A pool with `spec.autoscaling.standby.<pool>.replicas` keeps up to that many of its pods
asleep (`gpufleet.model.contract.standby`): they stay in the pool's Deployment, so its scale is
awake plus asleep replicas, but the autoscaler sees only the awake ones. `Standbys` holds a
job's pools as one pass read them, in three steps:

- `settle`, every pass: a pool whose standbys are switched off (autoscaling disabled, or the
  pool's entry removed) wakes its asleep pods, and a pool holding more asleep pods than its
  standby count retires the excess (lowest deletion cost, then one replica fewer);
- `observe`: each pool's (awake, ready awake) replicas, what the autoscaler decides on: asleep
  pods are not counted, and a woken pod counts as starting (not ready) for the pool's
  `wakeSeconds`;
- `scale`, the autoscaler's `ReplicaWriter`: it carries a new awake count out by
  `plan_standby` (wake asleep pods first, create only the rest; put pods to sleep up to the
  standby count, remove the rest), marking pods before it changes the Deployment's scale, so
  the ReplicaSet's scale-down removes awake pods and keeps the standbys.

With a `ServerSleep` (the opt-in `operator.vllm_sleep_api`: `vllm_sleep.VllmSleepApi`) the
server is put to sleep or woken before its pod is marked: a replica whose sleep fails is
removed instead, and a failed wake raises `SleepApiError` (the pod stays marked asleep; the
next tick tries again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from gpufleet.core.standby import plan_standby
from gpufleet.model.contract import standby as marks
from gpufleet.model.contract.names import POOL_LABEL
from gpufleet.model.servingjob import ServingJobSpec
from gpufleet.operator.vllm_sleep import SleepApiError

__all__ = ["PodPatcher", "ServerSleep", "Standbys", "Writer", "asleep_counts"]

Obj = Mapping[str, Any]
log = logging.getLogger("gpufleet.operator")
# Merge-patches one pod (by name) of the job's namespace.
PodPatcher = Callable[[str, dict[str, Any]], None]
Scaler = Callable[[str, int], None]


class ServerSleep(Protocol):
    """Puts a pod's server to sleep and wakes it (raises `SleepApiError` when it cannot)."""

    def sleep(self, pod: Mapping[str, Any], port: int) -> None: ...

    def wake(self, pod: Mapping[str, Any], port: int) -> None: ...


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


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def asleep_counts(pods: Sequence[Obj], pools: Sequence[str]) -> dict[str, int]:
    """Asleep pods per pool."""
    return {pool: sum(marks.is_asleep(p) for p in _live(pods, pool)) for pool in pools}


def _wake_time(spec: ServingJobSpec, pool: str) -> timedelta:
    entry = spec.standby_of(pool)
    return timedelta(seconds=entry.wake_seconds if entry is not None else 0)


class Standbys:
    """A job's pools with standbys, as read this pass: `settle` first, then `observe` for the
    autoscaler, which writes through `scale` (its `ReplicaWriter`: `scale(pool, n)` makes `n`
    the pool's awake replicas by the standby rule; module docstring)."""

    def __init__(
        self,
        spec: ServingJobSpec,
        scales: Mapping[str, int],
        pods: Sequence[Obj],
        patch_pod: PodPatcher,
        scale: Scaler,
        now: datetime,
        server: ServerSleep | None = None,
        port: int = 0,
    ) -> None:
        self.spec = spec
        self.scales = dict(scales)
        self.pods = pods
        self.patch_pod = patch_pod
        self._scale = scale
        self.now = now
        self.woken: set[str] = set()  # pods woken this pass (the listing still shows them asleep)
        self.server = server  # the servers' own sleep endpoints, if gpufleet calls them
        self.port = port

    def _asleep(self, pod: Obj) -> bool:
        return marks.is_asleep(pod) and pod["metadata"]["name"] not in self.woken

    def _wake(self, pod: Obj) -> None:
        if self.server is not None:
            self.server.wake(pod, self.port)  # SleepApiError: stays marked, retried next tick
        self.patch_pod(pod["metadata"]["name"], marks.wake_patch(self.now))
        self.woken.add(pod["metadata"]["name"])

    def _sleep(self, pod: Obj) -> bool:
        """Put the pod's server to sleep and mark it; False (left awake) when the server
        refuses."""
        if self.server is not None:
            try:
                self.server.sleep(pod, self.port)
            except SleepApiError as exc:
                log.warning("standby not put to sleep, removed instead: %s", exc)
                return False
        self.patch_pod(pod["metadata"]["name"], marks.sleep_patch())
        return True

    def scale(self, pool: str, replicas: int) -> None:
        entry = self.spec.standby_of(pool)
        standby = entry.replicas if entry is not None else 0
        live = _live(self.pods, pool)
        asleep = [p for p in live if self._asleep(p)]
        total = self.scales.get(pool, len(live))
        awake = max(0, total - len(asleep))
        plan = plan_standby(awake, len(asleep), replicas, standby)
        for pod in asleep[: plan.wake]:
            self._wake(pod)
        slept = 0
        if plan.sleep:
            # Only a running replica can sleep (it holds its GPU and its loaded weights); the
            # newest go first. Pods still waiting for a GPU are removed instead.
            running = [p for p in live if not self._asleep(p) and _ready(p)]
            running.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
            for pod in reversed(running[max(0, len(running) - plan.sleep) :]):
                if self._sleep(pod):
                    slept += 1
        # Asleep pods stay in the Deployment: its scale is awake plus asleep replicas.
        new_total = replicas + len(asleep) - plan.wake + slept
        if new_total != total:
            self._scale(pool, new_total)
            self.scales[pool] = new_total

    def settle(self) -> dict[str, int]:
        """Wake the asleep pods of pools without standbys and retire asleep pods beyond a pool's
        standby count (module docstring); the Deployments' scales afterwards."""
        out = self.scales
        for pool, total in list(out.items()):
            live = _live(self.pods, pool)
            asleep = [p for p in live if self._asleep(p)]
            if not asleep:
                continue
            entry = self.spec.standby_of(pool)
            if entry is None:
                for pod in asleep:
                    self._wake(pod)
                continue
            excess = asleep[entry.replicas :]
            # A ReplicaSet removes pending and unready pods before it looks at deletion costs,
            # and the pods must show the last scale: retire only when every pod runs, so the
            # retired standby is the one that goes (and only once).
            settled = len(live) == total and all(_ready(p) for p in live)
            if excess and settled:
                for pod in excess:
                    self.patch_pod(pod["metadata"]["name"], marks.retire_patch())
                out[pool] = max(0, total - len(excess))
                self._scale(pool, out[pool])
        return dict(out)

    def observe(self) -> dict[str, tuple[int, int]]:
        """(awake replicas, ready awake replicas) per pool: what the autoscaler decides on."""
        out: dict[str, tuple[int, int]] = {}
        for pool, scale in self.scales.items():
            live = _live(self.pods, pool)
            asleep = sum(self._asleep(p) for p in live)
            wake = _wake_time(self.spec, pool)
            ready = sum(
                _ready(p)
                and not self._asleep(p)
                and p["metadata"]["name"] not in self.woken
                and not marks.waking(p, self.now, wake)
                for p in live
            )
            out[pool] = (max(0, scale - asleep), ready)
        return out
