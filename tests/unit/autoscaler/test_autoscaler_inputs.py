"""From a ServingJob spec to the policy's inputs: SLOs, per-pool bounds and roles, the capacity
profile from the CRD's capacity fields, freshness and damping settings from the CRD overriding
the operator-wide defaults, windows per pool, and the refusal to map a disabled autoscaler."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.autoscaler.inputs import (
    PoolObservation,
    capacity_factor,
    capacity_profile,
    enabled_policy,
    policy_settings,
    scaling_input,
    slo,
)
from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.core.autoscaling_types import MetricsSample, PoolRole, Slo
from gpufleet.model.servingjob import ServingJobSpec

TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "x"}]}}


def spec(**overrides: Any) -> ServingJobSpec:
    raw: dict[str, Any] = {
        "prefill": {"minReplicas": 1, "maxReplicas": 4, "gpusPerReplica": 2, "template": TEMPLATE},
        "decode": {"minReplicas": 2, "migProfile": "3g.40gb", "template": TEMPLATE},
        "slo": {"ttftP90Seconds": 0.5, "itlP90Seconds": 0.05},
        "autoscaling": {
            "intervalSeconds": 10,
            "prometheus": {"url": "http://prom:9090", "staleAfterSeconds": 20},
            "capacity": {"prefillTokensPerSecond": 12000, "decodeBatchSize": 64},
            "scaleUp": {"stabilizationWindowSeconds": 5, "maxStep": 3},
            "scaleDown": {"stabilizationWindowSeconds": 60, "maxStep": 2},
        },
    }
    raw.update(overrides)
    return ServingJobSpec.model_validate(raw)


def test_slo_from_spec() -> None:
    assert slo(spec()) == Slo(ttft_p90_s=0.5, itl_p90_s=0.05)


def test_settings_take_the_crd_damping_and_freshness() -> None:
    policy = enabled_policy(spec())
    assert policy is not None
    s = policy_settings(policy)
    assert s.staleness_s == 20
    assert (s.scale_up_stabilization_s, s.scale_down_stabilization_s) == (5, 60)
    # maxStep is "per decision": one interval per step period, no percentage rule.
    assert (s.scale_up_pods, s.scale_up_percent, s.scale_up_period_s) == (3, 0, 10)
    assert (s.scale_down_pods, s.scale_down_percent, s.scale_down_period_s) == (2, 0, 10)


def test_rate_window_is_its_own_field_and_defaults_to_the_staleness_limit() -> None:
    policy = enabled_policy(spec())
    assert policy is not None and policy.prometheus is not None
    assert policy.prometheus.rate_window == 20  # omitted: staleAfterSeconds, as before
    prometheus = {"url": "http://prom:9090", "staleAfterSeconds": 20, "rateWindowSeconds": 45}
    raw = spec().autoscaling
    assert raw is not None
    wide = enabled_policy(
        spec(autoscaling={**raw.model_dump(by_alias=True), "prometheus": prometheus})
    )
    assert wide is not None and wide.prometheus is not None
    assert wide.prometheus.rate_window == 45
    assert policy_settings(wide).staleness_s == 20


def test_settings_keep_the_other_operator_defaults() -> None:
    policy = enabled_policy(spec())
    assert policy is not None
    base = AutoscalerSettings(window_s=90, forecast_horizon_s=30, slo_quantile=0.99)
    s = policy_settings(policy, base)
    assert (s.window_s, s.forecast_horizon_s, s.slo_quantile) == (90, 30, 0.99)
    assert s.scale_down_pods == 2


def test_capacity_profile_from_crd_fields() -> None:
    sp = spec()
    assert sp.autoscaling is not None and sp.autoscaling.capacity is not None
    assert sp.prefill is not None and sp.decode is not None
    prefill = capacity_profile(sp.autoscaling.capacity, sp.prefill)
    assert prefill.prefill_tokens_per_s == 12000
    assert (prefill.decode_batch_at_slo, prefill.max_num_seqs) == (64, 64)
    assert prefill.gpus_per_replica == 2
    assert capacity_profile(sp.autoscaling.capacity, sp.decode).gpus_per_replica == 1  # MIG
    assert prefill.decode_tokens_per_s is None
    capacity = {"prefillTokensPerSecond": 12000, "decodeBatchSize": 64}
    profiled = spec(
        autoscaling={
            "prometheus": {"url": "http://prom:9090"},
            "capacity": {**capacity, "decodeTokensPerSecond": 2500},
        }
    )
    assert profiled.autoscaling is not None and profiled.autoscaling.capacity is not None
    assert profiled.decode is not None
    decode = capacity_profile(profiled.autoscaling.capacity, profiled.decode)
    assert decode.decode_tokens_per_s == 2500


def measured_on(gpu_type: str | None) -> ServingJobSpec:
    """Pools on A100 (1.0) or H100 (prefill 3.2, decode 1.6; L4 without a throughput), the
    capacity measured on `gpu_type`."""

    def pool(h100: float) -> dict[str, Any]:
        types = [
            {"name": "A100-80GB", "throughput": 1.0},
            {"name": "H100-80GB", "throughput": h100},
            {"name": "L4"},
        ]
        return {"gpuTypes": types, "template": TEMPLATE}

    capacity: dict[str, Any] = {"prefillTokensPerSecond": 8000, "decodeBatchSize": 64}
    if gpu_type is not None:
        capacity["gpuType"] = gpu_type
    return spec(
        prefill={"minReplicas": 1, "maxReplicas": 4, "gpusPerReplica": 1, **pool(3.2)},
        decode={"minReplicas": 1, "maxReplicas": 6, "gpusPerReplica": 1, **pool(1.6)},
        autoscaling={"prometheus": {"url": "http://prom:9090"}, "capacity": capacity},
    )


def test_capacity_follows_the_gpu_types_replicas_run_on() -> None:
    sp = measured_on("A100-80GB")
    assert sp.autoscaling is not None and sp.autoscaling.capacity is not None
    assert sp.prefill is not None and sp.decode is not None
    cap = sp.autoscaling.capacity
    assert capacity_factor(cap, sp.prefill, ("H100-80GB", "H100-80GB")) == pytest.approx(3.2)
    # Mixed: the mean; a type without a throughput or no recorded type counts as measured.
    assert capacity_factor(cap, sp.prefill, ("H100-80GB", "A100-80GB")) == pytest.approx(2.1)
    assert capacity_factor(cap, sp.prefill, ("L4", None)) == 1.0
    # Nothing running: the slowest listed type.
    assert capacity_factor(cap, sp.prefill) == 1.0
    h100 = measured_on("H100-80GB")
    assert h100.autoscaling is not None and h100.autoscaling.capacity is not None
    assert h100.decode is not None
    assert capacity_factor(h100.autoscaling.capacity, h100.decode) == pytest.approx(1 / 1.6)
    profile = capacity_profile(cap, sp.decode, 1.6)
    assert (profile.decode_batch_at_slo, profile.max_num_seqs) == (102, 102)  # floor(64 x 1.6)


def test_capacity_without_a_measured_type_is_not_scaled() -> None:
    sp = measured_on(None)
    assert sp.autoscaling is not None and sp.autoscaling.capacity is not None
    assert sp.prefill is not None
    assert capacity_factor(sp.autoscaling.capacity, sp.prefill, ("H100-80GB",)) == 1.0


def test_scaling_input_sizes_each_pool_by_its_running_types() -> None:
    observed = {
        "prefill": PoolObservation("prefill", 2, 2, ("H100-80GB", "H100-80GB")),
        "decode": PoolObservation("decode", 1, 0),
    }
    prefill, decode = scaling_input(measured_on("A100-80GB"), 100.0, observed, {}).pools
    assert prefill.capacity.prefill_tokens_per_s == pytest.approx(8000 * 3.2)
    assert decode.capacity.decode_batch_at_slo == 64  # none running: A100, the slowest


def test_scaling_input_pools_in_order_with_bounds_roles_and_windows() -> None:
    sample = MetricsSample(timestamp=99.0, prompt_token_rate=100.0)
    observed = {
        "decode": PoolObservation("decode", 3, 2),
        "prefill": PoolObservation("prefill", 1, None),
    }
    inputs = scaling_input(spec(), 100.0, observed, {"prefill": [sample]})
    assert inputs.now == 100.0
    prefill, decode = inputs.pools
    assert (prefill.name, prefill.role, prefill.min_replicas, prefill.max_replicas) == (
        "prefill",
        PoolRole.PREFILL,
        1,
        4,
    )
    assert (prefill.current_replicas, prefill.ready_replicas, prefill.window) == (
        1,
        None,
        (sample,),
    )
    # An omitted maxReplicas is a fixed pool; a pool without a window gets an empty one.
    assert (decode.min_replicas, decode.max_replicas, decode.window) == (2, 2, ())
    assert (decode.current_replicas, decode.ready_replicas) == (3, 2)


def test_pool_without_a_deployment_is_left_out() -> None:
    inputs = scaling_input(spec(), 1.0, {"decode": PoolObservation("decode", 2)}, {})
    assert [p.name for p in inputs.pools] == ["decode"]


def test_single_pool_is_unified() -> None:
    sp = spec(prefill=None, decode=None, server={"gpusPerReplica": 1, "template": TEMPLATE})
    inputs = scaling_input(sp, 1.0, {"server": PoolObservation("server", 1)}, {})
    assert inputs.pools[0].role is PoolRole.UNIFIED


@pytest.mark.parametrize(
    "autoscaling",
    [pytest.param(None, id="omitted"), pytest.param({"enabled": False}, id="disabled")],
)
def test_disabled_autoscaling_has_no_policy(autoscaling: dict[str, Any] | None) -> None:
    sp = spec(autoscaling=autoscaling, slo=None)
    assert enabled_policy(sp) is None
    with pytest.raises(ValueError, match="disabled"):
        scaling_input(sp, 1.0, {}, {})
