"""The operator's standby replicas (`gpufleet.operator.serving_standby`) on pods as API JSON.

Aspects under test: the autoscaler sees awake replicas only, and a woken pod as starting for the
pool's wakeSeconds; a scale-up wakes asleep pods before the Deployment grows, and grows it only
for the rest; a scale-down marks running pods asleep (newest first) before it shrinks the
Deployment, up to the standby count; pools whose standbys are switched off wake theirs; a
lowered standby count retires the excess once every pod runs, and not while one is pending.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpufleet.model.contract import standby as marks
from gpufleet.model.contract.names import POD_DELETION_COST, POOL_LABEL
from gpufleet.model.servingjob import ServingJobSpec
from gpufleet.operator.serving_standby import Standbys

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


def pod(name: str, pool: str = "prefill", *, created: int = 0, phase: str = "Running") -> Any:
    return {
        "metadata": {
            "name": name,
            "labels": {POOL_LABEL: pool},
            "annotations": {},
            "creationTimestamp": f"2026-12-03T11:{created:02d}:00Z",
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def mark(p: Any, patch: dict[str, Any]) -> Any:
    annotations = p["metadata"]["annotations"]
    for key, value in patch["metadata"]["annotations"].items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return p


class Cluster:
    """Pods and Deployment scales; records the writes in order."""

    def __init__(self, pods: list[Any], scales: dict[str, int]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.scales = scales
        self.writes: list[tuple[str, str, Any]] = []

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self.writes.append(("pod", name, body))
        mark(self.pods[name], body)

    def scale(self, pool: str, replicas: int) -> None:
        self.writes.append(("scale", pool, replicas))
        self.scales[pool] = replicas

    def listed(self) -> list[Any]:
        return list(self.pods.values())

    def standbys(self, job: ServingJobSpec, now: datetime = NOW) -> Standbys:
        return Standbys(job, self.scales, self.listed(), self.patch, self.scale, now)

    def asleep(self) -> set[str]:
        return {n for n, p in self.pods.items() if marks.is_asleep(p)}


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
    assert cluster.writes[-1] == ("scale", "prefill", 3)  # 1 awake + 2 asleep
    assert [w[0] for w in cluster.writes] == ["pod", "pod", "scale"]  # marks come first


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


@pytest.mark.parametrize(("pending", "retired"), [(False, True), (True, False)])
def test_a_lowered_standby_count_retires_the_excess_once_all_pods_run(
    pending: bool, retired: bool
) -> None:
    pods = [pod("a", phase="Pending" if pending else "Running")]
    pods += [mark(pod(n), marks.sleep_patch()) for n in ("b", "c")]
    cluster = Cluster(pods, {"prefill": 3})
    lowered = spec({"prefill": {"replicas": 1}})
    after = cluster.standbys(lowered).settle()
    assert (after == {"prefill": 2}) is retired
    cost = cluster.pods["c"]["metadata"]["annotations"][POD_DELETION_COST]
    assert (cost == "-1000") is retired
