"""The live simulator's standby replicas: pods the operator marks asleep.

Aspects under test: a pod marked asleep is not a serving replica and makes the model put one to
sleep (after draining); a pod whose mark is removed wakes that replica, which serves only after
the model's wake time, while a new pod counts at once (the cluster gave it its cold start);
asleep pods are counted per pool, pods being deleted are not.
"""

from __future__ import annotations

from typing import Any

from gpufleet.core.autoscaling_types import PoolRole
from gpufleet.model.contract import standby
from gpufleet.model.contract.names import ASSIGNED_TYPE, POOL_LABEL, SERVINGJOB_LABEL
from gpufleet.sim.serving.exporter import RealtimeDriver
from gpufleet.sim.serving.live import LiveServingSim, asleep_pods_by_pool
from gpufleet.sim.serving.model import PoolConfig, ServingConfig
from gpufleet.sim.serving.profiles import replica_profile

H100 = replica_profile("H100-SXM-80GB")
WAKE_S = 4.0


def pod(pool: str, asleep: bool = False, deleting: bool = False) -> dict[str, Any]:
    annotations = {ASSIGNED_TYPE: "H100-80GB"}
    if asleep:
        annotations |= standby.sleep_patch()["metadata"]["annotations"]
    meta: dict[str, Any] = {
        "labels": {SERVINGJOB_LABEL: "job", POOL_LABEL: pool},
        "annotations": annotations,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    ready = {"type": "Ready", "status": "True"}
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [ready]}}


def test_asleep_pods_are_counted_per_pool() -> None:
    pods = [pod("prefill", asleep=True), pod("prefill"), pod("decode", asleep=True, deleting=True)]
    assert asleep_pods_by_pool(pods, ["prefill", "decode"]) == {"prefill": 1, "decode": 0}


def test_marked_pods_sleep_and_wake_after_the_wake_time() -> None:
    pods = [pod("prefill"), pod("prefill"), pod("decode")]
    config = ServingConfig(
        prefill=PoolConfig("prefill", PoolRole.PREFILL, H100, 0),
        decode=PoolConfig("decode", PoolRole.DECODE, H100, 0),
        wake_s=WAKE_S,
    )
    sim = LiveServingSim(lambda _selector: pods, "ns", "job", config, (), poll_s=60.0)
    now = [0.0]
    # Drive the model by hand on a fake clock (the sim's own driver is not started).
    driver = RealtimeDriver(
        sim.model,
        sim.exporter.lock,
        replica_profiles=sim.observed_profiles,
        asleep=sim.observed_asleep,
        clock=lambda: now[0],
    )
    driver.anchor()

    def step(t: float) -> dict[str, int]:
        now[0] = t
        sim.sync()
        driver.step()
        return sim.model_ready()

    assert step(0.0) == {"prefill": 2, "decode": 1}
    pods[1] = pod("prefill", asleep=True)  # the operator puts one prefill replica to sleep
    assert step(1.0) == {"prefill": 1, "decode": 1}
    assert sim.model.asleep("prefill") == 1
    pods[1] = pod("prefill")  # ... and wakes it
    pods.append(pod("prefill"))  # and a new replica comes up beside it
    assert step(2.0)["prefill"] == 2  # the new one serves at once, the woken one does not yet
    assert sim.model.asleep("prefill") == 0
    assert step(2.0 + WAKE_S)["prefill"] == 3


def test_pods_asleep_before_the_sim_started_are_standbys_not_serving_replicas() -> None:
    pods = [pod("prefill"), pod("prefill", asleep=True), pod("decode")]
    config = ServingConfig(
        prefill=PoolConfig("prefill", PoolRole.PREFILL, H100, 0),
        decode=PoolConfig("decode", PoolRole.DECODE, H100, 0),
        wake_s=WAKE_S,
    )
    sim = LiveServingSim(lambda _selector: pods, "ns", "job", config, (), poll_s=60.0)
    driver = RealtimeDriver(
        sim.model,
        sim.exporter.lock,
        replica_profiles=sim.observed_profiles,
        asleep=sim.observed_asleep,
        clock=lambda: 0.0,
    )
    driver.anchor()
    for _ in range(3):  # steady: the awake replica is never put to sleep
        sim.sync()
        driver.step()
        assert sim.model_ready()["prefill"] == 1
        assert sim.model.asleep("prefill") == 1
