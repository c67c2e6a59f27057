"""The mixed simulator's workload: Philly training jobs and Azure LLM serving traffic, per seed.

Training (`philly_jobs`): from the Philly trace (reference/data.md §1), a seeded start row, then
the next jobs of 1-8 GPUs that ran between `min_duration_s` and `max_duration_s` (the fleet's
nodes have 8 GPUs; longer jobs would outlast the replay). A job of n GPUs is one gang of n
one-GPU workers on one node (Philly's largest server had 8 GPUs); its `duration` is its run time
on the fleet's GPUs (a convention that fixes the unit of work; Philly's GPUs were older). Arrival
gaps are scaled so the jobs arrive over `arrival_window_s`; `at_load` rescales them so the
offered work (GPU-seconds) over the arrival span is a given load on a given number of GPUs, so
that every seed loads the fleet alike (Philly's job sizes vary widely from one start row to the
next).

Serving (`serving_requests`): the Azure LLM 2023 code trace (57.3 min, reference/data.md §3)
replayed hour after hour; each hour of each ServingJob starts at a seeded rotation of the trace
(a cyclic shift), so different ServingJobs do not burst together and consecutive hours are not
copies of each other (no artificial period a forecast could learn).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpufleet.sim.serving.trace import Request, load_azure_code_trace
from gpufleet.sim.traces.philly import read_philly_rows

__all__ = ["TrainingSpec", "at_load", "on_signal_share", "philly_jobs", "serving_requests"]

TRACE_HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class TrainingSpec:
    """One training job: GPUs (one node), run time in seconds, arrival time, and whether it
    checkpoints on SIGTERM (`on_signal`: a preemption loses none of its run time)."""

    id: str
    arrival_s: float
    gpus: int
    duration_s: float
    on_signal: bool = False


def philly_jobs(
    path: str | Path,
    *,
    seed: int,
    count: int,
    arrival_window_s: float,
    min_duration_s: float = 60.0,
    max_duration_s: float = 3600.0,
    max_gpus: int = 8,
) -> tuple[TrainingSpec, ...]:
    """`count` consecutive eligible Philly jobs from a seeded start, arriving over the window."""
    rows = read_philly_rows(path)
    rng = random.Random(f"mixed-philly:{seed}")
    start = rng.randrange(0, max(1, len(rows) - 20 * count))
    picked = []
    for row_no, ts, duration, gpus, _vc in rows[start:]:
        if gpus <= max_gpus and min_duration_s <= duration <= max_duration_s:
            picked.append((row_no, ts, duration, gpus))
        if len(picked) == count:
            break
    if not picked:
        return ()
    t0, t1 = picked[0][1], picked[-1][1]
    span = max(1.0, (t1 - t0).total_seconds())
    scale = arrival_window_s / span
    return tuple(
        TrainingSpec(f"philly-{row_no:05d}", (ts - t0).total_seconds() * scale, gpus, duration)
        for row_no, ts, duration, gpus in picked
    )


def at_load(jobs: Sequence[TrainingSpec], gpus: int, load: float) -> tuple[TrainingSpec, ...]:
    """`jobs` with arrival gaps scaled so their work, GPU-seconds, over the span from the first
    arrival to the last is `load` x `gpus` (the arrival order and relative gaps are kept)."""
    if gpus <= 0 or load <= 0:
        raise ValueError("gpus and load must be > 0")
    if len(jobs) < 2:
        return tuple(jobs)
    work = sum(j.gpus * j.duration_s for j in jobs)
    span = jobs[-1].arrival_s - jobs[0].arrival_s
    scale = work / (load * gpus) / span if span > 0 else 0.0
    t0 = jobs[0].arrival_s
    return tuple(replace(j, arrival_s=(j.arrival_s - t0) * scale) for j in jobs)


def on_signal_share(
    jobs: Sequence[TrainingSpec], share: float, *, seed: int
) -> tuple[TrainingSpec, ...]:
    """`jobs` with a seeded `share` of them (rounded down) checkpointing on SIGTERM. Philly
    records no checkpointing, so which jobs do is an assumption, drawn per seed."""
    if not 0.0 <= share <= 1.0:
        raise ValueError("share must be within [0, 1]")
    rng = random.Random(f"mixed-signal:{seed}")
    picked = set(rng.sample(range(len(jobs)), int(share * len(jobs))))
    return tuple(replace(j, on_signal=i in picked) for i, j in enumerate(jobs))


def serving_requests(path: str | Path, *, seed: int, job: int, hours: int) -> tuple[Request, ...]:
    """The code trace, hour after hour, each hour a seeded rotation (module docstring)."""
    trace = load_azure_code_trace(path)
    rng = random.Random(f"mixed-serving:{seed}:{job}")
    out: list[Request] = []
    for hour in range(hours):
        shift = rng.uniform(0.0, TRACE_HOUR_S)
        for r in trace:
            t = (r.arrival_s + shift) % TRACE_HOUR_S
            out.append(Request(0, hour * TRACE_HOUR_S + t, r.prompt_tokens, r.output_tokens))
    out.sort(key=lambda r: r.arrival_s)
    return tuple(
        Request(i, r.arrival_s, r.prompt_tokens, r.output_tokens) for i, r in enumerate(out)
    )
