"""Settings of the P/D autoscaling policy: every number the policy uses, with its source.

Sources cited as `serving.md §N` are sections of the shared serving reference
(`reference/serving.md`): Kubernetes HPA defaults (§5), AIBrix KPA/APA (§4), llm-d WVA and EPP
(§3), NVIDIA Dynamo planner (§2). Values marked "gpufleet" are our own choices; the rationale is
in the field description.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["AutoscalerSettings"]


class AutoscalerSettings(BaseModel):
    """Tunables of `gpufleet.core.autoscaling.decide`. Immutable; validated on construction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # --- metrics window and freshness -------------------------------------------------------
    window_s: float = Field(
        180.0,
        gt=0,
        description="Samples older than now - window_s are ignored. Source: AIBrix "
        "observeWindowSeconds 180 (serving.md §4).",
    )
    staleness_s: float = Field(
        60.0,
        gt=0,
        description="If the newest sample is older than this the pool holds (never scales "
        "down). Source: gpufleet; two of the slowest usual Prometheus scrape intervals (15-30 s, "
        "serving.md §5).",
    )

    # --- objective ----------------------------------------------------------------------------
    slo_quantile: float = Field(
        0.9,
        description="Latency quantile held under the SLO thresholds: the quantile read from "
        "the TTFT/ITL histograms and the tail the queueing model sizes for. Source: the "
        "ServingJob SLOs are p90 targets (TTFT p90, ITL p90); 0.99 when (as in the benchmark) "
        "99 % of requests must meet the thresholds.",
    )

    # --- capacity sizing --------------------------------------------------------------------
    target_utilization: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Scale up when demand exceeds this fraction of capacity. Source: llm-d "
        "scaleUpThreshold 0.85 (serving.md §3.2, §9 rule 3).",
    )
    scale_down_utilization: float = Field(
        0.70,
        gt=0,
        le=1,
        description="Scale down only to a count that keeps demand below this fraction of "
        "capacity (hysteresis band with target_utilization). Source: llm-d scaleDownBoundary "
        "0.70 (serving.md §3.2).",
    )
    utilization_floor_ratio: float = Field(
        0.1,
        gt=0,
        le=1,
        description="The SLO-derived prefill utilization ceiling never goes below this "
        "fraction of target_utilization, so a TTFT SLO that the own prefill time almost "
        "misses asks for at most 10x the throughput need. Source: gpufleet; a runaway guard "
        "(Dynamo's latency-ratio floor pinned replicas on an infeasible TTFT, serving.md §2.3).",
    )
    backlog_drain_s: float = Field(
        60.0,
        gt=0,
        description="Waiting work is added to demand as backlog / backlog_drain_s, i.e. the "
        "queue must clear within about one replica cold start. Source: gpufleet; lower end of "
        "the 60-300 s cold start in serving.md §9 rule 5.",
    )
    kv_target_usage: float = Field(
        0.80,
        gt=0,
        le=1,
        description="Decode replicas are sized so KV-cache usage stays below this. Source: "
        "llm-d kvCacheUtilThreshold 0.8 (serving.md §3.1, §3.2).",
    )
    kv_scale_up_threshold: float = Field(
        0.90,
        gt=0,
        le=1,
        description="Observed KV-cache usage above this forces a decode scale-up. Source: "
        "Dynamo decode_kv_scale_up_threshold 0.9 (serving.md §2.1).",
    )
    allow_scale_to_zero: bool = Field(
        False,
        description="Never go below one replica unless enabled (and never on missing data). "
        "Source: AIBrix scale-to-zero default false (serving.md §4).",
    )

    # --- forecast ---------------------------------------------------------------------------
    forecast_horizon_s: float = Field(
        60.0,
        ge=0,
        description="A least-squares line over the window is extrapolated this far ahead and "
        "used as a floor (only to scale up). Source: gpufleet; one replica cold start (60 s, "
        "serving.md §9 rule 5), shorter than AIBrix's 120 s horizon (§4) because the Azure code "
        "trace changes within minutes.",
    )
    forecast_min_samples: int = Field(
        3, ge=2, description="Fewer samples than this disable the forecast. Source: gpufleet."
    )
    forecast_max_mean_ratio: float = Field(
        4.0,
        ge=1,
        description="The forecast is clamped to [0, ratio x window mean]. Source: AIBrix "
        "predictive clamp 4x mean (serving.md §4).",
    )
    forecast_season_s: float = Field(
        86400.0,
        ge=0,
        description="Season of the pool's own-history forecast (Holt-Winters over bucket "
        "peaks, autoscaling_forecast.py): a day, the time-of-day pattern of serving traffic; "
        "0 turns it off. Source: Holt-Winters additive method (Hyndman & Athanasopoulos, FPP3 "
        "§8.3); a daily season as SageServe's forecasts use (serving.md §7).",
    )
    forecast_bucket_s: float = Field(
        60.0,
        gt=0,
        description="Bucket of the history: the forecast works on each bucket's peak demand. "
        "Source: gpufleet; the per-minute granularity of the code trace's analysis "
        "(reference/data.md §3).",
    )
    forecast_alpha: float = Field(
        0.3, gt=0, le=1, description="Level smoothing. Source: FPP3 §8.3 typical range."
    )
    forecast_beta: float = Field(
        0.05, ge=0, le=1, description="Trend smoothing. Source: FPP3 §8.3 typical range."
    )
    forecast_gamma: float = Field(
        0.3, ge=0, le=1, description="Seasonal smoothing. Source: FPP3 §8.3 typical range."
    )
    forecast_damping: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Trend damping phi (1 = undamped). Source: Gardner & McKenzie (1985); "
        "FPP3 §8.2 recommends 0.8-0.98.",
    )
    forecast_min_buckets: int = Field(
        5,
        ge=1,
        description="Buckets of history before the seasonal forecast is used. Source: gpufleet.",
    )

    # --- latency feedback -------------------------------------------------------------------
    latency_tolerance: float = Field(
        0.1,
        ge=0,
        description="Observed p90 latency must exceed SLO x (1 + tolerance) to count as a "
        "violation. Source: HPA tolerance 0.1 (serving.md §5).",
    )
    latency_healthy_ratio: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Below SLO x this ratio the latency correction decays toward 1. Source: "
        "Dynamo --loadbased-scaling-down-sensitivity 80 (serving.md §2.3).",
    )
    latency_queue_target: float = Field(
        0.8,
        gt=0,
        le=1,
        description="The latency feedback sizes the pool so the queueing part of p90 latency "
        "uses this fraction of the SLO budget left after the request's own time. Source: "
        "Dynamo --loadbased-scaling-down-sensitivity 80 (serving.md §2.3).",
    )
    burst_memory_half_life_s: float = Field(
        600.0,
        gt=0,
        description="After burst_hold_s, a held latency-derived need (the burst reserve) "
        "halves every half-life, so replicas a burst needed are released gradually rather than "
        "right after the scale-down window. Source: gpufleet; two HPA scale-down windows "
        "(300 s, serving.md §5), because bursts return faster than a replica starts "
        "(60-300 s, §9 rule 5).",
    )
    burst_hold_s: float = Field(
        0.0,
        ge=0,
        description="The replicas a scrape's observed latency asked for (the burst reserve) "
        "are held at full size for this long before the half-life release starts. Source: "
        "gpufleet; 0 = release from the start (the half-life alone). A hold keeps capacity for "
        "bursts that return after idle gaps shorter than a cold start plus one scrape (60 s + "
        "15 s, serving.md §9 rule 5, §5), as on the Azure code trace: 900 s (three HPA "
        "scale-down windows) measured +0.4 points of attainment for +9 % GPU-hours there "
        "(bench/README.md, Autoscaler), and it delays the scale-down after a burst.",
    )
    latency_max_step: float = Field(
        1.5,
        ge=1,
        description="One latency observation asks for at most this factor times the ready "
        "replicas. Source: gpufleet, from DistServe's M/D/1 prefill model (serving.md §7): the "
        "mean wait rho/(2(1-rho)) service times falls 6x when 1.5x replicas take a pool from "
        "rho 0.9 to 0.6, more than a p90 queue far over its budget needs; a larger step "
        "overshoots because the fluid estimate (wait proportional to 1/replicas) ignores how "
        "steeply queueing falls below saturation.",
    )
    latency_max_demand_ratio: float = Field(
        4.0,
        ge=1,
        description="The latency guard asks for at most this factor times the largest "
        "capacity need of the window (at least one replica), so latency that replicas do not "
        "fix cannot grow a pool to its maximum. Source: AIBrix predictive clamp 4x the window "
        "mean (serving.md §4); Dynamo removed its latency-ratio floor after it pinned replicas "
        "(#11624, §2.3). Sub-scrape clumps need about 2x the 15 s capacity need on the Azure "
        "code trace (bench/README.md, Autoscaler), well inside the cap.",
    )
    feedback_gain: float = Field(
        0.5,
        gt=0,
        le=1,
        description="On a violation the correction is multiplied by (observed/SLO)^gain. "
        "Source: gpufleet; square-root damping of Dynamo's observed/expected correction "
        "factor (serving.md §2.2) because latency is not linear in replicas.",
    )
    feedback_max_step: float = Field(
        2.0,
        ge=1,
        description="One violation raises the correction (and the latency guard) by at most "
        "this factor. Source: AIBrix max-scale-up-rate 2 (serving.md §4).",
    )
    feedback_max_correction: float = Field(
        4.0,
        ge=1,
        description="Upper clamp of the learned correction. Source: gpufleet; same bound as "
        "the forecast clamp (AIBrix 4x, serving.md §4).",
    )
    feedback_half_life_s: float = Field(
        900.0,
        gt=0,
        description="Half-life of the correction's decay toward 1 while latency is healthy. "
        "Source: gpufleet; three scale-down stabilization windows, so learned burst headroom "
        "is forgotten slower than replicas are released.",
    )

    # --- stabilization and step limits ------------------------------------------------------
    scale_up_stabilization_s: float = Field(
        0.0,
        ge=0,
        description="Scale up to the lowest recommendation of this window. Source: HPA "
        "scaleUp.stabilizationWindowSeconds 0 (serving.md §5).",
    )
    scale_down_stabilization_s: float = Field(
        300.0,
        ge=0,
        description="Scale down only to the highest recommendation of this window. Source: "
        "HPA scaleDown.stabilizationWindowSeconds 300 (serving.md §5, §9 rule 3: >= 300 s).",
    )
    scale_up_percent: float = Field(
        100.0,
        ge=0,
        description="Per scale_up_period_s, grow by at most this percent or scale_up_pods, "
        "whichever is larger. Source: HPA scaleUp policy Percent 100 / 15 s (serving.md §5).",
    )
    scale_up_pods: int = Field(
        4, ge=1, description="Source: HPA scaleUp policy Pods 4 / 15 s (serving.md §5)."
    )
    scale_up_period_s: float = Field(
        15.0, gt=0, description="Source: HPA policy periodSeconds 15 (serving.md §5)."
    )
    scale_down_percent: float = Field(
        50.0,
        ge=0,
        le=100,
        description="Per scale_down_period_s, shrink by at most this percent or "
        "scale_down_pods, whichever is larger. Source: AIBrix max-scale-down-rate 2, i.e. at "
        "most halve (serving.md §4).",
    )
    scale_down_pods: int = Field(
        1,
        ge=1,
        description="Source: Dynamo and llm-d saturation analyzer step of 1 replica "
        "(serving.md §2.1, §3.2); the ServingJob CRD's scaleDown.maxStep default 1.",
    )
    scale_down_period_s: float = Field(
        60.0,
        gt=0,
        description="Source: gpufleet; four HPA sync periods (15 s, serving.md §5), slower "
        "than scale-up on purpose.",
    )

    @property
    def tail_factor(self) -> float:
        """Ratio of the `slo_quantile` to the mean of an exponential-tailed delay or length:
        `-ln(1 - q)`, i.e. 2.3 for p90 and 4.6 for p99. Used both for queueing delay (DistServe's
        M/D/1 prefill model, serving.md §7) and for a request's own prefill time (prompt length;
        the Azure code trace has mean 2,048 and p99 7,436 tokens, reference/data.md §3)."""
        return -math.log(1.0 - self.slo_quantile)

    @model_validator(mode="after")
    def _check_bands(self) -> AutoscalerSettings:
        if self.slo_quantile not in (0.5, 0.9, 0.99):
            raise ValueError("slo_quantile must be 0.5, 0.9 or 0.99 (the exported quantiles)")
        if self.scale_down_utilization > self.target_utilization:
            raise ValueError("scale_down_utilization must not exceed target_utilization")
        if self.kv_target_usage > self.kv_scale_up_threshold:
            raise ValueError("kv_target_usage must not exceed kv_scale_up_threshold")
        return self
