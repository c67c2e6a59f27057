"""The operator's standby replicas (`gpufleet.operator.serving_standby`) on pods as API JSON.

Aspects under test: the autoscaler sees awake replicas only, and a woken pod as starting for the
pool's wakeSeconds; a scale-up wakes asleep pods before the Deployment grows, and grows it only
for the rest; a scale-down marks running pods asleep (newest first) before it shrinks the
Deployment, up to the standby count, and deletes the awake replicas it removes itself (pending
first, then the newest; replicas not yet created are dropped by the lower scale alone), so the
ReplicaSet never picks a standby, which is not Ready; pools whose standbys are switched off wake
theirs; a lowered standby count removes the excess. The awake condition of gated pods: False
while asleep, waking (before wakeSeconds) or being put to sleep (written before the sleep mark),
True otherwise (also on a pod nobody wrote it on yet), written only where it differs, never on
ungated pods; the ready count is the awake running replicas. A standby the scheduler lent is
recalled instead of woken (left asleep) until the lent mark is gone, unlent standbys wake first,
and a wake is conditional on the resourceVersion read.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpufleet.model.contract import standby as marks
from gpufleet.model.contract.names import (
    LENT_TO,
    POD_DELETION_COST,
    POOL_LABEL,
    RECALL,
    WOKEN_AT,
)
from gpufleet.model.servingjob import ServingJobSpec
from gpufleet.operator.serving_standby import Standbys
from gpufleet.operator.vllm_sleep import SleepApiError

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "x"}]}}


def spec(standby: dict[str, Any] | None, enabled: bool = True) -> ServingJobSpec:
    pool = {"minReplicas": 1, "maxReplicas": 5, "gpusPerReplica": 1, "template": TEMPLATE}
    autoscaling: dict[str, Any] = {
        "enabled": enabled,
        "prometheus": {"url": "http://prom:9090"},
        "capacity": {"prefillTokensPerSecond": 10000, "decodeBatchSize": 32},
    }
    if standby is not None:
        autoscaling["standby"] = standby
    return ServingJobSpec.model_validate(
        {
            "prefill": pool,
            "decode": pool,
            "slo": {"ttftP90Seconds": 1.0, "itlP90Seconds": 0.05},
            "autoscaling": autoscaling,
        }
    )


def pod(
    name: str,
    pool: str = "prefill",
    *,
    created: int = 0,
    phase: str = "Running",
    gated: bool = False,
    node: str | None = "n0",
) -> Any:
    ready = {"type": "Ready", "status": "True" if phase == "Running" else "False"}
    out: Any = {
        "metadata": {
            "name": name,
            "labels": {POOL_LABEL: pool},
            "annotations": {},
            "creationTimestamp": f"2026-12-03T11:{created:02d}:00Z",
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "conditions": [ready]},
    }
    if gated:
        out["spec"]["readinessGates"] = [marks.readiness_gate()]
    return out


def mark(p: Any, patch: dict[str, Any]) -> Any:
    annotations = p["metadata"]["annotations"]
    for key, value in patch["metadata"]["annotations"].items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return p


def set_condition(p: Any, patch: dict[str, Any]) -> Any:
    """Apply a status patch as the API server's strategic merge does (conditions by type)."""
    conditions = p["status"]["conditions"]
    for new in patch["status"]["conditions"]:
        conditions[:] = [c for c in conditions if c["type"] != new["type"]] + [new]
    return p


class Cluster:
    """Pods and Deployment scales (`PodWrites`); records the writes in order."""

    def __init__(self, pods: list[Any], scales: dict[str, int]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.scales = scales
        self.writes: list[tuple[str, str, Any]] = []

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self.writes.append(("pod", name, body))
        mark(self.pods[name], body)

    def patch_status(self, name: str, body: dict[str, Any]) -> None:
        self.writes.append(("status", name, body["status"]["conditions"][0]["status"]))
        set_condition(self.pods[name], body)

    def delete(self, name: str) -> None:
        self.writes.append(("delete", name, None))
        del self.pods[name]

    def scale(self, pool: str, replicas: int) -> None:
        self.writes.append(("scale", pool, replicas))
        self.scales[pool] = replicas

    def listed(self) -> list[Any]:
        return list(self.pods.values())

    def standbys(self, job: ServingJobSpec, now: datetime = NOW, server: Any = None) -> Standbys:
        return Standbys(job, self.scales, self.listed(), self, now, server=server, port=8000)

    def asleep(self) -> set[str]:
        return {n for n, p in self.pods.items() if marks.is_asleep(p)}

    def awake(self, name: str) -> bool | None:
        return marks.awake_status(self.pods[name])


STANDBY_2 = {"prefill": {"replicas": 2, "wakeSeconds": 10}}


def test_the_autoscaler_sees_awake_replicas_and_woken_ones_as_starting() -> None:
    pods = [pod("a"), mark(pod("b"), marks.sleep_patch()), mark(pod("c"), marks.wake_patch(NOW))]
    cluster = Cluster(pods, {"prefill": 3, "decode": 0})
    seen = cluster.standbys(spec(STANDBY_2), NOW + timedelta(seconds=5)).observe()
    assert seen == {"prefill": (2, 1), "decode": (0, 0)}
    later = cluster.standbys(spec(STANDBY_2), NOW + timedelta(seconds=10)).observe()
    assert later == {"prefill": (2, 2), "decode": (0, 0)}


def test_a_scale_down_puts_the_newest_running_pods_to_sleep_before_shrinking() -> None:
    pods = [pod("a", created=1), pod("b", created=2), pod("c", created=3), pod("d", created=4)]
    cluster = Cluster(pods, {"prefill": 4})
    writer = cluster.standbys(spec(STANDBY_2))
    writer.scale("prefill", 1)  # 4 awake -> 1: two go to sleep, one is removed
    assert cluster.asleep() == {"c", "d"}
    assert cluster.pods["d"]["metadata"]["annotations"][POD_DELETION_COST] == "1000"
    # The newest awake one goes, deleted by the operator before the scale drops by one.
    assert set(cluster.pods) == {"a", "c", "d"}
    assert cluster.writes[-1] == ("scale", "prefill", 3)  # 1 awake + 2 asleep
    assert [w[0] for w in cluster.writes] == ["pod", "pod", "delete", "scale"]


def test_a_scale_up_wakes_standbys_before_growing_the_deployment() -> None:
    asleep = [mark(pod(n), marks.sleep_patch()) for n in ("b", "c")]
    cluster = Cluster([pod("a"), *asleep], {"prefill": 3})
    writer = cluster.standbys(spec(STANDBY_2))
    writer.scale("prefill", 2)  # one standby covers it: nothing new
    assert cluster.asleep() == {"c"} and cluster.writes[0][:2] == ("pod", "b")
    assert not [w for w in cluster.writes if w[0] == "scale"]
    woken = cluster.pods["b"]["metadata"]["annotations"]
    assert POD_DELETION_COST not in woken and woken["gpufleet.io/woken-at"]
    writer = cluster.standbys(spec(STANDBY_2))
    writer.scale("prefill", 5)  # the other standby, then two new replicas
    assert cluster.asleep() == set()
    assert cluster.writes[-2][:2] == ("pod", "c") and cluster.writes[-1] == ("scale", "prefill", 5)


def test_pools_without_standbys_wake_theirs() -> None:
    cluster = Cluster([pod("a"), mark(pod("b"), marks.sleep_patch())], {"prefill": 2})
    for off in (spec(None), spec(STANDBY_2, enabled=False), spec({"decode": {"replicas": 1}})):
        cluster.pods["b"] = mark(pod("b"), marks.sleep_patch())
        standbys = cluster.standbys(off)
        assert standbys.settle() == {"prefill": 2}
        assert cluster.asleep() == set()
        assert standbys.observe() == {"prefill": (2, 1)}  # the woken pod counts as awake
    # Woken because autoscaling went off, it still waits out its wakeSeconds (10 s).
    later = cluster.standbys(spec(STANDBY_2, enabled=False), NOW + timedelta(seconds=5))
    assert later.ready() == {"prefill": 1}
    later = cluster.standbys(spec(STANDBY_2, enabled=False), NOW + timedelta(seconds=10))
    assert later.ready() == {"prefill": 2}


def test_a_lowered_standby_count_removes_the_excess() -> None:
    pods = [pod("a", phase="Pending")]
    pods += [mark(pod(n), marks.sleep_patch()) for n in ("b", "c")]
    cluster = Cluster(pods, {"prefill": 3})
    after = cluster.standbys(spec({"prefill": {"replicas": 1}})).settle()
    assert after == {"prefill": 2}
    assert set(cluster.pods) == {"a", "b"} and cluster.asleep() == {"b"}
    assert [w[0] for w in cluster.writes] == ["delete", "scale"]


def test_removal_takes_pending_then_newest_awake_and_never_a_standby() -> None:
    pods = [pod("a", created=1), pod("b", created=3), pod("c", created=2)]
    pods += [pod("p", created=0, phase="Pending", node=None)]
    pods += [mark(pod(n, gated=True), marks.sleep_patch()) for n in ("s1", "s2")]
    for p in pods[-2:]:
        set_condition(p, marks.awake_patch(False, "Asleep", NOW))
        p["status"]["conditions"][0]["status"] = "False"  # the kubelet made them not Ready
    cluster = Cluster(pods, {"prefill": 6})
    cluster.standbys(spec(STANDBY_2)).scale("prefill", 2)  # 4 awake -> 2, standbys full
    assert set(cluster.pods) == {"a", "c", "s1", "s2"}  # the pending one, then the newest
    assert cluster.writes[-1] == ("scale", "prefill", 4)
    # A replica the Deployment has not created yet is dropped by the scale alone.
    cluster = Cluster([pod("a"), pod("b")], {"prefill": 3})
    cluster.standbys(spec(None)).scale("prefill", 2)
    assert set(cluster.pods) == {"a", "b"} and cluster.writes == [("scale", "prefill", 2)]


def test_awake_conditions_follow_sleep_and_wake() -> None:
    fresh = pod("new", gated=True)  # nobody wrote its condition yet (a new replica)
    asleep = mark(pod("zz", gated=True), marks.sleep_patch())
    woken = mark(pod("w", gated=True), marks.wake_patch(NOW))
    set_condition(woken, marks.awake_patch(False, "Asleep", NOW))
    done = set_condition(pod("ok", gated=True), marks.awake_patch(True, "Awake", NOW))
    plain = pod("plain")  # no gate: never written
    cluster = Cluster([fresh, asleep, woken, done, plain], {"prefill": 5})
    standbys = cluster.standbys(spec(STANDBY_2), NOW + timedelta(seconds=5))
    standbys.sync_gates()
    assert cluster.awake("new") is True and cluster.awake("zz") is False
    assert cluster.awake("w") is False  # 5 s into a 10 s wake
    assert cluster.awake("plain") is None
    assert {w[1] for w in cluster.writes} == {"new", "zz"}  # only where it differs
    # "new", "ok" and "plain" serve; the woken one not yet, the asleep one not.
    assert standbys.ready() == {"prefill": 3} and standbys.asleep() == {"prefill": 1}
    later = cluster.standbys(spec(STANDBY_2), NOW + timedelta(seconds=10))
    later.sync_gates()
    assert cluster.awake("w") is True and later.ready() == {"prefill": 4}
    assert cluster.writes[-1] == ("status", "w", "True")


def test_a_pod_leaves_its_service_before_it_sleeps() -> None:
    pods = [pod("a", created=1, gated=True), pod("b", created=2, gated=True)]
    for p in pods:
        set_condition(p, marks.awake_patch(True, "Awake", NOW))
    cluster = Cluster(pods, {"prefill": 2})
    standbys = cluster.standbys(spec(STANDBY_2))
    standbys.scale("prefill", 1)
    standbys.sync_gates()
    assert cluster.writes == [("status", "b", "False"), ("pod", "b", marks.sleep_patch())]
    assert cluster.awake("b") is False and standbys.ready() == {"prefill": 1}
    # Woken, it stays out of the Service until its wake is over.
    waking = cluster.standbys(spec(STANDBY_2), NOW + timedelta(seconds=30))
    waking.scale("prefill", 2)
    waking.sync_gates()
    assert cluster.awake("b") is False and waking.ready() == {"prefill": 1}
    assert waking.observe() == {"prefill": (2, 1)}


class Server:
    """Answers /is_sleeping as vLLM does (or fails); counts the questions."""

    def __init__(self, sleeping: bool | None) -> None:
        self.sleeping, self.asked = sleeping, 0

    def sleep(self, pod: Any, port: int) -> None:
        pass

    def wake(self, pod: Any, port: int) -> None:
        pass

    def is_sleeping(self, pod: Any, port: int) -> bool:
        self.asked += 1
        if self.sleeping is None:
            raise SleepApiError("connection refused")
        return self.sleeping


@pytest.mark.parametrize(("sleeping", "awake"), [(False, True), (True, False), (None, False)])
def test_with_the_vllm_api_a_woken_pod_is_awake_when_the_server_says_so(
    sleeping: bool | None, awake: bool
) -> None:
    woken = mark(pod("w", gated=True), marks.wake_patch(NOW))
    set_condition(woken, marks.awake_patch(False, "Asleep", NOW))
    cluster = Cluster([woken], {"prefill": 1})
    server = Server(sleeping)
    standbys = cluster.standbys(spec(STANDBY_2), NOW + timedelta(seconds=1), server)
    standbys.sync_gates()
    assert standbys.observe() == {"prefill": (1, int(awake))}  # asked once per pass
    assert cluster.awake("w") is awake and server.asked == 1
    # Once the condition is True the server is not asked again.
    again = cluster.standbys(spec(STANDBY_2), NOW + timedelta(seconds=2), server)
    again.sync_gates()
    assert server.asked == (1 if awake else 2)


def lent(p: Any, gang: str = "ns/train") -> Any:
    p["metadata"]["annotations"][LENT_TO] = gang
    return p


def test_a_lent_standby_is_recalled_not_woken_and_unlent_ones_wake_first() -> None:
    # Two standbys, b lent to training; one more replica wanted: c (not lent) wakes at once.
    pods = [
        pod("a"),
        lent(mark(pod("b", created=1), marks.sleep_patch())),
        mark(pod("c", created=2), marks.sleep_patch()),
    ]
    cluster = Cluster(pods, {"prefill": 3})
    cluster.standbys(spec(STANDBY_2)).scale("prefill", 2)
    assert cluster.asleep() == {"b"} and RECALL not in cluster.pods["b"]["metadata"]["annotations"]
    # Both wanted: b is recalled (marked, left asleep and out of its Service), not woken.
    cluster.standbys(spec(STANDBY_2)).scale("prefill", 3)
    b = cluster.pods["b"]["metadata"]["annotations"]
    assert cluster.asleep() == {"b"} and b[RECALL] and WOKEN_AT not in b
    calls = len(cluster.writes)
    cluster.standbys(spec(STANDBY_2)).scale("prefill", 3)  # still lent: nothing new written
    assert len(cluster.writes) == calls
    # The scheduler removed the mark once the borrower was gone: the next pass wakes it, and
    # the wake clears the recall.
    del cluster.pods["b"]["metadata"]["annotations"][LENT_TO]
    cluster.standbys(spec(STANDBY_2)).scale("prefill", 3)
    assert cluster.asleep() == set()
    assert RECALL not in b and b[WOKEN_AT]


def test_a_wake_is_conditional_on_the_version_read() -> None:
    asleep = mark(pod("b"), marks.sleep_patch())
    asleep["metadata"]["resourceVersion"] = "41"
    cluster = Cluster([pod("a"), asleep], {"prefill": 2})
    cluster.standbys(spec(STANDBY_2)).scale("prefill", 2)
    wake = next(body for kind, name, body in cluster.writes if kind == "pod" and name == "b")
    assert wake["metadata"]["resourceVersion"] == "41"
