"""The autoscaler as the ServingJob operator runs it: one `ServingAutoscaler` per job, ticked
from the operator's pass when its interval has passed.

`JobAutoscalers` is what the composition root hands the operator (it satisfies the operator's
`ServingAutoscaler` protocol without importing it): given a job's spec and its pools' replica
counts, it samples Prometheus, decides, writes the new scale through the operator's writer and
reports the changes and the metrics' health in the contract's terms
(`gpufleet.model.contract.serving`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from gpufleet.autoscaler.inputs import PoolObservation, enabled_policy
from gpufleet.autoscaler.prometheus import PrometheusMetrics, default_selector
from gpufleet.autoscaler.serving_autoscaler import (
    AutoscalerRegistry,
    MetricsSource,
    ReplicaWriter,
    ServingAutoscaler,
)
from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.model.contract.serving import MetricsHealth, ScaleChange, ServingJobRef
from gpufleet.model.servingjob import ServingJobSpec

__all__ = ["JobAutoscalers", "prometheus_source"]


def prometheus_source(url: str, rate_window_s: int) -> MetricsSource:
    return PrometheusMetrics(url, rate_window_s=rate_window_s)


class JobAutoscalers:
    """The autoscalers of every ServingJob of the process, by uid."""

    def __init__(
        self,
        base_settings: AutoscalerSettings | None = None,
        source_factory: Callable[[str, int], MetricsSource] = prometheus_source,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = AutoscalerRegistry(source_factory, base_settings)
        self.clock = clock

    def tick(
        self,
        job: ServingJobRef,
        spec: ServingJobSpec,
        pools: Mapping[str, tuple[int, int]],
        gpu_types: Callable[[], Mapping[str, tuple[str | None, ...]]],
        writer: ReplicaWriter,
    ) -> tuple[list[ScaleChange], MetricsHealth | None]:
        """One tick of `job`'s autoscaler when due (see the operator's `ServingAutoscaler`)."""
        policy = enabled_policy(spec)
        if policy is None or policy.prometheus is None:
            self.registry.drop(job.uid)
            return [], None
        source = policy.prometheus
        label = f"{job.namespace}/{job.name}"
        scaler = self.registry.get(job.uid, source.url, source.rate_window, label)
        now = self.clock()
        changes: list[ScaleChange] = []
        if scaler.due(now, policy.interval_seconds) and pools:
            types: Mapping[str, tuple[str | None, ...]] = {}
            if policy.capacity is not None and policy.capacity.gpu_type is not None:
                types = gpu_types()  # empty: the factor falls back to the pool's slowest type
            observed = {
                pool: PoolObservation(pool, replicas, ready, types.get(pool, ()))
                for pool, (replicas, ready) in pools.items()
            }
            selector = source.selector or default_selector(job.namespace, job.name)
            tick = scaler.tick(spec, selector, now, observed, writer, policy)
            changes = [
                ScaleChange(d.name, d.current_replicas, d.desired_replicas, d.message)
                for d in tick.scaled
            ]
        return changes, _health(scaler)

    def peek(self, job: ServingJobRef, spec: ServingJobSpec) -> tuple[bool, MetricsHealth | None]:
        """Whether `tick` would do more than report (sample and decide, start or drop the job's
        autoscaler), and the health it would report; no metrics are read."""
        policy = enabled_policy(spec)
        if policy is None or policy.prometheus is None:
            return self.registry.peek(job.uid) is not None, None
        source = policy.prometheus
        scaler = self.registry.peek(job.uid, (source.url, source.rate_window))
        if scaler is None:
            return True, None
        return scaler.due(self.clock(), policy.interval_seconds), _health(scaler)

    def forget(self, uid: str) -> None:
        self.registry.drop(uid)

    def close(self) -> None:
        self.registry.close()


def _health(scaler: ServingAutoscaler) -> MetricsHealth:
    """The health of the metrics behind `scaler`'s last tick (unknown before the first)."""
    last = scaler.last
    if last is None:
        return MetricsHealth(available=None)
    problem = last.metrics_problem
    return MetricsHealth(
        available=problem is None,
        stale=last.metrics_stale,
        message=problem or "metrics are fresh",
    )
