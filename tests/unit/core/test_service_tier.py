"""The service tier inside queues (least attained service first, service_tier.py).

Aspects: the attained-service fields and the threshold are validated; the settings carry the
threshold to the policy (0: no tier).
"""

from __future__ import annotations

import math

import pytest

from gpufleet.core.demand import Gang, TypeOption
from gpufleet.core.policy import SERVICE_TIER_GPU_S, Policy
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang

H100 = "H100-80GB"


@pytest.mark.parametrize("value", [-1.0, math.nan], ids=["negative", "nan"])
def test_attained_service_is_never_negative(value: float) -> None:
    with pytest.raises(ValueError, match="attained_gpu_s"):
        Gang("g", (TypeOption(H100),), attained_gpu_s=value)
    with pytest.raises(ValueError, match="attained_gpu_s"):
        RunningGang("r", H100, (ReplicaPlacement("n", (0,)),), attained_gpu_s=value)
    assert Gang("g", (TypeOption(H100),), attained_gpu_s=0.0).attained_gpu_s == 0.0


@pytest.mark.parametrize("theta", [0.0, -5.0], ids=["zero", "negative"])
def test_the_threshold_is_positive_or_none(theta: float) -> None:
    with pytest.raises(ValueError, match="service_tier_gpu_s"):
        Policy(service_tier_gpu_s=theta)
    assert Policy(service_tier_gpu_s=None).service_tier_gpu_s is None
    assert Policy().service_tier_gpu_s == SERVICE_TIER_GPU_S
