"""Leader election on a coordination.k8s.io Lease: only the holder schedules and reconciles.

A candidate takes the Lease when it is absent or its holder stopped renewing for longer than the
lease duration, then renews it every `renew_every` seconds. Updates carry the resourceVersion
read, so two candidates racing for an expired Lease cannot both win (the loser gets a 409).

`held` is the fence: whether the last successful renewal is still within the duration, by this
process's monotonic clock. The scheduler checks it before each cycle and the operator's handlers
before each pass, so a holder that could not renew for a whole duration (an API server or etcd
outage, a paused process) makes no decision, since a standby may have taken over meanwhile.
Failing to renew is not losing the Lease: a single replica cut off from the API server has lost
it to nobody, and exiting would only leave the cluster without an operator once the server is
back. So `keep` goes on trying to renew (or take the Lease again once it expired) until it
succeeds, and calls `on_lost` only when it sees another candidate holding the Lease.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet import kubepool
from gpufleet.model.contract import names

log = logging.getLogger("gpufleet.lease")

DEFAULT_LEASE_NAME = "gpufleet-operator"
DEFAULT_LEASE_NAMESPACE = names.MIG_CONFIGMAP_NAMESPACE  # gpufleet's own namespace


def _now() -> datetime:
    return datetime.now(UTC)


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


class LeaderLease:
    def __init__(
        self,
        api: client.CoordinationV1Api,
        namespace: str,
        name: str,
        identity: str,
        duration: float = 15.0,
        renew_every: float = 5.0,
        now: Callable[[], datetime] = _now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.renew_every = renew_every
        self._now = now
        self._monotonic = monotonic
        self._valid_until = float("-inf")  # monotonic end of the duration of the last renewal
        # A renewal that has not been answered within a duration (an API server waiting for
        # its etcd) is abandoned and tried again, rather than holding the keeper indefinitely.
        self._timeout = duration

    def _spec(self, acquired: datetime, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.duration)),
            "acquireTime": _fmt(acquired),
            "renewTime": _fmt(self._now()),
            "leaseTransitions": transitions,
        }

    def held(self) -> bool:
        """Whether this candidate renewed the Lease less than a duration ago."""
        return self._monotonic() < self._valid_until

    def try_acquire(self) -> bool:
        """Take or renew the Lease; True while this candidate holds it."""
        asked = self._monotonic()
        if self._take():
            self._valid_until = asked + self.duration
            return True
        return False

    def _take(self) -> bool:
        try:
            lease = self.api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            body: Any = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(self._now(), 0),
            }
            try:
                kubepool.release(
                    self.api.create_namespaced_lease(
                        self.namespace, body, _preload_content=False, _request_timeout=self._timeout
                    )
                )
                return True
            except ApiException as create_exc:
                if create_exc.status == 409:
                    return False
                raise
        doc = json.loads(lease.data)  # type: ignore[attr-defined]  # raw response
        spec = doc.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquired = _parse(spec.get("acquireTime")) or self._now()
        elif holder and renewed is not None and renewed + timedelta(seconds=duration) > self._now():
            return False  # someone else holds a live lease
        else:
            acquired, transitions = self._now(), transitions + 1
        doc["spec"] = self._spec(acquired, transitions)
        try:
            kubepool.release(
                self.api.replace_namespaced_lease(
                    self.name,
                    self.namespace,
                    doc,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def release(self) -> None:
        """Give the Lease up on a clean shutdown so a standby takes over at once."""
        try:
            raw: Any = self.api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False
            )
            doc = json.loads(raw.data)
            spec = doc.get("spec") or {}
            if spec.get("holderIdentity") == self.identity:
                doc["spec"] = {**spec, "holderIdentity": None, "renewTime": None}
                kubepool.release(
                    self.api.replace_namespaced_lease(
                        self.name, self.namespace, doc, _preload_content=False
                    )
                )
        except ApiException as exc:
            log.info("could not release lease: %s", exc.reason)

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this candidate holds the Lease (True) or `stop` is set (False)."""
        while not stop.is_set():
            try:
                if self.try_acquire():
                    log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
                    return True
            except Exception as exc:
                log.warning("lease: %s", exc)
            stop.wait(self.renew_every / 2)
        return False

    def keep(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew until `stop`; call `on_lost` (and return) when another candidate holds the
        Lease. Renewals that fail (the API server cannot be reached) are retried, twice as
        often once the Lease is no longer held, so leadership resumes soon after the server
        does."""
        failing_since: float | None = None
        while not stop.wait(self.renew_every if self.held() else self.renew_every / 2):
            try:
                renewed = self.try_acquire()
            except Exception as exc:
                if failing_since is None:
                    failing_since = self._monotonic()
                    log.warning("lease renewal failed (retrying until it works): %s", exc)
                continue
            if renewed:
                if failing_since is not None:
                    log.warning(
                        "lease %s/%s renewed again after %.1fs of failed renewals",
                        self.namespace, self.name, self._monotonic() - failing_since,
                    )  # fmt: skip
                    failing_since = None
                continue
            log.error("lease %s/%s taken by another candidate", self.namespace, self.name)
            on_lost()
            return
