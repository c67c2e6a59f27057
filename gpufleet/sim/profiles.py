"""Per-job throughput on each GPU type, from Gavel's measured matrix.

The Gavel matrix (data.md §4) gives steps/s for 26 job types on K80, P100 and V100, at scale
factors 1/2/4/8 (GPUs per job), measured consolidated (one server) and unconsolidated (spread).
The simulator uses it in three ways:

* a job's model class is one Gavel job type at the job's scale factor (the trace loaders pick it);
* on K80/P100/V100 the job's speed relative to V100 is the ratio of the measured rates, so jobs
  differ in how much they gain from a faster GPU (Recommendation jobs even run slower on V100);
* a multi-GPU job spread over several nodes runs at the unconsolidated/consolidated ratio.

GPU types that Gavel did not measure (T4, A100, H100, ...) use the catalogue's single relative
speed; that is a stated simplification, see gpus.md §7.4 for where those numbers come from.
A zero or missing rate means "not profiled" (data.md §4 quirks) and falls back to 1.0.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

__all__ = ["GAVEL_GPU_KEYS", "GavelProfile", "gavel_scale"]

# Gavel's GPU keys; the consolidated matrices.
GAVEL_GPU_KEYS: tuple[str, ...] = ("k80", "p100", "v100")
_SCALES: tuple[int, ...] = (1, 2, 4, 8)


def gavel_scale(num_gpus: int) -> int:
    """Gavel scale factor used for a job of `num_gpus` GPUs (largest profiled one not above it)."""
    return max(s for s in _SCALES if s <= max(1, num_gpus))


@dataclass(frozen=True)
class GavelProfile:
    """Isolated rates keyed by `(gpu_key, job_type, scale)`; keys may end `_unconsolidated`."""

    rates: dict[tuple[str, str, int], float]

    @classmethod
    def load(cls, path: str | Path) -> GavelProfile:
        """Parse `gavel_simulation_throughputs.json` (second-level keys are Python tuple reprs)."""
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        rates: dict[tuple[str, str, int], float] = {}
        for gpu_key, entries in raw.items():
            for job_key, partners in entries.items():
                job_type, scale = ast.literal_eval(job_key)
                rates[(gpu_key, str(job_type), int(scale))] = float(partners["null"])
        return cls(rates)

    @cached_property
    def _types_by_scale(self) -> dict[int, tuple[str, ...]]:
        out: dict[int, tuple[str, ...]] = {}
        for scale in _SCALES:
            out[scale] = tuple(
                sorted(
                    t for (g, t, s), r in self.rates.items() if g == "v100" and s == scale and r > 0
                )
            )
        return out

    def job_types(self, scale: int) -> tuple[str, ...]:
        """Job types profiled on V100 at `scale`, sorted (stable input for seeded choices)."""
        return self._types_by_scale[scale]

    def relative_speed(self, job_type: str, scale: int, gpu_key: str) -> float:
        """Rate on `gpu_key` divided by the V100 rate at the same scale; 1.0 when not profiled."""
        ref = self.rates.get(("v100", job_type, scale), 0.0)
        rate = self.rates.get((gpu_key, job_type, scale), 0.0)
        if ref <= 0 or rate <= 0:
            return 1.0
        return rate / ref

    def spread_factor(self, job_type: str, scale: int) -> float:
        """Slowdown (<= 1) of a multi-GPU job whose workers sit on more than one node."""
        if scale == 1:
            return 1.0
        ref = self.rates.get(("v100", job_type, scale), 0.0)
        rate = self.rates.get(("v100_unconsolidated", job_type, scale), 0.0)
        if ref <= 0 or rate <= 0:
            return 1.0
        return min(1.0, rate / ref)
