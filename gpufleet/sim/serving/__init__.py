"""Serving model for the P/D autoscaler: a disaggregated LLM server replaying request traces.

- `trace`: Azure LLM 2023 code trace loader, synthetic Poisson load.
- `profiles`: per-GPU-type replica profiles (prefill tokens/s, decode ITL(batch, context)).
- `model`: the request-level discrete-event model (`ServingModel`).
- `replay`: the cluster-free autoscaling loop around gpufleet's pure policy.
- `exporter`: vLLM-compatible `/metrics` per pool from the model's state (127.0.0.1 only).
"""

from gpufleet.sim.serving.model import (
    PoolConfig,
    PoolSnapshot,
    RequestOutcome,
    ServingConfig,
    ServingModel,
    slo_attainment,
)
from gpufleet.sim.serving.profiles import (
    LLAMA_8B,
    GpuSpec,
    LlmSpec,
    ReplicaProfile,
    replica_profile,
)
from gpufleet.sim.serving.replay import (
    Controller,
    PolicyController,
    PoolBounds,
    PoolView,
    ReplayResult,
    StaticController,
    replay,
)
from gpufleet.sim.serving.trace import Request, TraceError, load_azure_code_trace, poisson_requests

__all__ = [
    "LLAMA_8B",
    "Controller",
    "GpuSpec",
    "LlmSpec",
    "PolicyController",
    "PoolBounds",
    "PoolConfig",
    "PoolSnapshot",
    "PoolView",
    "ReplayResult",
    "ReplicaProfile",
    "Request",
    "RequestOutcome",
    "ServingConfig",
    "ServingModel",
    "StaticController",
    "TraceError",
    "load_azure_code_trace",
    "poisson_requests",
    "replay",
    "replica_profile",
    "slo_attainment",
]
