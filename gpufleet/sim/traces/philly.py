"""Loader for the Microsoft Philly job trace (Pollux/Sia processed copy, `philly.csv`).

Columns and quirks are described in the project's data reference (data.md §1). Assumptions made
here, because the trace lacks the field or is ambiguous:

* **Arrival.** `timestamp` is taken as the job's arrival, as Pollux's generator does; the file is
  not sorted, so rows are sorted by timestamp (ties keep file order).
* **Filtering.** Following Pollux's generator (data.md §1), jobs shorter than 60 s and jobs with
  1,000 GPU-hours or more are dropped by default (both thresholds are parameters). The 65 exact
  duplicate rows are kept as distinct jobs: nothing in the trace says they are repeats.
* **Run time.** `duration` is taken as the job's run time on a reference GPU of relative speed
  1.0 (V100, the normalisation of gpus.md §7.4). Philly's own GPUs were older 12/24 GB parts, so
  this is a convention that fixes the unit of work, not a measurement.
* **Model class.** Philly has no model or GPU type. Each job gets a Gavel job type at its scale
  factor (largest of 1/2/4/8 not above its GPU count), drawn uniformly and deterministically
  from `(seed, row number in the file)`, so a job keeps its class whatever window is selected.
* **Gang shape.** A job of n GPUs is a gang of n one-GPU worker pods (one data-parallel worker
  per GPU); all of them must run for the job to make progress. Jobs of 2-8 GPUs ask for all
  their workers on one node (the `same-node` topology wish): 8 GPUs is the largest server in
  Philly and in the simulated fleets, and Gavel's measurements show spread multi-GPU jobs
  running several times slower. Larger jobs span nodes and state no wish.
* **No GPU-type constraint.** Every job may run on any GPU type.
* **Queue.** The virtual cluster hash (`cluster`) becomes the job's queue.
* **Elasticity.** Philly does not say which jobs could run on fewer GPUs. With
  `elastic_fraction` f > 0, each multi-GPU job is elastic with probability f (drawn from the same
  per-row seed), accepting half its GPUs at half the speed (linear scaling, an assumption).
* **Load.** `arrival_speedup` k divides every inter-arrival time by k (k > 1 raises the load on a
  given fleet); the selected window's first job arrives at t = 0.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from gpufleet.sim.gavel_profiles import GavelProfile, gavel_scale
from gpufleet.sim.traces.common import TraceJob
from gpufleet.sim.traces.csvrows import read_rows

__all__ = ["COLUMNS", "PhillyRow", "load_philly", "parse_window", "read_philly_rows"]

_TS_FORMAT = "%Y-%m-%d %H:%M:%S"

# The columns the loader reads (`gpu_time` is duration x num_gpus and is not needed).
COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")

PhillyRow = tuple[int, datetime, float, int, str]  # (row number, arrival, duration s, gpus, vc)


def _parse_timestamp(text: str) -> datetime:
    return datetime.strptime(text, _TS_FORMAT)


def read_philly_rows(path: str | Path) -> list[PhillyRow]:
    """All data rows, sorted by arrival; a malformed row is an `InputError` naming its line."""
    rows: list[PhillyRow] = []
    for i, row in enumerate(read_rows(path, COLUMNS)):
        rows.append(
            (
                i,
                row.timestamp("timestamp", _parse_timestamp, "YYYY-MM-DD HH:MM:SS"),
                row.number("duration", minimum=0),
                row.integer("num_gpus", minimum=1),
                row.text("cluster"),
            )
        )
    rows.sort(key=lambda r: (r[1], r[0]))
    return rows


def parse_window(text: str | None) -> tuple[datetime | None, datetime | None]:
    """Parse `START[,END]` (ISO dates or datetimes, either may be empty) into bounds."""
    if not text:
        return None, None
    start_s, _, end_s = text.partition(",")
    start = _window_bound(start_s)
    end = _window_bound(end_s)
    if start and end and end <= start:
        raise ValueError(f"window end {end} is not after start {start}")
    return start, end


def _window_bound(text: str) -> datetime | None:
    text = text.strip()
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an ISO date or datetime ({exc})") from None


def load_philly(
    path: str | Path,
    profile: GavelProfile,
    *,
    jobs: int | None = None,
    seed: int = 0,
    window: str | None = None,
    arrival_speedup: float = 1.0,
    min_duration_s: float = 60.0,
    max_gpu_hours: float = 1000.0,
    elastic_fraction: float = 0.0,
    keep: Callable[[TraceJob], bool] | None = None,
) -> list[TraceJob]:
    """Select jobs from the Philly trace; see the module docstring for every assumption.

    `window` is `START[,END]` on the trace's own clock; `jobs` keeps the first N jobs that pass
    the filters inside it; `keep` is one more filter, asked about each job that passed the
    others (the simulator drops, and records, jobs its fleet could never hold).
    """
    if arrival_speedup <= 0:
        raise ValueError("arrival_speedup must be positive")
    start, end = parse_window(window)
    selected: list[tuple[datetime, TraceJob]] = []
    for row_no, ts, duration, gpus, vc in read_philly_rows(path):
        if start is not None and ts < start:
            continue
        if end is not None and ts >= end:
            break
        if duration < min_duration_s or duration * gpus >= max_gpu_hours * 3600.0:
            continue
        rng = random.Random(f"philly:{seed}:{row_no}")
        model = rng.choice(profile.job_types(gavel_scale(gpus)))
        elastic = gpus > 1 and rng.random() < elastic_fraction
        job = TraceJob(
            job_id=f"philly-{row_no:05d}",
            arrival_s=0.0,  # set below, relative to the first selected job
            work_s=duration,
            replicas=gpus,
            gpus_per_replica=1,
            model=model,
            queue=vc,
            min_replicas=gpus // 2 if elastic else None,
            same_node=1 < gpus <= 8,
        )
        if keep is not None and not keep(job):
            continue
        selected.append((ts, job))
        if jobs is not None and len(selected) >= jobs:
            break
    if not selected:
        return []
    t0 = selected[0][0]
    return [
        replace(job, arrival_s=(ts - t0).total_seconds() / arrival_speedup) for ts, job in selected
    ]
