"""ServingJob: an LLM server, disaggregated into prefill and decode pools or run as one pool.

Spec shape (DESIGN.md, "Custom resources"): either `prefill` and `decode` pools or a single
`server` pool, each with replica bounds in KServe's minReplicas/maxReplicas style, whole GPUs or
a MIG slice per replica, acceptable GPU types and a pod template; latency SLOs; and autoscaling
settings (Prometheus source, per-replica capacity profile, stabilization windows and step limits
in the manner of the HorizontalPodAutoscaler's `behavior`, standby replicas per pool). The status
reports each pool's replicas and its last scaling decision.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Final, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gpufleet.model.crd_common import (
    API_GROUP,
    API_VERSION,
    GPU_TYPE_PATTERN,
    MAX_REPLICAS,
    NAME_PATTERN,
    Condition,
    CRDModel,
    GPUType,
    MigProfile,
    ObjectMeta,
    PodTemplate,
    UsageStatus,
    cel,
    check_gpus_xor_mig,
    check_unique_gpu_types,
    gpu_types_field,
    gpus_per_replica_field,
    gpus_xor_mig_rules,
    mig_profile_field,
    validations,
)
from gpufleet.model.trainingjob import MAX_PRIORITY

__all__ = [
    "KIND",
    "POOL_NAMES",
    "AutoscalingPolicy",
    "CapacityProfile",
    "PoolSpec",
    "PoolStatus",
    "PrometheusSource",
    "ScaleDownPolicy",
    "ScaleUpPolicy",
    "ServingJob",
    "ServingJobConditionType",
    "ServingJobPhase",
    "ServingJobReason",
    "ServingJobSpec",
    "ServingJobStatus",
    "ServingSLO",
    "StandbyPolicy",
    "StandbyPool",
]

KIND: Final = "ServingJob"
# The pool keys a ServingJob may have, in the order the operator reconciles them.
POOL_NAMES: Final = ("prefill", "decode", "server")


class ServingJobPhase(enum.StrEnum):
    """Coarse state of a ServingJob; per-pool detail is in the pool status and conditions."""

    PENDING = "Pending"
    PROGRESSING = "Progressing"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


class ServingJobConditionType(enum.StrEnum):
    """Condition types a ServingJob's status may carry."""

    READY = "Ready"
    PREFILL_READY = "PrefillReady"
    DECODE_READY = "DecodeReady"
    SERVER_READY = "ServerReady"
    SCALING_ACTIVE = "ScalingActive"


class ServingJobReason(enum.StrEnum):
    """Stable condition reasons; tools and tests may switch on them."""

    ALL_POOLS_READY = "AllPoolsReady"
    REPLICAS_NOT_READY = "ReplicasNotReady"
    INSUFFICIENT_GPUS = "InsufficientGPUs"
    METRICS_FRESH = "MetricsFresh"
    METRICS_MISSING = "MetricsMissing"
    METRICS_STALE = "MetricsStale"
    AUTOSCALING_DISABLED = "AutoscalingDisabled"


class PoolSpec(CRDModel):
    """One pool of identical server replicas."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            *gpus_xor_mig_rules(),
            cel(
                "!has(self.maxReplicas) || !has(self.minReplicas) || "
                "self.minReplicas <= self.maxReplicas",
                "minReplicas must be less than or equal to maxReplicas",
                ".minReplicas",
            ),
        )
    )

    min_replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        description=(
            "Fewest replicas the pool keeps; the autoscaler never goes below it, and never to zero."
        ),
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REPLICAS,
        description="Most replicas the autoscaler may run. Omitted means minReplicas (fixed).",
    )
    gpus_per_replica: int | None = gpus_per_replica_field()
    mig_profile: MigProfile | None = mig_profile_field()
    gpu_types: list[GPUType] | None = gpu_types_field("the pool")
    template: PodTemplate = Field(
        description="Pod template for the pool's replicas; gpufleet adds GPU requests.",
    )

    @model_validator(mode="after")
    def _cross_field(self) -> Self:
        check_gpus_xor_mig(self.gpus_per_replica, self.mig_profile)
        check_unique_gpu_types(self.gpu_types)
        if self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must be less than or equal to maxReplicas")
        return self


class ServingSLO(CRDModel):
    """Latency targets the autoscaler sizes the pools against."""

    ttft_p90_seconds: float = Field(
        gt=0,
        le=600,
        description="Target 90th-percentile time to first token, in seconds (prefill side).",
    )
    itl_p90_seconds: float = Field(
        gt=0,
        le=10,
        description="Target 90th-percentile inter-token latency, in seconds (decode side).",
    )


class PrometheusSource(CRDModel):
    """Where the autoscaler reads the server's metrics (vLLM metric names)."""

    url: str = Field(
        max_length=2048,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="Base URL of the Prometheus HTTP API, for example http://prometheus:9090.",
    )
    selector: str | None = Field(
        default=None,
        max_length=1024,
        description=(
            'PromQL label matchers added to every query, for example model_name="llama-3-8b". '
            "Omitted means the operator's labels for this ServingJob's pods."
        ),
    )
    stale_after_seconds: int = Field(
        default=60,
        ge=5,
        le=3600,
        description="Samples older than this count as missing; the autoscaler then holds.",
    )
    rate_window_seconds: int | None = Field(
        default=None,
        ge=5,
        le=3600,
        description=(
            "Range of the rate and quantile queries (PromQL `[window]`): token rates and "
            "latency quantiles are averaged over it. At least two scrape intervals. Omitted "
            "means staleAfterSeconds."
        ),
    )

    @property
    def rate_window(self) -> int:
        """The rate window in seconds (`rateWindowSeconds`, by default `staleAfterSeconds`)."""
        if self.rate_window_seconds is not None:
            return self.rate_window_seconds
        return self.stale_after_seconds


class CapacityProfile(CRDModel):
    """What one replica sustains within the SLOs, measured offline on its GPU type."""

    gpu_type: str | None = Field(
        default=None,
        pattern=GPU_TYPE_PATTERN,
        max_length=32,
        description=(
            "The GPU type the profile was measured on. When set, a replica on another type "
            "the pool lists is taken to sustain the profile times that type's throughput over "
            "this one's (both from the pool's gpuTypes; 1 where either is not given), and "
            "each pool is sized by the mean over the GPU types its running replicas landed on "
            "(with none running, the least of its types). Omitted: every replica counts as "
            "the profile."
        ),
    )

    prefill_tokens_per_second: float = Field(
        gt=0,
        le=10_000_000,
        description="Prompt tokens per second one prefill (or server) replica processes.",
    )
    decode_batch_size: int = Field(
        ge=1,
        le=4096,
        description="Concurrent sequences one decode (or server) replica serves within ITL.",
    )
    decode_tokens_per_second: float | None = Field(
        default=None,
        gt=0,
        le=10_000_000,
        description=(
            "Generated tokens per second one decode (or server) replica sustains within the "
            "SLOs, when profiled; decode never gets fewer replicas than the generated-token "
            "rate needs at this speed."
        ),
    )


class ScaleUpPolicy(CRDModel):
    """Damping of scale-up decisions."""

    stabilization_window_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="Scale up only to the lowest recommendation seen over this window.",
    )
    max_step: int = Field(
        default=4, ge=1, le=MAX_REPLICAS, description="Most replicas added to a pool per decision."
    )


class ScaleDownPolicy(CRDModel):
    """Damping of scale-down decisions."""

    stabilization_window_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="Scale down only to the highest recommendation seen over this window.",
    )
    max_step: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        description="Most replicas removed from a pool per decision.",
    )


class StandbyPool(CRDModel):
    """Standby replicas of one pool: kept loaded but asleep, woken before new ones start."""

    replicas: int = Field(
        default=0,
        ge=0,
        le=MAX_REPLICAS,
        description=(
            "Replicas a scale-down puts to sleep instead of removing (vLLM sleep mode level 1: "
            "weights offloaded to CPU memory, the GPU's memory freed), at most this many at a "
            "time; a scale-up wakes them before it creates new replicas. At most maxReplicas "
            "minus minReplicas (the pool never runs fewer than minReplicas awake). The server "
            "must honour the gpufleet.io/standby pod annotation (README)."
        ),
    )
    wake_seconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description=(
            "How long a woken replica takes to serve again (weights back from CPU memory), "
            "distinct from a cold start: the autoscaler counts a woken replica as starting, "
            "not ready, for this long."
        ),
    )


class StandbyPolicy(CRDModel):
    """Standby replicas per pool; a pool not named keeps none."""

    prefill: StandbyPool | None = Field(default=None, description="Standbys of the prefill pool.")
    decode: StandbyPool | None = Field(default=None, description="Standbys of the decode pool.")
    server: StandbyPool | None = Field(default=None, description="Standbys of the single pool.")

    def of(self, pool: str) -> StandbyPool | None:
        """The named pool's standby settings, if any."""
        found: StandbyPool | None = getattr(self, pool)
        return found


def _standby_rules() -> tuple[dict[str, Any], ...]:
    """CEL rules on the spec: a pool's standbys need the pool and room below maxReplicas."""
    rules = []
    for pool in POOL_NAMES:
        entry = f"self.autoscaling.standby.{pool}"
        guard = f"!has(self.autoscaling) || !has(self.autoscaling.standby) || !has({entry})"
        rules.append(
            cel(
                f"{guard} || has(self.{pool})",
                f"autoscaling.standby.{pool} names a pool the ServingJob does not have",
                f".autoscaling.standby.{pool}",
                "FieldValueForbidden",
            )
        )
        top = f"(has(self.{pool}.maxReplicas) ? self.{pool}.maxReplicas : self.{pool}.minReplicas)"
        rules.append(
            cel(
                f"{guard} || !has(self.{pool}) || !has({entry}.replicas) || "
                f"{entry}.replicas <= {top} - self.{pool}.minReplicas",
                f"autoscaling.standby.{pool}.replicas must not exceed {pool}.maxReplicas minus "
                f"{pool}.minReplicas: standbys are replicas a scale-down puts to sleep, and the "
                "pool never runs fewer than minReplicas awake",
                f".autoscaling.standby.{pool}.replicas",
                "FieldValueInvalid",
            )
        )
    return tuple(rules)


class AutoscalingPolicy(CRDModel):
    """Settings of the prefill/decode autoscaler for this ServingJob."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(has(self.enabled) && !self.enabled) || has(self.prometheus)",
                "prometheus is required when autoscaling is enabled",
                ".prometheus",
                "FieldValueRequired",
            ),
            cel(
                "(has(self.enabled) && !self.enabled) || has(self.capacity)",
                "capacity is required when autoscaling is enabled",
                ".capacity",
                "FieldValueRequired",
            ),
        )
    )

    enabled: bool = Field(
        default=True,
        description="False pins every pool at minReplicas and ignores the other settings.",
    )
    interval_seconds: int = Field(
        default=15, ge=1, le=3600, description="Seconds between two autoscaling decisions."
    )
    prometheus: PrometheusSource | None = Field(
        default=None, description="Metrics source; required when enabled."
    )
    capacity: CapacityProfile | None = Field(
        default=None, description="Per-replica capacity profile; required when enabled."
    )
    scale_up: ScaleUpPolicy = Field(
        default_factory=ScaleUpPolicy,
        description="Stabilization window and step limit for growing a pool.",
        json_schema_extra={"default": {}},
    )
    scale_down: ScaleDownPolicy = Field(
        default_factory=ScaleDownPolicy,
        description="Stabilization window and step limit for shrinking a pool.",
        json_schema_extra={"default": {}},
    )
    standby: StandbyPolicy | None = Field(
        default=None,
        description=(
            "Standby replicas per pool: asleep replicas whose GPUs are freed, woken first on a "
            "scale-up. Omitted: none; a scale-down removes replicas."
        ),
    )

    @model_validator(mode="after")
    def _sources(self) -> Self:
        if self.enabled and self.prometheus is None:
            raise ValueError("prometheus is required when autoscaling is enabled")
        if self.enabled and self.capacity is None:
            raise ValueError("capacity is required when autoscaling is enabled")
        return self


class ServingJobSpec(CRDModel):
    """Desired state of a ServingJob."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.server) || !(has(self.prefill) || has(self.decode))",
                "server is the single pool of a non-disaggregated ServingJob; leave it unset "
                "when prefill and decode pools are given",
                ".server",
                "FieldValueForbidden",
            ),
            cel(
                "has(self.server) || has(self.prefill) || has(self.decode)",
                "a ServingJob needs pools: either server alone, or prefill and decode",
                ".server",
                "FieldValueRequired",
            ),
            cel(
                "!has(self.prefill) || has(self.decode)",
                "decode is required beside prefill in a disaggregated ServingJob",
                ".decode",
                "FieldValueRequired",
            ),
            cel(
                "!has(self.decode) || has(self.prefill)",
                "prefill is required beside decode in a disaggregated ServingJob",
                ".prefill",
                "FieldValueRequired",
            ),
            cel(
                "!has(self.autoscaling) || "
                "(has(self.autoscaling.enabled) && !self.autoscaling.enabled) || "
                "has(self.slo)",
                "slo is required when autoscaling is enabled",
                ".slo",
                "FieldValueRequired",
            ),
            cel(
                "!has(self.autoscaling) || !has(self.autoscaling.capacity) || "
                "!has(self.autoscaling.capacity.gpuType) || "
                + " && ".join(
                    f"(!has(self.{pool}) || (has(self.{pool}.gpuTypes) && self.{pool}.gpuTypes"
                    f".exists(t, t.name == self.autoscaling.capacity.gpuType)))"
                    for pool in ("prefill", "decode", "server")
                ),
                "autoscaling.capacity.gpuType must be one of the gpuTypes of every pool",
                ".autoscaling.capacity.gpuType",
                "FieldValueInvalid",
            ),
            *_standby_rules(),
        )
    )

    prefill: PoolSpec | None = Field(
        default=None,
        description="Prefill pool of a disaggregated server (prompt processing); needs decode.",
    )
    decode: PoolSpec | None = Field(
        default=None,
        description="Decode pool of a disaggregated server (token generation); needs prefill.",
    )
    server: PoolSpec | None = Field(
        default=None,
        description="The single pool of a server that is not disaggregated.",
    )
    port: int = Field(
        default=8000,
        ge=1,
        le=65535,
        description=(
            "Port the server containers listen on; gpufleet puts a Service on it in front of "
            "each pool, named like the pool's Deployment."
        ),
    )
    slo: ServingSLO | None = Field(
        default=None, description="Latency targets; required when autoscaling is enabled."
    )
    autoscaling: AutoscalingPolicy | None = Field(
        default=None,
        description="Autoscaler settings. Omitted means the pools stay at minReplicas.",
    )
    priority: int = Field(
        default=0,
        ge=0,
        le=MAX_PRIORITY,
        description=(
            f"Priority from 0 to {MAX_PRIORITY} against the other jobs of its queue (all jobs "
            "where no GPUQueue exists); higher wins. Across queues, quotas and fair share "
            "decide, not priority."
        ),
    )
    queue: str = Field(
        default="default",
        max_length=63,
        pattern=NAME_PATTERN,
        description=(
            "The GPUQueue the job's replicas are charged to: its quota, borrowing and fair "
            "share. A queue that does not exist (yet) makes them wait with QueueNotFound; one "
            "whose priorityRange or namespaceSelector does not take them, with QueueNotAllowed."
        ),
    )
    preemptible: bool = Field(
        default=False,
        description=(
            "Whether gpufleet may evict this server's replicas for others: for example "
            "higher-priority jobs of its queue, or its queue's lender reclaiming borrowed "
            "quota. Non-preemptible replicas borrow no quota that a reclaim could want."
        ),
    )

    @model_validator(mode="after")
    def _pools(self) -> Self:
        disaggregated = self.prefill is not None or self.decode is not None
        if self.server is not None and disaggregated:
            raise ValueError("server cannot be combined with prefill and decode")
        if self.server is None and not disaggregated:
            raise ValueError("either server, or prefill and decode, is required")
        if disaggregated and (self.prefill is None or self.decode is None):
            raise ValueError("prefill and decode are required together")
        if self.autoscaling is not None and self.autoscaling.enabled and self.slo is None:
            raise ValueError("slo is required when autoscaling is enabled")
        capacity = self.autoscaling.capacity if self.autoscaling is not None else None
        if capacity is not None and capacity.gpu_type is not None:
            for pool in self.pools().values():
                if capacity.gpu_type not in {t.name for t in pool.gpu_types or ()}:
                    raise ValueError(
                        "autoscaling.capacity.gpuType must be one of the gpuTypes of every pool"
                    )
        self._check_standby()
        return self

    def _check_standby(self) -> None:
        standby = self.autoscaling.standby if self.autoscaling is not None else None
        if standby is None:
            return
        pools = self.pools()
        for name in POOL_NAMES:
            entry = standby.of(name)
            if entry is None:
                continue
            pool = pools.get(name)
            if pool is None:
                raise ValueError(
                    f"autoscaling.standby.{name} names a pool the ServingJob does not have"
                )
            low = pool.min_replicas
            room = (pool.max_replicas if pool.max_replicas is not None else low) - low
            if entry.replicas > room:
                raise ValueError(
                    f"autoscaling.standby.{name}.replicas must not exceed {name}.maxReplicas "
                    f"minus {name}.minReplicas ({room}): standbys are replicas a scale-down "
                    "puts to sleep, and the pool never runs fewer than minReplicas awake"
                )

    def standby_of(self, pool: str) -> StandbyPool | None:
        """The pool's standby settings while autoscaling is on (None: the pool keeps none)."""
        policy = self.autoscaling
        if policy is None or not policy.enabled or policy.standby is None:
            return None
        return policy.standby.of(pool)

    def pools(self) -> dict[str, PoolSpec]:
        """The pools that are set, by name, in POOL_NAMES order."""
        found = {"prefill": self.prefill, "decode": self.decode, "server": self.server}
        return {name: pool for name, pool in found.items() if pool is not None}


class PoolStatus(CRDModel):
    """Observed state of one pool."""

    replicas: int | None = Field(default=None, ge=0, description="Replicas that exist.")
    asleep_replicas: int | None = Field(
        default=None,
        ge=0,
        description="Standby replicas asleep now (in replicas, not in readyReplicas).",
    )
    ready_replicas: int | None = Field(
        default=None, ge=0, description="Replicas that are ready (awake and serving)."
    )
    desired_replicas: int | None = Field(
        default=None, ge=0, description="Awake replicas the autoscaler last asked for."
    )
    last_scale_time: datetime | None = Field(
        default=None, description="When desiredReplicas last changed (RFC 3339)."
    )
    last_scale_reason: str | None = Field(
        default=None,
        max_length=1024,
        description="Why desiredReplicas last changed, for example the metric and SLO involved.",
    )


class ServingJobStatus(UsageStatus):
    """Observed state of a ServingJob, written by gpufleet."""

    phase: ServingJobPhase | None = Field(
        default=None, description="Pending, Progressing, Ready, Degraded or Failed."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=16,
        description="Current conditions, among them Ready and ScalingActive.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    prefill: PoolStatus | None = Field(default=None, description="State of the prefill pool.")
    decode: PoolStatus | None = Field(default=None, description="State of the decode pool.")
    server: PoolStatus | None = Field(default=None, description="State of the single pool.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this status was computed from."
    )


class ServingJob(CRDModel):
    """An LLM server whose pools gpufleet places and autoscales."""

    api_version: Literal["gpufleet.io/v1alpha1"] = Field(
        default="gpufleet.io/v1alpha1", description=f"{API_GROUP}/{API_VERSION}"
    )
    kind: Literal["ServingJob"] = Field(default="ServingJob", description="ServingJob")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: ServingJobSpec = Field(description="Desired state.")
    status: ServingJobStatus | None = Field(default=None, description="Observed state.")
