"""Leader election on a Lease: create when absent, renew while held, refuse a live lease of
another holder, take over an expired one (counting the transition), lose a write race (409),
release on clean shutdown; the keeper rides out an unreachable API server (fenced by `held`
meanwhile) and reports the Lease lost only when another candidate holds it."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpufleet.scheduler.lease import LeaderLease


class Raw:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.data = json.dumps(doc).encode()

    def drain_conn(self) -> None:
        """Nothing left to read."""

    def release_conn(self) -> None:
        """No connection to give back."""


class FakeCoordination:
    """One Lease in memory with resourceVersion checks, like the API server."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] | None = None
        self.version = 0
        self.conflict_next = False

    def read_namespaced_lease(self, name: str, ns: str, **_: Any) -> Raw:
        if self.doc is None:
            raise ApiException(status=404)
        return Raw(self.doc)

    def create_namespaced_lease(self, ns: str, body: dict[str, Any], **_: Any) -> Raw:
        if self.doc is not None:
            raise ApiException(status=409)
        self.version += 1
        self.doc = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return Raw(self.doc)

    def replace_namespaced_lease(self, name: str, ns: str, body: dict[str, Any], **_: Any) -> Raw:
        assert self.doc is not None
        sent = body["metadata"].get("resourceVersion")
        if self.conflict_next or sent != self.doc["metadata"]["resourceVersion"]:
            self.conflict_next = False
            raise ApiException(status=409)
        self.version += 1
        self.doc = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return Raw(self.doc)


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t


def candidate(api: FakeCoordination, who: str, clock: Clock) -> LeaderLease:
    return LeaderLease(api, "ns", "lease", who, duration=15, now=clock)  # type: ignore[arg-type]


def test_first_candidate_creates_and_renews() -> None:
    api, clock = FakeCoordination(), Clock()
    a = candidate(api, "a", clock)
    assert a.try_acquire()
    assert api.doc is not None and api.doc["spec"]["holderIdentity"] == "a"
    clock.t += timedelta(seconds=5)
    assert a.try_acquire()
    assert api.doc["spec"]["renewTime"].startswith("2026-01-01T00:00:05")
    assert api.doc["spec"]["leaseTransitions"] == 0


def test_live_lease_of_another_holder_is_respected() -> None:
    api, clock = FakeCoordination(), Clock()
    assert candidate(api, "a", clock).try_acquire()
    clock.t += timedelta(seconds=14)
    assert not candidate(api, "b", clock).try_acquire()


def test_expired_lease_is_taken_over() -> None:
    api, clock = FakeCoordination(), Clock()
    assert candidate(api, "a", clock).try_acquire()
    clock.t += timedelta(seconds=16)
    assert candidate(api, "b", clock).try_acquire()
    assert api.doc is not None
    assert api.doc["spec"]["holderIdentity"] == "b"
    assert api.doc["spec"]["leaseTransitions"] == 1


def test_losing_the_write_race_means_not_leading() -> None:
    api, clock = FakeCoordination(), Clock()
    assert candidate(api, "a", clock).try_acquire()
    clock.t += timedelta(seconds=16)
    api.conflict_next = True  # another candidate updated the Lease between read and write
    assert not candidate(api, "b", clock).try_acquire()


def test_released_lease_is_taken_at_once() -> None:
    api, clock = FakeCoordination(), Clock()
    a = candidate(api, "a", clock)
    assert a.try_acquire()
    a.release()
    assert candidate(api, "b", clock).try_acquire()


def test_held_only_within_a_duration_of_the_last_renewal() -> None:
    api, clock = FakeCoordination(), Clock()
    ticks = [100.0]
    a = LeaderLease(
        api,  # type: ignore[arg-type]
        "ns",
        "lease",
        "a",
        duration=15,
        now=clock,
        monotonic=lambda: ticks[0],
    )
    assert not a.held()  # never acquired
    assert a.try_acquire() and a.held()
    ticks[0] += 14.9
    assert a.held()
    ticks[0] += 0.2  # paused past the duration without renewing: no longer acting
    assert not a.held()
    assert a.try_acquire() and a.held()  # nobody took it meanwhile: renewed, acting again
    clock.t += timedelta(seconds=16)
    assert candidate(api, "b", clock).try_acquire()
    ticks[0] += 16
    assert not a.try_acquire() and not a.held()


class Unreachable(FakeCoordination):
    """The API server goes away for `outage` requests, then answers again."""

    def __init__(self, outage: int) -> None:
        super().__init__()
        self.outage = outage
        self.down = False
        self.failed = 0

    def read_namespaced_lease(self, name: str, ns: str, **kw: Any) -> Raw:
        if self.down and self.failed < self.outage:
            self.failed += 1
            raise ConnectionRefusedError("connection refused")
        return super().read_namespaced_lease(name, ns, **kw)


def _keep_in_background(lease: LeaderLease) -> tuple[threading.Event, list[str], threading.Thread]:
    stop, lost = threading.Event(), []
    keeper = threading.Thread(target=lease.keep, args=(stop, lambda: lost.append("lost")))
    keeper.start()
    return stop, lost, keeper


def test_keeper_rides_out_an_unreachable_api_server_and_fences_meanwhile() -> None:
    api = Unreachable(outage=40)
    a = LeaderLease(api, "ns", "lease", "a", duration=0.1, renew_every=0.02)  # type: ignore[arg-type]
    assert a.try_acquire()
    api.down = True
    stop, lost, keeper = _keep_in_background(a)
    try:
        # Renewals fail for longer than the duration: no decisions, but no exit either.
        deadline = time.monotonic() + 5
        while a.held() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert not a.held()
        assert not lost and keeper.is_alive()
        # The server answers again: renewed, acting again, never reported lost.
        deadline = time.monotonic() + 5
        while api.failed < api.outage or not a.held():
            assert time.monotonic() < deadline, "not renewed after the outage"
            time.sleep(0.005)
        assert not lost
        assert api.doc is not None and api.doc["spec"]["holderIdentity"] == "a"
    finally:
        stop.set()
        keeper.join(5)


def test_keeper_reports_the_lease_lost_only_when_another_holds_it() -> None:
    api = Unreachable(outage=1_000_000)
    a = LeaderLease(api, "ns", "lease", "a", duration=0.1, renew_every=0.02)  # type: ignore[arg-type]
    assert a.try_acquire()
    api.down = True
    stop, lost, keeper = _keep_in_background(a)
    try:
        time.sleep(0.3)  # three durations without a renewal
        assert not lost and not a.held()
        # Back, but a standby took the expired Lease meanwhile: that, and only that, is loss.
        assert api.doc is not None
        api.doc["spec"] |= {
            "holderIdentity": "b",
            "renewTime": _fmt_now(),
            "leaseDurationSeconds": 60,
        }
        api.down = False
        keeper.join(5)
        assert lost == ["lost"] and not a.held()
    finally:
        stop.set()
        keeper.join(5)


def _fmt_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
