"""Value types of the pure P/D autoscaling policy: inputs, outputs and carried state.

Everything here is an immutable value. The policy (`gpufleet.core.autoscaling.decide`) takes a
`ScalingInput` plus the `AutoscalerState` returned by its previous call and gives back a
`ScalingDecision` and the next `AutoscalerState`. Nothing is read from a clock or kept in a
module global, so the live autoscaler loop, the simulator and the tests replay identically.

Units: seconds, tokens, tokens per second, requests per second; timestamps are seconds on any
monotonic axis shared by the samples and `ScalingInput.now` (Unix time in the live loop,
simulated time in the simulator).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from gpufleet.core.autoscaling_forecast import SeasonalState

__all__ = [
    "AutoscalerState",
    "CapacityProfile",
    "LatencyQuantiles",
    "MetricsSample",
    "PoolDecision",
    "PoolInput",
    "PoolRole",
    "PoolState",
    "ScaleEvent",
    "ScalingDecision",
    "ScalingInput",
    "ScalingReason",
    "Sizing",
    "Slo",
]


class PoolRole(enum.StrEnum):
    """What a pool's replicas do. `unified` is a non-disaggregated server doing both phases."""

    PREFILL = "prefill"
    DECODE = "decode"
    UNIFIED = "unified"

    @classmethod
    def of_pool(cls, pool: str) -> PoolRole:
        """The role of a ServingJob's pool by its name: `server` is a non-disaggregated pool."""
        return _POOL_ROLES[pool]


_POOL_ROLES: Final = {
    "prefill": PoolRole.PREFILL,
    "decode": PoolRole.DECODE,
    "server": PoolRole.UNIFIED,
}


class ScalingReason(enum.StrEnum):
    """Stable, machine-readable reason for a pool's desired replica count.

    Hold reasons: `metrics_missing`, `metrics_stale` (no trustworthy data: never scale down),
    `steady` (the recommendation equals the current count) and `scale_down_stabilizing` (a lower
    count is recommended but the stabilization window or step limit keeps replicas). Scale-up
    reasons name the signal that drove the recommendation; `scale_down` is capacity-based;
    `bounded_min` / `bounded_max` mean the pool's replica bounds overrode the recommendation.
    """

    METRICS_MISSING = "metrics_missing"
    METRICS_STALE = "metrics_stale"
    STEADY = "steady"
    SCALE_DOWN_STABILIZING = "scale_down_stabilizing"
    SCALE_UP_CAPACITY = "scale_up_capacity"
    SCALE_UP_FORECAST = "scale_up_forecast"
    SCALE_UP_LATENCY = "scale_up_latency"
    SCALE_UP_QUEUE = "scale_up_queue"
    SCALE_UP_KV_CACHE = "scale_up_kv_cache"
    SCALE_DOWN = "scale_down"
    BOUNDED_MIN = "bounded_min"
    BOUNDED_MAX = "bounded_max"


@dataclass(frozen=True, slots=True)
class LatencyQuantiles:
    """Latency quantiles in seconds over one sample interval (from a Prometheus histogram)."""

    p50: float
    p90: float
    p99: float

    def at(self, q: float) -> float:
        """The quantile `q` (0.5, 0.9 or 0.99)."""
        if q == 0.5:
            return self.p50
        if q == 0.9:
            return self.p90
        if q == 0.99:
            return self.p99
        raise ValueError(f"no quantile {q}; have 0.5, 0.9, 0.99")


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """Pool-level metrics at one instant, summed (gauges, rates) over the pool's replicas.

    `None` means the metric was absent from the source (a missing series), which is not the same
    as zero. Rates are per second over the source's rate window (e.g. `rate(x[1m])`).
    """

    timestamp: float
    request_rate: float | None = None
    prompt_token_rate: float | None = None
    generation_token_rate: float | None = None
    num_waiting: float | None = None
    num_running: float | None = None
    ttft: LatencyQuantiles | None = None
    itl: LatencyQuantiles | None = None
    kv_cache_usage: float | None = None  # mean over replicas, 0..1
    ready_replicas: int | None = None  # replicas that reported this sample


@dataclass(frozen=True, slots=True)
class CapacityProfile:
    """What one replica of a pool sustains (from offline profiling of a model on a GPU type).

    Decode inter-token latency is modelled as `itl(b) = base + b * (per_seq + per_ctx_token *
    ctx)` for a batch of `b` sequences whose mean context length is `ctx` (the `ITL = alpha +
    beta * batch` form of llm-d's queueing-model analyzer, with beta growing with context).
    When only the batch a replica sustains within the ITL SLO is known (the ServingJob CRD's
    `decodeBatchSize`), set `decode_batch_at_slo` and leave the ITL coefficients at zero.
    `decode_tokens_per_s`, when profiled, is a second bound on decode: never fewer replicas
    than the generated-token rate over what one replica generates within the SLOs.
    """

    prefill_tokens_per_s: float
    max_num_seqs: int
    decode_itl_base_s: float = 0.0
    decode_itl_per_seq_s: float = 0.0
    decode_itl_per_ctx_token_s: float = 0.0
    kv_cache_tokens: int | None = None
    decode_batch_at_slo: int | None = None
    gpus_per_replica: int = 1
    decode_tokens_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class Slo:
    """Latency objectives of a ServingJob, both at the 90th percentile, in seconds."""

    ttft_p90_s: float
    itl_p90_s: float


@dataclass(frozen=True, slots=True)
class PoolInput:
    """One pool as the policy sees it at decision time."""

    name: str
    role: PoolRole
    current_replicas: int
    min_replicas: int
    max_replicas: int
    capacity: CapacityProfile
    window: tuple[MetricsSample, ...]
    ready_replicas: int | None = None  # None = unknown; fewer than current = scale-up pending


@dataclass(frozen=True, slots=True)
class ScalingInput:
    """Everything one decision needs; `now` is passed in, never read from a clock."""

    now: float
    slo: Slo
    pools: tuple[PoolInput, ...]


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """A change of desired replicas made by the policy, kept for step limits."""

    time: float
    from_replicas: int
    to_replicas: int


@dataclass(frozen=True, slots=True)
class PoolState:
    """What the policy remembers about one pool between calls.

    `recommendations` are `(time, replicas)` pairs for stabilization windows; `events` are the
    policy's own recent changes for step limits; the two corrections are the feedback factors
    learned from observed latency against the SLO (1.0 = the capacity profile is right);
    `latency_need` is the burst reserve (in replicas, unrounded) at `latency_need_time`, the last
    time it was set; `burst_peaks` are the `(time, replicas)` peak needs behind that reserve,
    each held for `burst_hold_s` and then released with a half-life (only the entries that can
    still matter are kept: none is older and smaller than another). `prefill_history` and
    `decode_history` are the own-history forecast's state of each phase's demand
    (autoscaling_forecast.py).
    """

    name: str
    recommendations: tuple[tuple[float, int], ...] = ()
    events: tuple[ScaleEvent, ...] = ()
    ttft_correction: float = 1.0
    itl_correction: float = 1.0
    latency_need: float = 0.0
    latency_need_time: float | None = None
    last_update: float | None = None
    burst_peaks: tuple[tuple[float, float], ...] = ()
    prefill_history: SeasonalState = field(default_factory=SeasonalState)
    decode_history: SeasonalState = field(default_factory=SeasonalState)


@dataclass(frozen=True, slots=True)
class AutoscalerState:
    """The policy's explicit memory: one `PoolState` per pool, in any order."""

    pools: tuple[PoolState, ...] = ()

    def pool(self, name: str) -> PoolState:
        """The state of pool `name`, or a fresh one if the pool is new."""
        for state in self.pools:
            if state.name == name:
                return state
        return PoolState(name=name)


@dataclass(frozen=True, slots=True)
class Sizing:
    """The numbers behind a recommendation, for status, events and tests."""

    demand: float = 0.0  # tokens/s (prefill) or concurrent sequences (decode), observed
    forecast_demand: float = 0.0  # same unit, extrapolated to the forecast horizon
    capacity_replicas: int = 0  # from observed demand (with backlog)
    forecast_replicas: int = 0  # from forecast demand (window line or own-history season)
    latency_replicas: int = 0  # from the latency guard
    kv_replicas: int = 0  # from KV-cache usage
    ttft_correction: float = 1.0
    itl_correction: float = 1.0
    recommendation: int = 0  # max of the above, bounded, before stabilization and step limits
    step_limited: bool = False  # a step limit cut the change short this time


@dataclass(frozen=True, slots=True)
class PoolDecision:
    """The desired replica count of one pool with a stable reason and a human message."""

    name: str
    current_replicas: int
    desired_replicas: int
    reason: ScalingReason
    message: str
    sizing: Sizing = field(default_factory=Sizing)

    @property
    def changed(self) -> bool:
        return self.desired_replicas != self.current_replicas


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    """Decisions for every pool of one ServingJob, in the input's pool order."""

    now: float
    pools: tuple[PoolDecision, ...]

    def pool(self, name: str) -> PoolDecision:
        for decision in self.pools:
            if decision.name == name:
                return decision
        raise KeyError(name)
