"""Per-GPU-type replica profiles of the serving model, derived from a roofline estimate.

A replica serves one dense decoder-only model on `gpus` GPUs. Prefill is compute-bound:
`tokens/s = MFU x peak BF16 FLOP/s / (2 x parameters)`. Decode is memory-bound: one iteration
reads the weights once and every running sequence's KV cache, so
`ITL(b) = weights / BW_eff + b x (2 x params / FLOP_eff + kv_bytes_per_token x ctx / BW_eff)`
with `BW_eff = MBU x HBM bandwidth` — the `ITL = alpha + beta * batch` form of llm-d's
queueing-model analyzer (reference/serving.md §3.2) with beta growing with context.

GPU numbers are NVIDIA datasheet values (dense BF16 tensor FLOP/s, memory bandwidth; the H100 and
H200 bandwidths 3.35 and 4.8 TB/s are also quoted in reference/gpus.md). MFU 0.4 and MBU 0.7 are
gpufleet's conservative assumptions for a well-tuned engine, not measurements.

Catalogue GPU types
-------------------
The scheduler names GPU types after the catalogue (`gpufleet/model/catalog.yaml`: `H100-80GB`,
`A100-40GB`, `L4`, ...); `CATALOG_GPU_SPECS` maps those names to the specs here, and
`GpuTypeProfiles` turns a replica's catalogue type into its profile. A replica falls back to its
pool's configured profile, logged once per cause and type, when
- it has no type (the pod carries no `gpufleet.io/gpu-type`, or runs on a MIG slice, whose speed
  is a fraction of the GPU's that this roofline does not model);
- its type has no spec: V100-32GB and T4 have no BF16 tensor cores, so a BF16 roofline would be
  invented, and any type a site adds to the catalogue;
- the model does not fit in the type's memory (a warning: such a pod could not serve at all).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.core.autoscaling_types import CapacityProfile

__all__ = [
    "CATALOG_GPU_SPECS",
    "GPU_SPECS",
    "LLAMA_8B",
    "GpuSpec",
    "GpuTypeProfiles",
    "LlmSpec",
    "ReplicaProfile",
    "replica_profile",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """Datasheet numbers of one GPU type."""

    name: str
    bf16_tflops: float  # dense tensor-core BF16, TFLOP/s
    hbm_tb_s: float  # HBM bandwidth, TB/s
    memory_gb: float


@dataclass(frozen=True, slots=True)
class LlmSpec:
    """The served model: parameter count and KV-cache bytes per token (GQA, BF16)."""

    name: str
    params_b: float  # billions of parameters
    kv_bytes_per_token: int
    weight_bytes_per_param: float = 2.0


# Llama-3.1-8B-class: 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes = 128 KiB per token.
LLAMA_8B = LlmSpec(name="llama-8b", params_b=8.0, kv_bytes_per_token=32 * 8 * 128 * 2 * 2)

GPU_SPECS: dict[str, GpuSpec] = {
    spec.name: spec
    for spec in (
        GpuSpec("H100-SXM-80GB", bf16_tflops=989.0, hbm_tb_s=3.35, memory_gb=80.0),
        GpuSpec("H200-SXM-141GB", bf16_tflops=989.0, hbm_tb_s=4.8, memory_gb=141.0),
        GpuSpec("A100-SXM-80GB", bf16_tflops=312.0, hbm_tb_s=2.039, memory_gb=80.0),
        GpuSpec("L40S-48GB", bf16_tflops=362.0, hbm_tb_s=0.864, memory_gb=48.0),
        # NVIDIA A100 datasheet: 312 TFLOP/s dense BF16 (624 with sparsity), 40 GB HBM2 at
        # 1,555 GB/s on the SXM4 part (the catalogue's A100-40GB is the 400 W SXM4 one).
        GpuSpec("A100-SXM-40GB", bf16_tflops=312.0, hbm_tb_s=1.555, memory_gb=40.0),
        # NVIDIA A10 datasheet: 125 TFLOP/s BF16 (250 with sparsity), 24 GB GDDR6 at 600 GB/s.
        GpuSpec("A10-24GB", bf16_tflops=125.0, hbm_tb_s=0.6, memory_gb=24.0),
        # NVIDIA L4 datasheet: 242 TFLOP/s BF16 with sparsity, so 121 dense; 24 GB at 300 GB/s.
        GpuSpec("L4-24GB", bf16_tflops=121.0, hbm_tb_s=0.3, memory_gb=24.0),
    )
}

# Catalogue GPU type -> GPU_SPECS name. V100-32GB and T4 are absent on purpose (module docstring).
CATALOG_GPU_SPECS: dict[str, str] = {
    "H100-80GB": "H100-SXM-80GB",
    "H200-141GB": "H200-SXM-141GB",
    "A100-80GB": "A100-SXM-80GB",
    "A100-40GB": "A100-SXM-40GB",
    "A10": "A10-24GB",
    "L4": "L4-24GB",
}


@dataclass(frozen=True, slots=True)
class ReplicaProfile:
    """How fast one replica of a given model on a given GPU type runs each phase."""

    gpu_type: str
    gpus: int
    prefill_tokens_per_s: float
    prefill_iteration_overhead_s: float
    max_batched_tokens: int
    decode_itl_base_s: float
    decode_itl_per_seq_s: float
    decode_itl_per_ctx_token_s: float
    max_num_seqs: int
    kv_cache_tokens: int
    kv_transfer_s_per_token: float

    def prefill_time(self, tokens: int) -> float:
        """Duration of one prefill iteration over `tokens` prompt tokens."""
        return self.prefill_iteration_overhead_s + tokens / self.prefill_tokens_per_s

    def decode_itl(self, batch: int, ctx_tokens: int) -> float:
        """Duration of one decode iteration for `batch` sequences holding `ctx_tokens` KV."""
        return (
            self.decode_itl_base_s
            + batch * self.decode_itl_per_seq_s
            + ctx_tokens * self.decode_itl_per_ctx_token_s
        )

    def capacity(self) -> CapacityProfile:
        """The per-replica capacity profile the autoscaling policy sizes pools with."""
        return CapacityProfile(
            prefill_tokens_per_s=self.prefill_tokens_per_s,
            max_num_seqs=self.max_num_seqs,
            decode_itl_base_s=self.decode_itl_base_s,
            decode_itl_per_seq_s=self.decode_itl_per_seq_s,
            decode_itl_per_ctx_token_s=self.decode_itl_per_ctx_token_s,
            kv_cache_tokens=self.kv_cache_tokens,
            gpus_per_replica=self.gpus,
        )


def replica_profile(
    gpu_type: str,
    model: LlmSpec = LLAMA_8B,
    *,
    gpus: int = 1,
    mfu: float = 0.4,
    mbu: float = 0.7,
    gpu_memory_utilization: float = 0.9,
    runtime_reserve_gb: float = 4.0,
    prefill_iteration_overhead_s: float = 0.002,
    max_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    kv_link_gb_s: float = 50.0,
) -> ReplicaProfile:
    """Roofline profile of `model` on `gpus` GPUs of `gpu_type` (tensor-parallel, ideal split).

    `gpu_memory_utilization` 0.9 and `max_num_seqs` 256 mirror common vLLM settings;
    `max_batched_tokens` 8192 is the chunked-prefill token budget per iteration;
    `kv_link_gb_s` is the prefill->decode KV transfer bandwidth (one 400 Gb/s RDMA NIC).
    """
    try:
        gpu = GPU_SPECS[gpu_type]
    except KeyError:
        raise ValueError(f"unknown GPU type {gpu_type!r}; known: {sorted(GPU_SPECS)}") from None
    flops = mfu * gpu.bf16_tflops * 1e12 * gpus
    bandwidth = mbu * gpu.hbm_tb_s * 1e12 * gpus
    params = model.params_b * 1e9
    weight_bytes = params * model.weight_bytes_per_param
    flop_per_token = 2.0 * params
    free_bytes = gpu.memory_gb * 1e9 * gpus * gpu_memory_utilization - weight_bytes
    free_bytes -= runtime_reserve_gb * 1e9 * gpus
    if free_bytes <= 0:
        raise ValueError(f"{model.name} does not fit on {gpus} x {gpu_type}")
    return ReplicaProfile(
        gpu_type=gpu_type,
        gpus=gpus,
        prefill_tokens_per_s=flops / flop_per_token,
        prefill_iteration_overhead_s=prefill_iteration_overhead_s,
        max_batched_tokens=max_batched_tokens,
        decode_itl_base_s=weight_bytes / bandwidth,
        decode_itl_per_seq_s=flop_per_token / flops,
        decode_itl_per_ctx_token_s=model.kv_bytes_per_token / bandwidth,
        max_num_seqs=max_num_seqs,
        kv_cache_tokens=int(free_bytes // model.kv_bytes_per_token),
        kv_transfer_s_per_token=model.kv_bytes_per_token / (kv_link_gb_s * 1e9),
    )


def _default_build(spec: str, gpus: int) -> ReplicaProfile:
    return replica_profile(spec, gpus=gpus)


class GpuTypeProfiles:
    """Replica profiles by catalogue GPU type, with the pool's own profile as the fallback.

    `build(spec, gpus)` makes the profile of the served model on `gpus` GPUs of a `GPU_SPECS`
    type; the default is `replica_profile` with its defaults (Llama-8B-class). A type whose spec
    is the fallback's own gets the fallback itself, so a pool configured for a type and placed on
    it runs exactly as configured. Profiles are cached; fallbacks are logged once per cause.
    """

    def __init__(
        self,
        build: Callable[[str, int], ReplicaProfile] = _default_build,
        *,
        specs: Mapping[str, str] = CATALOG_GPU_SPECS,
    ) -> None:
        self._build = build
        self._specs = dict(specs)
        self._cache: dict[tuple[str, int], ReplicaProfile | None] = {}
        self._logged: set[str] = set()

    def resolve(self, gpu_type: str | None, fallback: ReplicaProfile) -> ReplicaProfile:
        """The profile of a replica on `gpu_type` (a catalogue name; None = unknown)."""
        if gpu_type is None:
            self._once(
                "",
                logging.INFO,
                "replicas without a whole-GPU type (no gpu-type annotation, "
                "or a MIG slice) run at their pool's %s profile",
                fallback.gpu_type,
            )
            return fallback
        spec = self._specs.get(gpu_type)
        if spec is None:
            self._once(
                gpu_type,
                logging.INFO,
                "no roofline spec for GPU type %s; its replicas run at their pool's %s profile",
                gpu_type,
                fallback.gpu_type,
            )
            return fallback
        if spec == fallback.gpu_type:
            return fallback
        key = (spec, fallback.gpus)
        if key not in self._cache:
            try:
                self._cache[key] = self._build(spec, fallback.gpus)
            except ValueError as exc:  # the model does not fit in the type's memory
                self._cache[key] = None
                self._once(
                    gpu_type,
                    logging.WARNING,
                    "%s; its replicas run at their pool's %s profile",
                    exc,
                    fallback.gpu_type,
                )
        profile = self._cache[key]
        return fallback if profile is None else profile

    def _once(self, key: str, level: int, message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            logger.log(level, message, *args)
