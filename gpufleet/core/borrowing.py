"""Which running gangs a higher-priority gang borrows GPUs from: those that lose the least work.

A serving scale-up (or any higher-priority gang) that finds no free GPUs takes them from
preemptible gangs of strictly lower priority (preempt.py: whole gangs only, never a
non-preemptible one). An elastic job reaches the core as its minimum gang plus one unit per
replica beyond the minimum (`elastic_units`), so taking a unit shrinks the job and the job is
never cut below its minimum: it is either shrunk or preempted whole. Candidates are tried in
`victim_key` order:

1. lower priority first (opportunistic elastic growth is offered at priority 0);
2. then the least **lost work**, GPU-seconds: every GPU of the gang redoes the progress since its
   last checkpoint (`RunProgress.unsaved_s`, its checkpoint age) and waits out the restart
   (`RunProgress.restart_s`: rendezvous, loading the checkpoint, any checkpoint-on-signal grace);
3. then the **longest expected remaining time** first: a gang about to finish frees its GPUs
   soon anyway, so evicting it buys the least GPU time and delays a completion that was near
   (the shortest-remaining-first argument for average completion time);
4. then the lower objective value and the id, for determinism.

A gang whose progress the caller does not know is charged a restart at `DEFAULT_RESTART_S`, no
unsaved progress and no remaining time (so, among equal losses, it goes after the gangs known to
run long). When the borrower's demand ends, nothing here gives GPUs back: the evicted gangs are
pending again and the ordinary placement re-admits them (and regrows elastic units) as GPUs free.

Whether stopping running gangs is worth it at all (`restarts_paid_back`, shared by preemption and
the shrinking of elastic jobs, preempt.py and rebalance.py): the gain in objective rate must pay
back, before each stopped job is expected to end, the work it loses, its value over the restart
plus the run time since its last checkpoint (what moves.py prices in seconds of completion):

    net x T > job value x (restart + unsaved)     for each stopped job with progress

where net is the gain net of the stopped gangs' values and T the job's expected remaining time
(its GPUs would be free then anyway, so the eviction gains nothing past it). A job whose progress
the caller does not know is left to the disruption weight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from gpufleet.core.demand import Gang
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress

__all__ = [
    "DEFAULT_RESTART_S",
    "elastic_units",
    "growth_job",
    "jobs_of",
    "lost_work_gpu_s",
    "restarts_paid_back",
    "victim_key",
]

DEFAULT_RESTART_S = 60.0  # RunProgress's default restart time, for gangs without progress

VictimKey = tuple[int, float, float, float, str]


def _gpus(gang: RunningGang) -> int:
    return sum(len(r.gpus) for r in gang.replicas)


def lost_work_gpu_s(gang: RunningGang) -> float:
    """GPU-seconds lost if `gang` is evicted now: (unsaved progress + restart) x its GPUs."""
    progress = gang.progress
    if progress is None:
        return DEFAULT_RESTART_S * _gpus(gang)
    return (progress.unsaved_s + progress.restart_s) * _gpus(gang)


def growth_job(unit: RunningGang) -> str | None:
    """The elastic job a running unit is growth of (its demand's id, `elastic_units`), or None
    for any other running gang."""
    demand = unit.demand
    if demand is None or demand.grows_from < 1:
        return None
    return demand.id


def job_of(gang: RunningGang) -> str:
    """The job a running gang is part of: the elastic job it is growth of, else its own id."""
    return growth_job(gang) or gang.id


def jobs_of(running: Iterable[RunningGang]) -> dict[str, list[RunningGang]]:
    """Each job's running parts (an elastic job's gang and its growth units), by job."""
    jobs: dict[str, list[RunningGang]] = {}
    for gang in running:
        jobs.setdefault(job_of(gang), []).append(gang)
    return jobs


def restarts_paid_back(
    net: float,
    stopped: Iterable[RunningGang],
    values: Mapping[str, float],
    jobs: Mapping[str, Sequence[RunningGang]],
) -> bool:
    """Whether a gain of `net` (objective rate, net of the stopped gangs' values) pays back the
    work lost by every job `stopped` restarts, before that job is expected to end (module
    docstring). `values`: the running gangs' objective values by id; `jobs`: `jobs_of` the
    running gangs. A job whose progress the caller does not know is left to the disruption
    weight."""
    for job in sorted({job_of(g) for g in stopped}):
        parts = jobs[job]
        progress = next((p.progress for p in parts if p.progress is not None), None)
        if progress is None:
            continue
        restart = progress.restart_s if progress.restart_s > 0 else DEFAULT_RESTART_S
        value = sum(values[p.id] for p in parts)
        if net * progress.expected_remaining_s <= value * (restart + progress.unsaved_s):
            return False
    return True


def victim_key(values: Mapping[str, float]) -> Callable[[RunningGang], VictimKey]:
    """Sort key of preemption candidates (module docstring); `values` are their objective
    values by id."""

    def key(gang: RunningGang) -> VictimKey:
        remaining = gang.progress.expected_remaining_s if gang.progress is not None else 0.0
        return (
            gang.priority,
            round(lost_work_gpu_s(gang), 6),
            -remaining,
            values.get(gang.id, 0.0),
            gang.id,
        )

    return key


def elastic_units(
    gang_id: str,
    gpu_type: str,
    replicas: Sequence[ReplicaPlacement],
    min_replicas: int,
    *,
    priority: int,
    preemptible: bool,
    relative_throughput: float | None = None,
    progress: RunProgress | None = None,
    demand: Gang | None = None,
    queue: str | None = None,
) -> tuple[RunningGang, ...]:
    """A running elastic gang as the core sees it: the first `min_replicas` replicas as the gang
    itself, each replica beyond them as its own preemptible unit `<id>#extra-<i>` at priority 0,
    so a higher-priority gang shrinks the job toward its minimum before it preempts any gang
    whole. The extras carry the gang's progress (a membership change restarts the job's workers
    from their last checkpoint). With the job's `demand` (its scaling curve), extra i carries it
    as one replica growing the job from i (`Gang.grows_from`), so it is worth its curve step
    and a gang of its priority that adds more may take it (rebalance.py); such an extra then
    carries no progress (the gang itself does), so no move rule re-places one replica of a
    job (moves and evacuations re-place gangs with both a demand and progress)."""
    base = max(1, min(min_replicas, len(replicas)))
    units = [
        RunningGang(
            gang_id,
            gpu_type,
            tuple(replicas[:base]),
            priority,
            preemptible,
            relative_throughput,
            progress,
            queue,
        )
    ]
    for i, replica in enumerate(replicas[base:], start=base):
        grows = None
        if demand is not None:
            grows = replace(
                demand, id=gang_id, replicas_min=1, replicas_max=1, priority=0, grows_from=i
            )
        units.append(
            RunningGang(
                f"{gang_id}#extra-{i}",
                gpu_type,
                (replica,),
                0,
                True,
                relative_throughput,
                progress if grows is None else None,
                queue,
                grows,
            )
        )
    return tuple(units)
