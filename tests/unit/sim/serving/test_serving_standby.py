"""Unit tests of standby replicas in the serving model (vLLM sleep mode level 1).

Aspects under test: replicas that start asleep serve nothing and are not billed; a scale-up wakes
asleep replicas first (ready after the wake time, not the cold start) and cold-starts only the rest;
`wake` follows the order it is given (then replica ids); sleeping drains in-flight work first and
keeps the replica for the next wake; a start cancelled by a sleep and restarted by a wake is ready
at the wake time, not the stale one; bad counts are refused.
"""

from __future__ import annotations

import pytest

from gpufleet.core.autoscaling_types import PoolRole
from gpufleet.sim.serving import (
    PoolConfig,
    ServingConfig,
    ServingModel,
    poisson_requests,
    replica_profile,
)
from gpufleet.sim.serving.model import ReplicaPhase

PROFILE = replica_profile("H100-SXM-80GB")


def config(
    prefill: int = 1, standby: int = 0, cold: float = 60.0, wake: float = 5.0
) -> ServingConfig:
    return ServingConfig(
        prefill=PoolConfig("prefill", PoolRole.PREFILL, PROFILE, prefill, standby),
        decode=PoolConfig("decode", PoolRole.DECODE, PROFILE, 1),
        cold_start_s=cold,
        wake_s=wake,
    )


def test_standby_replicas_start_asleep_and_are_not_billed() -> None:
    model = ServingModel(config(prefill=1, standby=2), ())
    model.advance_to(100.0)
    assert model.asleep("prefill") == 2
    assert model.replicas("prefill") == 1
    assert model.ready_replicas("prefill") == 1
    assert model.gpu_seconds("prefill") == pytest.approx(100.0)


def test_wake_follows_the_given_order_then_replica_ids() -> None:
    model = ServingModel(config(prefill=1, standby=3), ())
    asleep = [rid for rid, ph in model.replica_phases("prefill") if ph is ReplicaPhase.ASLEEP]
    assert model.wake("prefill", 2, order=(asleep[2],)) == 2
    woken = {rid for rid, ph in model.replica_phases("prefill") if ph is ReplicaPhase.STARTING}
    assert woken == {asleep[2], asleep[0]}
    assert model.wake("prefill", 5) == 1  # only one left asleep
    assert model.asleep("prefill") == 0


def test_scale_up_wakes_standbys_before_cold_starting_new_replicas() -> None:
    model = ServingModel(config(prefill=1, standby=2, cold=60.0, wake=5.0), ())
    model.advance_to(10.0)
    model.set_replicas("prefill", 4)  # 2 woken + 1 new
    assert model.asleep("prefill") == 0
    assert model.replicas("prefill") == 4
    model.advance_to(14.9)
    assert model.ready_replicas("prefill") == 1
    model.advance_to(15.0)
    assert model.ready_replicas("prefill") == 3  # the woken two, after the wake time
    model.advance_to(69.9)
    assert model.ready_replicas("prefill") == 3
    model.advance_to(70.0)
    assert model.ready_replicas("prefill") == 4  # the new one, after the cold start
    phases = dict(model.replica_phases("prefill"))
    assert len(phases) == 4 and set(phases.values()) == {ReplicaPhase.READY}


def test_sleep_drains_in_flight_work_then_keeps_the_replica_asleep() -> None:
    requests = poisson_requests(30.0, 60.0, prompt_tokens=2000, output_tokens=20, seed=4)
    model = ServingModel(config(prefill=3), requests)
    model.advance_to(30.0)
    assert model.sleep("prefill", 2) == 2
    assert model.replicas("prefill") == 1
    model.advance_to(10_000.0)
    assert model.done() and len(model.outcomes()) == len(requests)
    assert model.asleep("prefill") == 2
    billed = model.gpu_seconds("prefill")
    model.advance_to(20_000.0)
    # Only the one awake replica keeps being billed while two sleep.
    assert model.gpu_seconds("prefill") - billed == pytest.approx(10_000.0)
    assert model.wake("prefill", 5) == 2
    model.advance_to(20_005.0)
    assert model.ready_replicas("prefill") == 3


def test_a_wake_after_a_cancelled_start_uses_the_wake_time() -> None:
    model = ServingModel(config(prefill=1, cold=60.0, wake=5.0), ())
    model.set_replicas("prefill", 2)  # cold start: ready at 60
    model.advance_to(50.0)
    model.sleep("prefill", 1)  # the starting one is cancelled into asleep
    assert model.asleep("prefill") == 1
    model.advance_to(58.0)
    model.wake("prefill", 1)  # ready at 63, not at the stale 60
    model.advance_to(61.0)
    assert model.ready_replicas("prefill") == 1
    model.advance_to(63.0)
    assert model.ready_replicas("prefill") == 2


def test_negative_counts_and_times_are_refused() -> None:
    with pytest.raises(ValueError, match="replica counts"):
        config(standby=-1)
    with pytest.raises(ValueError, match="wake_s"):
        config(wake=-1.0)
