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
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from gpufleet.model.input_error import InputError

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
        """Parse `gavel_simulation_throughputs.json` (second-level keys are Python tuple reprs).

        A missing or malformed file is an `InputError` naming the file and the bad entry.
        """
        source = Path(path)
        try:
            raw = json.loads(source.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError("file not found", source=source) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read: {exc}", source=source) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg}", source=source, line=exc.lineno) from None
        if not isinstance(raw, dict) or not raw:
            raise InputError("expected an object of GPU keys", source=source)
        rates: dict[tuple[str, str, int], float] = {}
        for gpu_key, entries in raw.items():
            if not isinstance(entries, dict):
                raise InputError("expected an object of job entries", source=source, field=gpu_key)
            for job_key, partners in entries.items():
                rates[_rate_key(source, gpu_key, job_key)] = _isolated_rate(
                    source, f"{gpu_key}/{job_key}", partners
                )
        if "v100" not in {g for g, _, _ in rates}:
            raise InputError("no 'v100' entries (the reference GPU)", source=source)
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


def _rate_key(source: Path, gpu_key: str, job_key: str) -> tuple[str, str, int]:
    """`(gpu_key, job type, scale)` from a key such as `"('ResNet-50 (batch size 64)', 1)"`."""
    try:
        job_type, scale = ast.literal_eval(job_key)
        return gpu_key, str(job_type), int(scale)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise InputError(
            "expected a key of the form \"('<job type>', <scale>)\"",
            source=source,
            field=f"{gpu_key}/{job_key}",
        ) from None


def _isolated_rate(source: Path, field: str, partners: object) -> float:
    """The isolated (`"null"` partner) rate of one entry, a finite number >= 0."""
    value = partners.get("null") if isinstance(partners, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InputError(
            f"expected a rate >= 0 under 'null', got {value!r}", source=source, field=field
        )
    if not math.isfinite(value):
        raise InputError(f"rate {value!r} is not finite", source=source, field=field)
    return float(value)
