"""Loader for the Alibaba GPU cluster trace v2023 (the FGD paper's `openb` pod and node lists).

Columns and quirks are in the project's data reference (data.md §2). Assumptions made here:

* **GPU pods only.** The 1,088 CPU-only pods (`num_gpu == 0`) are dropped: gpufleet schedules
  GPUs, and the simulator does not model CPU or memory (pods' `cpu_milli`/`memory_mib` are kept in
  `TraceJob.extra` but not enforced).
* **Arrival and run time.** `creation_time` is the arrival. The run time is
  `deletion_time - scheduled_time`; the 897 `Pending` pods have no `scheduled_time` and use
  `deletion_time - creation_time` (how long the owner kept them). Run times are at least 1 s and,
  like Philly's, are taken as reference-GPU (V100 = 1.0) seconds: G1/G2/G3 are undisclosed.
* **Fractional GPUs to MIG slices.** A one-GPU pod asking for `gpu_milli < 1000` is quantised up
  to the smallest MIG compute size g in {1, 2, 3, 4} with g/7 >= gpu_milli/1000 (data.md §2.1
  gives the same buckets); a request above 4/7 of a GPU takes a whole GPU.
* **Gang shape.** A pod is a job with one replica; a multi-GPU pod needs all its GPUs on one node.
* **GPU-type constraints.** `gpu_spec` is parsed as a set (lists repeat names) and translated to
  fleet types with `type_map`; names without a mapping are dropped, and a constraint whose names
  all lack a mapping leaves the job unconstrained (recorded in `extra["gpu_spec"]`).
* **Model class.** The trace has no model; as for Philly a Gavel job type is drawn from
  `(seed, pod name)`.
* **Queue.** The QoS class (LS, BE, Burstable, Guaranteed) becomes the queue.
* **`multigpu20` has no times, QoS or type constraints.** Its first 8,152 rows are the default
  list's pods (data.md §2.3) and take their creation, scheduling and deletion times and QoS from
  it; the 172 extra multi-GPU pods arrive at the default list's last creation time and run to its
  last deletion time. Meant for packing replays of random orders re-timed with the list's
  arrival times (the FGD paper's method), where only the sorted arrival times matter.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from gpufleet.model.fleet import FleetSpec, MigSpec, NodePoolSpec
from gpufleet.sim.gavel_profiles import GavelProfile, gavel_scale
from gpufleet.sim.traces.common import TraceJob
from gpufleet.sim.traces.csvrows import Row, read_rows

__all__ = [
    "MIG_COMPUTE_SIZES",
    "POD_COLUMNS",
    "POD_LISTS",
    "load_alibaba_fleet",
    "load_alibaba_pods",
    "parse_seconds_window",
    "quantise_mig",
]

# Pod list variants with arrival times, by the name the CLI accepts.
POD_LISTS: dict[str, str] = {
    "default": "openb_pod_list_default.csv",
    "gpuspec10": "openb_pod_list_gpuspec10.csv",
    "multigpu20": "openb_pod_list_multigpu20.csv",
}
_TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time", "qos")

# Columns the pod loader reads (`gpu_spec` is optional: only the gpuspec lists have it).
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "qos",
    "creation_time",
    "scheduled_time",
    "deletion_time",
)

# MIG compute sizes (sevenths of a GPU) that a fractional request may be rounded up to.
MIG_COMPUTE_SIZES: tuple[int, ...] = (1, 2, 3, 4)


def quantise_mig(gpu_milli: int) -> int | None:
    """Smallest MIG size g (sevenths) covering `gpu_milli`; None when a whole GPU is needed."""
    for g in MIG_COMPUTE_SIZES:
        if gpu_milli * 7 <= g * 1000:
            return g
    return None


def parse_seconds_window(text: str | None) -> tuple[float, float] | None:
    """Parse `START[,END]` in seconds on the trace clock (END defaults to the trace's end)."""
    if not text:
        return None
    lo, _, hi = text.partition(",")
    try:
        start = float(lo) if lo.strip() else 0.0
        end = float(hi) if hi.strip() else math.inf
    except ValueError:
        raise ValueError(f"expected START[,END] in seconds, got {text!r}") from None
    if not 0 <= start < end or math.isnan(end):
        raise ValueError(f"expected 0 <= START < END seconds, got {text!r}")
    return start, end


def load_alibaba_pods(
    trace_dir: str | Path,
    profile: GavelProfile,
    *,
    variant: str = "default",
    jobs: int | None = None,
    seed: int = 0,
    window: tuple[float, float] | None = None,
    arrival_speedup: float = 1.0,
    type_map: Mapping[str, str] | None = None,
    keep: Callable[[TraceJob], bool] | None = None,
) -> list[TraceJob]:
    """GPU pods of a pod list as jobs; `window` is `(start, end)` seconds on the trace clock.

    `keep` is one more filter, asked about each job in the window (the simulator drops, and
    records, jobs its fleet could never hold); `jobs` keeps the first N that pass it.
    """
    if variant not in POD_LISTS:
        raise ValueError(f"unknown Alibaba pod list {variant!r}; choose from {sorted(POD_LISTS)}")
    if arrival_speedup <= 0:
        raise ValueError("arrival_speedup must be positive")
    out: list[TraceJob] = []
    t0: float | None = None
    for row in _pod_rows(Path(trace_dir), variant):
        num_gpu = row.integer("num_gpu", minimum=0)
        if num_gpu == 0:
            continue
        created = row.number("creation_time", minimum=0)
        if window is not None and not window[0] <= created < window[1]:
            continue
        deleted = row.number("deletion_time", minimum=0)
        start = (
            row.number("scheduled_time", minimum=created)
            if row.text("scheduled_time", required=False)
            else created
        )
        if deleted < start:
            raise row.error("deletion_time", f"{deleted:g} is before the pod started ({start:g})")
        milli = row.integer("gpu_milli", minimum=1, maximum=1000)
        mig_g = quantise_mig(milli) if num_gpu == 1 and milli < 1000 else None
        spec = frozenset(s for s in row.text("gpu_spec", required=False).split("|") if s)
        allowed: frozenset[str] | None = None
        if spec:
            allowed = (
                frozenset(type_map[s] for s in spec if s in type_map)
                if type_map is not None
                else spec
            ) or None
        name = row.text("name")
        rng = random.Random(f"alibaba:{seed}:{name}")
        job = TraceJob(
            job_id=name,
            arrival_s=created,  # re-based below on the first kept job
            work_s=max(1.0, deleted - start),
            replicas=1,
            gpus_per_replica=num_gpu,
            model=rng.choice(profile.job_types(gavel_scale(num_gpu))),
            queue=row.text("qos"),
            mig_g=mig_g,
            gpu_milli=milli,
            gpu_types=allowed,
            extra={
                "cpu_milli": row.text("cpu_milli", required=False),
                "memory_mib": row.text("memory_mib", required=False),
                "gpu_spec": "|".join(sorted(spec)),
            },
        )
        if keep is not None and not keep(job):
            continue
        if t0 is None:
            t0 = created
        out.append(replace(job, arrival_s=(created - t0) / arrival_speedup))
        if jobs is not None and len(out) >= jobs:
            break
    return out


def _pod_rows(trace_dir: Path, variant: str) -> Iterator[Row]:
    """The rows of a pod list; a list without times (`multigpu20`) takes each pod's times and
    QoS from the default list (see module docstring)."""
    path = trace_dir / POD_LISTS[variant]
    if variant != "multigpu20":
        yield from read_rows(path, POD_COLUMNS)
        return
    borrowed: dict[str, dict[str, str]] = {}
    last_created = last_deleted = 0.0
    for row in read_rows(trace_dir / POD_LISTS["default"], POD_COLUMNS):
        borrowed[row.text("name")] = {k: row.text(k, required=False) for k in _TIME_COLUMNS}
        last_created = max(last_created, row.number("creation_time", minimum=0))
        last_deleted = max(last_deleted, row.number("deletion_time", minimum=0))
    extra = {
        "creation_time": str(last_created),
        "deletion_time": str(last_deleted),
        "scheduled_time": str(last_created),
        "qos": "BE",
    }
    columns = [c for c in POD_COLUMNS if c not in _TIME_COLUMNS]
    for row in read_rows(path, columns):
        times = borrowed.get(row.text("name"), extra)
        yield Row(row.source, row.line, {**row.values, **times})


def load_alibaba_fleet(
    trace_dir: str | Path,
    type_map: Mapping[str, str],
    *,
    scale: float = 1.0,
    mig_types: Collection[str] = (),
    mig_config: str = "all-balanced",
) -> FleetSpec:
    """The trace's GPU node list as a fleet: one pool per (model, GPUs per node) shape.

    Models are renamed to catalogue types with `type_map` (models missing from it are an error,
    so a silent shrink of the fleet cannot happen). `scale` < 1 keeps that fraction of each
    shape's nodes (at least one), for runs smaller than the trace's 6,212 GPUs. Pools of a
    catalogue type in `mig_types` get MIG (mixed strategy) with the layout `mig_config`.
    """
    path = Path(trace_dir) / "openb_node_list_gpu_node.csv"
    shapes: Counter[tuple[str, int]] = Counter()
    for row in read_rows(path, ("model", "gpu")):
        shapes[(row.text("model"), row.integer("gpu", minimum=1))] += 1
    missing = sorted({m for m, _ in shapes if m not in type_map})
    if missing:
        raise ValueError(f"no catalogue type for Alibaba GPU models: {', '.join(missing)}")
    pools = [
        NodePoolSpec(
            name=f"ali-{model.lower()}-{gpus}g",
            count=max(1, round(count * scale)),
            gpu_type=type_map[model],
            gpus_per_node=gpus,
            mig=MigSpec(config=mig_config) if type_map[model] in mig_types else None,
        )
        for (model, gpus), count in sorted(shapes.items())
    ]
    return FleetSpec(node_pools=pools)
