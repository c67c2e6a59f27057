"""Request traces for the serving model: the Azure LLM 2023 code trace and synthetic Poisson load.

The Azure file (`AzureLLMInferenceTrace_code.csv`, Splitwise ISCA'24, CC-BY) has the header
`TIMESTAMP,ContextTokens,GeneratedTokens`: invocation time with seven fractional digits and no
time zone, prompt tokens and generated tokens (see the shared `reference/data.md` §3). A file
that is missing, empty or header-only, or a row that is truncated, has text in a numeric column
or a negative token count, is a `TraceError` (an `InputError`) naming the file, line and column.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpufleet.model.input_error import InputError
from gpufleet.sim.traces.csvrows import read_rows

__all__ = ["Request", "TraceError", "load_azure_code_trace", "poisson_requests"]


class TraceError(InputError):
    """A trace file that cannot be read as a request trace, with the offending line."""


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request: arrival in seconds from the trace start, prompt and output length."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


def _parse_time(text: str) -> datetime:
    # strptime's %f takes at most 6 digits; the file has 7 (100 ns): drop the last one.
    text = text.strip()
    if "." in text:
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
        return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


def load_azure_code_trace(
    path: str | Path,
    *,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: float | None = None,
) -> tuple[Request, ...]:
    """Read the Azure LLM 2023 trace, arrivals relative to its first request.

    `start_s`/`duration_s` cut a slice of the original timeline (before compression);
    `time_scale` > 1 compresses time (arrival / time_scale), e.g. for a short demo. The slice is
    re-based so its first request arrives at 0.
    """
    if time_scale <= 0:
        raise ValueError("time_scale must be positive")
    rows: list[tuple[float, int, int]] = []
    t0: datetime | None = None
    try:
        for row in read_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
            t = row.timestamp("TIMESTAMP", _parse_time, "YYYY-MM-DD HH:MM:SS[.fraction]")
            prompt = row.integer("ContextTokens", minimum=0)
            output = row.integer("GeneratedTokens", minimum=1)
            t0 = t0 or t
            rows.append(((t - t0).total_seconds(), prompt, output))
    except InputError as exc:
        raise TraceError(exc.problem, source=exc.source, line=exc.line, field=exc.field) from None
    rows.sort(key=lambda r: r[0])
    end = math.inf if duration_s is None else start_s + duration_s
    kept = [r for r in rows if start_s <= r[0] < end]
    base = kept[0][0] if kept else 0.0
    return tuple(
        Request(i, (t - base) / time_scale, max(1, p), o) for i, (t, p, o) in enumerate(kept)
    )


def poisson_requests(
    rate_per_s: float | Iterable[tuple[float, float]],
    duration_s: float,
    *,
    prompt_tokens: int = 1024,
    output_tokens: int = 64,
    seed: int = 0,
) -> tuple[Request, ...]:
    """Synthetic Poisson arrivals with fixed lengths; deterministic for a seed.

    `rate_per_s` is a constant or a piecewise-constant schedule of `(start_s, rate)` pairs.
    """
    schedule = (
        [(0.0, float(rate_per_s))]
        if isinstance(rate_per_s, int | float)
        else sorted((float(a), float(b)) for a, b in rate_per_s)
    )
    rng = random.Random(seed)
    out: list[Request] = []
    for k, (start, rate) in enumerate(schedule):
        stop = schedule[k + 1][0] if k + 1 < len(schedule) else duration_s
        t = start
        while rate > 0:
            t += rng.expovariate(rate)
            if t >= min(stop, duration_s):
                break
            out.append(Request(len(out), t, prompt_tokens, output_tokens))
    return tuple(out)
