"""The live autoscaler of one ServingJob against a scripted metrics source (no cluster, no
Prometheus): interval timing, the window it keeps, scale-up under a burst written through the
replica writer, holds on `MetricsUnavailable` and on stale data (no scale-down, never zero), the
safe restart (no scale-down before a stabilization window of its own data), a failed write that
is decided again, the job's autoscaling spec read once per tick and its settings validated once
per spec, and the registry's per-job loops."""

from __future__ import annotations

from typing import Any

import pytest
from autoscaler_fakes import ScriptedSource, load

from gpufleet.autoscaler.inputs import PoolObservation
from gpufleet.autoscaler.prometheus import MetricsUnavailable
from gpufleet.autoscaler.serving_autoscaler import AutoscalerRegistry, ServingAutoscaler
from gpufleet.core.autoscaling_types import MetricsSample, PoolRole, ScalingReason
from gpufleet.model.servingjob import ServingJobSpec

TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "x"}]}}
SELECTOR = 'namespace="ns",servingjob="llm"'


def spec(**autoscaling: Any) -> ServingJobSpec:
    policy: dict[str, Any] = {
        "intervalSeconds": 10,
        "prometheus": {"url": "http://prom:9090", "staleAfterSeconds": 30},
        "capacity": {"prefillTokensPerSecond": 10000, "decodeBatchSize": 32},
        "scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 2},
        "scaleDown": {"stabilizationWindowSeconds": 60, "maxStep": 1},
    }
    policy.update(autoscaling)
    return ServingJobSpec.model_validate(
        {
            "prefill": {
                "minReplicas": 1,
                "maxReplicas": 6,
                "gpusPerReplica": 1,
                "template": TEMPLATE,
            },
            "decode": {
                "minReplicas": 1,
                "maxReplicas": 6,
                "gpusPerReplica": 1,
                "template": TEMPLATE,
            },
            "slo": {"ttftP90Seconds": 2.0, "itlP90Seconds": 0.05},
            "autoscaling": policy,
        }
    )


def unreachable(pool: str, now: float) -> MetricsSample:
    raise MetricsUnavailable("http://127.0.0.1:1", "cannot connect: connection refused")


class Cluster:
    """Replica counts and a ReplicaWriter over them; writes may be made to fail."""

    def __init__(self, **replicas: int) -> None:
        self.replicas = dict(replicas)
        self.writes: list[tuple[str, int]] = []
        self.fail = False

    def scale(self, pool: str, replicas: int) -> None:
        if self.fail:
            raise RuntimeError("API server unavailable")
        self.writes.append((pool, replicas))
        self.replicas[pool] = replicas

    def observed(self) -> dict[str, PoolObservation]:
        return {p: PoolObservation(p, n, n) for p, n in self.replicas.items()}


def run(
    loop: ServingAutoscaler, cluster: Cluster, start: float, end: float, sp: ServingJobSpec
) -> None:
    t = start
    while t <= end:
        if loop.due(t, 10):
            loop.tick(sp, SELECTOR, t, cluster.observed(), cluster)
        t += 1.0


def test_first_tick_at_once_then_every_interval() -> None:
    loop = ServingAutoscaler(ScriptedSource(load(1000, 100)))
    assert loop.due(0.0, 10)
    loop.tick(spec(), SELECTOR, 0.0, Cluster(prefill=1, decode=1).observed(), Cluster())
    assert not loop.due(9.5, 10)
    assert loop.due(10.0, 10)


def test_the_policy_given_is_the_one_used_and_its_settings_are_kept() -> None:
    # The operator reads the job's autoscaling spec once and hands it over; the tick does not
    # read the spec's own again (here the two differ, so it would show).
    source = ScriptedSource(load(1000, 100))
    loop = ServingAutoscaler(source)
    given = spec(prometheus={"url": "http://prom:9090", "staleAfterSeconds": 12}).autoscaling
    assert given is not None
    loop.tick(spec(), SELECTOR, 5.0, Cluster(prefill=1, decode=1).observed(), Cluster(), given)
    assert [call[4] for call in source.calls] == [12.0, 12.0]
    assert loop.settings_for(given) is loop.settings_for(given)
    other = spec().autoscaling
    assert other is not None
    assert loop.settings_for(other).staleness_s == 30.0


def test_samples_every_pool_with_role_selector_and_staleness() -> None:
    source = ScriptedSource(load(1000, 100))
    loop = ServingAutoscaler(source)
    loop.tick(spec(), SELECTOR, 5.0, Cluster(prefill=1, decode=1).observed(), Cluster())
    assert source.calls == [
        (SELECTOR, "prefill", PoolRole.PREFILL, 5.0, 30.0),
        (SELECTOR, "decode", PoolRole.DECODE, 5.0, 30.0),
    ]


def test_window_keeps_only_recent_samples_and_one_per_timestamp() -> None:
    frozen = load(1000, 100)
    loop = ServingAutoscaler(ScriptedSource(lambda pool, now: frozen(pool, min(now, 20.0))))
    cluster = Cluster(prefill=1, decode=1)
    for t in range(0, 160, 10):
        loop.tick(spec(), SELECTOR, float(t), cluster.observed(), cluster)
    # Prometheus answered with the sample of t=20 from then on: one entry, not 14 copies.
    assert [s.timestamp for s in loop.windows["prefill"]] == [0.0, 10.0, 20.0]
    loop2 = ServingAutoscaler(ScriptedSource(load(1000, 100)))
    for t in range(0, 400, 10):
        loop2.tick(spec(), SELECTOR, float(t), cluster.observed(), cluster)
    window_s = loop2.base_settings.window_s
    assert all(s.timestamp > 390 - window_s for s in loop2.windows["decode"])


def test_burst_scales_both_pools_up_within_step_limits() -> None:
    cluster = Cluster(prefill=1, decode=1)
    loop = ServingAutoscaler(ScriptedSource(load(40000, 2000)))
    tick = loop.tick(spec(), SELECTOR, 0.0, cluster.observed(), cluster)
    # Scaling up is not delayed by the restart seed; maxStep 2 per decision.
    assert cluster.writes == [("prefill", 3), ("decode", 3)]
    assert {d.name for d in tick.scaled} == {"prefill", "decode"}
    assert all(d.reason.value.startswith("scale_up") for d in tick.scaled)
    assert tick.metrics_problem is None
    run(loop, cluster, 10.0, 60.0, spec())
    # 40k tok/s over 10k per replica at no more than 85 % utilization.
    assert cluster.replicas["prefill"] == 5
    assert cluster.replicas["decode"] >= 3


def test_unreachable_prometheus_holds_every_pool_and_says_why() -> None:
    cluster = Cluster(prefill=4, decode=3)
    loop = ServingAutoscaler(ScriptedSource(unreachable))
    run(loop, cluster, 0.0, 600.0, spec())
    assert cluster.writes == []  # no scale-down on missing data, whatever the bounds allow
    assert loop.last is not None
    assert {d.reason for d in loop.last.decisions} == {ScalingReason.METRICS_MISSING}
    problem = loop.last.metrics_problem
    assert problem is not None and "cannot connect" in problem and "prefill: " in problem
    assert all("cannot connect" in d.message for d in loop.last.decisions)
    assert not loop.last.metrics_stale


def test_stale_samples_hold_and_are_reported_stale() -> None:
    cluster = Cluster(prefill=3, decode=3)
    loop = ServingAutoscaler(ScriptedSource(lambda pool, now: load(100, 10)(pool, now - 120)))
    run(loop, cluster, 0.0, 300.0, spec())
    assert cluster.writes == []
    assert loop.last is not None and loop.last.metrics_stale
    assert {d.reason for d in loop.last.decisions} == {ScalingReason.METRICS_STALE}


def test_never_to_zero_even_when_idle() -> None:
    cluster = Cluster(prefill=2, decode=2)
    loop = ServingAutoscaler(ScriptedSource(load(0, 0)))
    run(loop, cluster, 0.0, 1200.0, spec())
    assert cluster.replicas == {"prefill": 1, "decode": 1}


def test_restart_does_not_scale_down_before_a_stabilization_window() -> None:
    cluster = Cluster(prefill=5, decode=5)
    loop = ServingAutoscaler(ScriptedSource(load(1000, 50)))  # load for one replica each
    run(loop, cluster, 1000.0, 1050.0, spec())  # less than the 60 s scale-down window
    assert cluster.writes == []
    run(loop, cluster, 1060.0, 1200.0, spec())
    assert cluster.replicas["prefill"] < 5
    assert cluster.writes[0] == ("prefill", 4)  # maxStep 1 per decision going down


def test_recovery_after_an_outage_scales_again() -> None:
    cluster = Cluster(prefill=1, decode=1)
    outage = {"on": True}

    def script(pool: str, now: float) -> MetricsSample:
        if outage["on"]:
            return unreachable(pool, now)
        return load(40000, 2000)(pool, now)

    loop = ServingAutoscaler(ScriptedSource(script))
    run(loop, cluster, 0.0, 50.0, spec())
    assert cluster.writes == []
    outage["on"] = False
    run(loop, cluster, 60.0, 60.0, spec())
    assert cluster.replicas["prefill"] == 3
    assert loop.last is not None and loop.last.metrics_problem is None


def test_failed_write_is_not_remembered_as_done() -> None:
    cluster = Cluster(prefill=1, decode=1)
    loop = ServingAutoscaler(ScriptedSource(load(40000, 2000)))
    cluster.fail = True
    with pytest.raises(RuntimeError):
        loop.tick(spec(), SELECTOR, 0.0, cluster.observed(), cluster)
    assert loop.last_tick is None and loop.due(0.5, 10)
    cluster.fail = False
    loop.tick(spec(), SELECTOR, 1.0, cluster.observed(), cluster)
    assert cluster.replicas == {"prefill": 3, "decode": 3}


def test_tick_refuses_a_disabled_autoscaler() -> None:
    sp = ServingJobSpec.model_validate(
        {"server": {"gpusPerReplica": 1, "template": TEMPLATE}, "autoscaling": {"enabled": False}}
    )
    loop = ServingAutoscaler(ScriptedSource(load(1, 1)))
    with pytest.raises(ValueError, match="disabled"):
        loop.tick(sp, SELECTOR, 0.0, {}, Cluster())


def test_registry_keeps_one_loop_per_job_and_source() -> None:
    sources: list[tuple[str, int, ScriptedSource]] = []

    def factory(url: str, rate_window_s: int) -> ScriptedSource:
        sources.append((url, rate_window_s, ScriptedSource(load(1, 1))))
        return sources[-1][2]

    registry = AutoscalerRegistry(factory)
    first = registry.get("uid-1", "http://a:9090", 60)
    assert registry.get("uid-1", "http://a:9090", 60) is first
    assert registry.get("uid-2", "http://a:9090", 60) is not first
    moved = registry.get("uid-1", "http://b:9090", 60)
    assert moved is not first and sources[0][2].closed  # a new source starts a new window
    narrowed = registry.get("uid-1", "http://b:9090", 10)
    assert narrowed is not moved and sources[3][:2] == ("http://b:9090", 10)
    registry.drop("uid-1")
    assert registry.peek("uid-1") is None and sources[3][2].closed
    registry.close()
    assert sources[1][2].closed
