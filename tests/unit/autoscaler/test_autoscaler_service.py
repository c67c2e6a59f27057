"""The autoscaler as the ServingJob operator runs it (`JobAutoscalers`, behind the operator's
`ServingAutoscaler` port): nothing and no memory while autoscaling is off, no tick before one
is due, a burst scaled up through the operator's writer and reported as contract
`ScaleChange`s, GPU types listed only when the capacity names a type, and the metrics' health
(fresh, or unavailable with the error) after a tick."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler_fakes import ScriptedSource, load

from gpufleet.autoscaler.prometheus import MetricsUnavailable
from gpufleet.autoscaler.service import JobAutoscalers
from gpufleet.core.autoscaling_types import MetricsSample
from gpufleet.model.contract.serving import MetricsHealth, ScaleChange
from gpufleet.model.servingjob import ServingJobSpec


def spec(enabled: bool = True, gpu_type: str | None = None) -> ServingJobSpec:
    pool = {
        "minReplicas": 1,
        "maxReplicas": 6,
        "gpusPerReplica": 1,
        "gpuTypes": [{"name": "H100-80GB"}],
        "template": {"spec": {"containers": [{"name": "vllm", "image": "x"}]}},
    }
    capacity: dict[str, Any] = {"prefillTokensPerSecond": 10000, "decodeBatchSize": 32}
    if gpu_type is not None:
        capacity["gpuType"] = gpu_type
    policy = {
        "enabled": enabled,
        "intervalSeconds": 10,
        "prometheus": {"url": "http://prom:9090"},
        "capacity": capacity,
        "scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 2},
    }
    return ServingJobSpec.model_validate(
        {
            "prefill": pool,
            "decode": pool,
            "slo": {"ttftP90Seconds": 2.0, "itlP90Seconds": 0.05},
            "autoscaling": policy,
        }
    )


@dataclass(frozen=True)
class Job:
    name: str = "llm"
    namespace: str = "ns"
    uid: str = "u-1"


class Writer:
    def __init__(self) -> None:
        self.scaled: list[tuple[str, int]] = []

    def scale(self, pool: str, replicas: int) -> None:
        self.scaled.append((pool, replicas))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def autoscalers(source: ScriptedSource, clock: Clock) -> JobAutoscalers:
    return JobAutoscalers(source_factory=lambda url, window: source, clock=clock)


POOLS = {"prefill": (1, 1), "decode": (1, 1)}


def no_types() -> Mapping[str, tuple[str | None, ...]]:
    raise AssertionError("GPU types listed though the capacity names no type")


def test_off_means_no_tick_and_no_memory() -> None:
    source, clock = ScriptedSource(load(100, 10)), Clock()
    scalers = autoscalers(source, clock)
    off = spec(enabled=False)
    assert scalers.tick(Job(), off, POOLS, no_types, Writer()) == ([], None)
    assert source.calls == [] and scalers.registry.peek("u-1") is None


def test_a_burst_is_scaled_up_through_the_writer_and_reported() -> None:
    source, clock, writer = ScriptedSource(load(60_000, 4_000)), Clock(), Writer()
    scalers = autoscalers(source, clock)
    changes, health = scalers.tick(Job(), spec(), POOLS, no_types, writer)
    assert health == MetricsHealth(available=True, stale=False, message="metrics are fresh")
    assert writer.scaled and all(n > 1 for _, n in writer.scaled)
    assert [(c.pool, c.from_replicas, c.to_replicas) for c in changes] == [
        (pool, 1, n) for pool, n in writer.scaled
    ]
    assert all(isinstance(c, ScaleChange) and c.message for c in changes)
    calls = len(source.calls)
    clock.now += 5  # the interval is 10 s: not due yet
    assert scalers.tick(Job(), spec(), POOLS, no_types, writer)[0] == []
    assert len(source.calls) == calls


def test_gpu_types_are_listed_when_the_capacity_names_a_type() -> None:
    source, clock = ScriptedSource(load(100, 10)), Clock()
    listed: list[int] = []

    def types() -> Mapping[str, tuple[str | None, ...]]:
        listed.append(1)
        return {"prefill": ("H100-80GB",)}

    autoscalers(source, clock).tick(Job(), spec(gpu_type="H100-80GB"), POOLS, types, Writer())
    assert listed == [1]


def test_unavailable_metrics_are_reported_with_the_error() -> None:
    def down(pool: str, now: float) -> MetricsSample:
        raise MetricsUnavailable("http://prom:9090", "connection refused")

    source, clock, writer = ScriptedSource(down), Clock(), Writer()
    changes, health = autoscalers(source, clock).tick(Job(), spec(), POOLS, no_types, writer)
    assert changes == [] and writer.scaled == []
    assert health is not None and health.available is False
    assert "connection refused" in health.message


def test_peek_says_when_a_tick_would_act_and_reads_no_metrics() -> None:
    source, clock = ScriptedSource(load(100, 10)), Clock()
    scalers = autoscalers(source, clock)
    assert scalers.peek(Job(), spec()) == (True, None)  # no autoscaler yet: the tick starts one
    scalers.tick(Job(), spec(), POOLS, no_types, Writer())
    calls = len(source.calls)
    clock.now += 5
    due, health = scalers.peek(Job(), spec())
    assert not due and health == MetricsHealth(available=True, message="metrics are fresh")
    clock.now += 5
    assert scalers.peek(Job(), spec())[0]  # the interval (10 s) has passed
    assert len(source.calls) == calls
    moved = spec().model_copy(deep=True)
    assert moved.autoscaling is not None and moved.autoscaling.prometheus is not None
    moved.autoscaling.prometheus.url = "http://elsewhere:9090"
    clock.now -= 5
    assert scalers.peek(Job(), moved)[0]  # another source: a new autoscaler
    assert scalers.peek(Job(), spec(enabled=False)) == (True, None)  # one to drop
    scalers.forget("u-1")
    assert scalers.peek(Job(), spec(enabled=False)) == (False, None)
