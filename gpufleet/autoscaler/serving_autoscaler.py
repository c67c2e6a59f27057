"""The live autoscaler of one ServingJob: metrics window + policy state in memory, one tick per
interval.

A tick (`ServingAutoscaler.tick`):
1. samples every pool from the `MetricsSource` (Prometheus in production, scripted in tests) and
   appends the sample to that pool's window, dropping samples older than the policy's window;
2. maps the spec and the window to a `ScalingInput` (`gpufleet.autoscaler.inputs`) and calls
   the pure policy `decide`, carrying `AutoscalerState` from the previous tick (as
   `gpufleet.sim.serving.replay.PolicyController` does);
3. writes the new replica count of every pool whose desired count changed through the
   `ReplicaWriter` (the Deployment's scale), and returns a `Tick` the operator turns into status
   and Events.

A pool whose sample fails (`MetricsUnavailable`: Prometheus unreachable, series missing or
stale) is decided on an empty window, so the policy holds it: no scale-down, never zero. Its
decision message carries the error. Nothing here survives a restart on purpose: a new
`ServingAutoscaler` starts with empty windows and a state seeded with the current replica counts
as its only recommendations, so it cannot scale down before a scale-down stabilization window
of fresh data has been seen (scaling up is not delayed).

`AutoscalerRegistry` keeps one `ServingAutoscaler` per ServingJob (by uid) and its metrics
source, replacing both when the Prometheus URL changes.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gpufleet.autoscaler import metrics
from gpufleet.autoscaler.inputs import (
    PoolObservation,
    enabled_policy,
    policy_settings,
    pool_role,
    scaling_input,
)
from gpufleet.autoscaler.prometheus import MetricsUnavailable
from gpufleet.core.autoscaling import decide
from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.core.autoscaling_types import (
    AutoscalerState,
    MetricsSample,
    PoolDecision,
    PoolRole,
    PoolState,
    ScalingReason,
)
from gpufleet.model.servingjob import AutoscalingPolicy, ServingJobSpec

__all__ = [
    "METRICS_HOLD_REASONS",
    "AutoscalerRegistry",
    "MetricsSource",
    "ReplicaWriter",
    "ServingAutoscaler",
    "Tick",
]

log = logging.getLogger("gpufleet.autoscaler")

# How far outside the scale-up window a restarted autoscaler dates its seed recommendation.
_SEED_MARGIN_S = 0.001
# Policy reasons that mean "no trustworthy data": the pool held and metrics are not available.
METRICS_HOLD_REASONS = frozenset({ScalingReason.METRICS_MISSING, ScalingReason.METRICS_STALE})


class MetricsSource(Protocol):
    """One pool's metrics at `now`; raises (MetricsUnavailable) when it cannot tell."""

    def sample(
        self, selector: str, pool: str, role: PoolRole, now: float, stale_after_s: float
    ) -> MetricsSample: ...

    def close(self) -> None: ...


class ReplicaWriter(Protocol):
    """Sets a pool's replica count (in the cluster: the Deployment's scale subresource)."""

    def scale(self, pool: str, replicas: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Tick:
    """What one tick decided: a decision per pool and the pools whose sample failed."""

    now: float
    decisions: tuple[PoolDecision, ...]
    errors: tuple[tuple[str, str], ...] = ()  # (pool, error message), in pool order

    @property
    def scaled(self) -> tuple[PoolDecision, ...]:
        """Decisions that changed a pool's replicas (and were written)."""
        return tuple(d for d in self.decisions if d.changed)

    @property
    def metrics_problem(self) -> str | None:
        """Why metrics are not usable, pool by pool; None when every pool had fresh data."""
        failed = {pool for pool, _ in self.errors}
        parts = [f"{pool}: {message}" for pool, message in self.errors]
        parts += [
            d.message
            for d in self.decisions
            if d.reason in METRICS_HOLD_REASONS and d.name not in failed
        ]
        return "; ".join(parts) or None

    @property
    def metrics_stale(self) -> bool:
        """The problem is old data rather than absent data."""
        stale = [d for d in self.decisions if d.reason is ScalingReason.METRICS_STALE]
        return bool(stale) or any("stale" in message.lower() for _, message in self.errors)


class ServingAutoscaler:
    """Window and policy state of one ServingJob, kept in memory between ticks."""

    def __init__(
        self,
        source: MetricsSource,
        *,
        base_settings: AutoscalerSettings | None = None,
        label: str = "",
    ) -> None:
        self.source = source
        self.base_settings = base_settings or AutoscalerSettings()
        self.label = label  # "<namespace>/<name>" for logs
        self.windows: dict[str, deque[MetricsSample]] = {}
        self.state: AutoscalerState | None = None  # None until the first tick seeds it
        self.last_tick: float | None = None
        self.last: Tick | None = None
        self._errors: dict[str, str] = {}  # pool -> last sampling error, for logging once
        # The policy's settings for the job's autoscaling spec, until the spec changes.
        self._settings: tuple[AutoscalingPolicy, AutoscalerSettings] | None = None

    def due(self, now: float, interval_s: float) -> bool:
        """Whether a tick is due: the first one at once, then every `interval_s`."""
        return self.last_tick is None or now - self.last_tick >= interval_s

    def _seed(
        self, now: float, observed: Mapping[str, PoolObservation], settings: AutoscalerSettings
    ) -> AutoscalerState:
        """A fresh state whose only recommendation per pool is its current count, dated just
        outside the scale-up stabilization window: scaling up may start at once, scaling down
        waits (nearly) a full scale-down window of this process's own data."""
        seeded = now - settings.scale_up_stabilization_s - _SEED_MARGIN_S
        return AutoscalerState(
            pools=tuple(
                PoolState(name=name, recommendations=((seeded, seen.current_replicas),))
                for name, seen in sorted(observed.items())
            )
        )

    def _sample(self, selector: str, now: float, stale_after_s: float, pool: str) -> str | None:
        """Append one sample to the pool's window; the error message if there is none."""
        try:
            sample = self.source.sample(selector, pool, pool_role(pool), now, stale_after_s)
        except MetricsUnavailable as exc:
            # Once per outage, not once per tick: the status condition carries it meanwhile.
            level = logging.DEBUG if self._errors.get(pool) == str(exc) else logging.WARNING
            log.log(level, "[%s] %s: %s", self.label, pool, exc)
            self._errors[pool] = str(exc)
            return str(exc)
        except Exception as exc:  # an adapter bug must not stop scaling the other pools
            log.exception("[%s] %s: sampling failed", self.label, pool)
            return f"sampling failed: {type(exc).__name__}: {exc}"
        if self._errors.pop(pool, None) is not None:
            log.info("[%s] %s: metrics available again", self.label, pool)
        window = self.windows.setdefault(pool, deque())
        # Prometheus may answer the same evaluation twice (a tick faster than a scrape).
        while window and window[-1].timestamp >= sample.timestamp:
            window.pop()
        window.append(sample)
        return None

    def settings_for(self, policy: AutoscalingPolicy) -> AutoscalerSettings:
        """The operator-wide settings with the job's own (validated once per spec change)."""
        if self._settings is None or self._settings[0] != policy:
            self._settings = (policy, policy_settings(policy, self.base_settings))
        return self._settings[1]

    def tick(
        self,
        spec: ServingJobSpec,
        selector: str,
        now: float,
        observed: Mapping[str, PoolObservation],
        writer: ReplicaWriter,
        policy: AutoscalingPolicy | None = None,
    ) -> Tick:
        """Sample, decide and scale once. `observed` holds the pools whose Deployment exists;
        `policy` is `enabled_policy(spec)`, when the caller has it already."""
        policy = policy or enabled_policy(spec)
        if policy is None:
            raise ValueError("tick() on a ServingJob whose autoscaling is disabled")
        settings = self.settings_for(policy)
        stale_after = settings.staleness_s
        if self.state is None:
            self.state = self._seed(now, observed, settings)

        # 1. Sample every pool; keep each window within the policy's window.
        errors: dict[str, str] = {}
        for pool in observed:
            error = self._sample(selector, now, stale_after, pool)
            if error is not None:
                errors[pool] = error
        for window in self.windows.values():
            while window and window[0].timestamp <= now - settings.window_s:
                window.popleft()

        # 2. Decide. A pool without a sample this tick is shown an empty window: it holds.
        windows = {
            pool: () if pool in errors else tuple(self.windows.get(pool, ())) for pool in observed
        }
        inputs = scaling_input(spec, now, observed, windows, policy)
        decision, state = decide(inputs, self.state, settings)
        decisions = tuple(
            dataclasses.replace(
                d,
                message=f"{d.name}: hold at {d.desired_replicas} replicas "
                f"({d.reason.value}): {errors[d.name]}",
            )
            if d.name in errors
            else d
            for d in decision.pools
        )

        # 3. Apply. The state moves on only when every write went through, so a failed write
        # is decided again next tick instead of being remembered as done.
        for d in decisions:
            if d.changed:
                writer.scale(d.name, d.desired_replicas)
                log.info("[%s] %s", self.label, d.message)
        self.state = state
        self.last_tick = now
        metrics.record(
            self.label,
            {d.name: d.desired_replicas for d in decisions},
            {pool: seen.ready_replicas or 0 for pool, seen in observed.items()},
            {d.name: d.reason.value for d in decisions},
            {
                pool: max(0.0, now - window[-1].timestamp)
                for pool, window in self.windows.items()
                if window and pool not in errors
            },
        )
        self.last = Tick(
            now=now,
            decisions=decisions,
            errors=tuple((p, errors[p]) for p in observed if p in errors),
        )
        return self.last

    def close(self) -> None:
        self.source.close()
        metrics.forget(self.label, self.windows)


class AutoscalerRegistry:
    """One `ServingAutoscaler` per ServingJob uid, created on first use. Thread-safe.

    `source_factory(url, rate_window_s)` opens a metrics source; the rate window is the
    ServingJob's `rateWindowSeconds` (by default its `staleAfterSeconds`), so a
    time-compressed test can shorten it from the spec.
    """

    def __init__(
        self,
        source_factory: Callable[[str, int], MetricsSource],
        base_settings: AutoscalerSettings | None = None,
    ) -> None:
        self._factory = source_factory
        self._base = base_settings
        self._lock = threading.Lock()
        self._loops: dict[str, tuple[tuple[str, int], ServingAutoscaler]] = {}

    def get(
        self, uid: str, url: str, rate_window_s: int = 60, label: str = ""
    ) -> ServingAutoscaler:
        """The autoscaler of job `uid` reading `url`; a new one (empty window) if the source
        changed, since the old window described another source."""
        key = (url, rate_window_s)
        with self._lock:
            known = self._loops.get(uid)
            if known is not None and known[0] == key:
                return known[1]
            source = self._factory(url, rate_window_s)
            fresh = ServingAutoscaler(source, base_settings=self._base, label=label)
            self._loops[uid] = (key, fresh)
        if known is not None:
            known[1].close()
        return fresh

    def peek(self, uid: str, source: tuple[str, int] | None = None) -> ServingAutoscaler | None:
        """The autoscaler of job `uid`, if one exists (and reads `source`, (url, rate window),
        when given): never creates one."""
        with self._lock:
            known = self._loops.get(uid)
        if known is None or (source is not None and known[0] != source):
            return None
        return known[1]

    def drop(self, uid: str) -> None:
        """Forget job `uid` (deleted, or autoscaling switched off)."""
        with self._lock:
            known = self._loops.pop(uid, None)
        if known is not None:
            known[1].close()

    def close(self) -> None:
        with self._lock:
            loops = list(self._loops.values())
            self._loops.clear()
        for _, loop in loops:
            loop.close()
