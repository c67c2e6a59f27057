"""Move decisions: re-place a running gang on a faster GPU type when one is free.

A gang that started on a slow type keeps it until it ends unless something moves it; a few long
jobs on slow GPUs then set a fleet's average completion time (Gavel re-decides every round for
this reason). Here a move is a whole-gang restart on a new placement, taken only when the
expected gain exceeds its price, both in seconds of the job's completion:

    stay  = R                                   (R: expected remaining time at the current speed)
    move  = restart + (R + unsaved) x v0 / v1   (v0, v1: speeds on the current and the new type)
    gain  = stay - move

where `unsaved` is the run time since the job's last checkpoint (redone after the restart) and
`restart` the time to stop, reschedule and resume it (including a checkpoint-on-signal grace
period). The caller estimates R from what it has seen (`expected_remaining`: completed jobs'
lengths, never the job's own future) and counts recent moves; the rule allows at most
`max_per_hour` per gang. Moves use only capacity this decision leaves free, after every
pending gang was placed: a move never takes GPUs from waiting work. The gangs with the largest
gain go first.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.core.decision import Move
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import Memo, commit, plan_gang, usable_types
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import RunningGang
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import base_throughput

__all__ = ["expected_remaining", "move_gain_s", "plan_moves"]


def move_gain_s(remaining_s: float, unsaved_s: float, restart_s: float, speedup: float) -> float:
    """Seconds of completion time a move saves (negative: it costs), see module docstring."""
    return remaining_s - (restart_s + (remaining_s + unsaved_s) / speedup)


def expected_remaining(completed: Sequence[float], attained: float) -> float:
    """Expected remaining length of a job that has run `attained`, from the lengths of
    completed jobs (sorted ascending): the mean of `length - attained` over those longer than
    it; with none longer, `attained` itself (the heavy tail of training jobs: the longer a job
    has run, the longer it is expected to run, as Tiresias's Gittins index uses)."""
    start = bisect.bisect_right(completed, attained)
    longer = completed[start:]
    if not longer:
        return attained
    return sum(longer) / len(longer) - attained


@dataclass(frozen=True, slots=True)
class _Candidate:
    gain_s: float
    gang: RunningGang
    demand: Gang  # the gang's demand at its current replica count
    gpu_type: str


def plan_moves(
    state: ClusterState, evicted: frozenset[str], policy: Policy, memo: Memo
) -> list[Move]:
    """Moves worth their price on the capacity `state` has free; mutates `state` (each move
    takes its new GPUs and frees its old ones)."""
    rule = policy.moves
    if not rule.enabled:
        return []
    catalog = state.catalog
    out: list[Move] = []
    moved: set[str] = set()
    while True:
        best: _Candidate | None = None
        for running in state.snapshot.running:
            progress, demand = running.progress, running.demand
            if running.id in evicted or running.id in moved or progress is None or demand is None:
                continue
            if progress.recent_moves >= rule.max_per_hour:
                continue
            here = base_throughput(demand, catalog[running.gpu_type])
            fixed = replace(
                demand, replicas_min=len(running.replicas), replicas_max=len(running.replicas)
            )
            for t in usable_types(state, fixed, policy, memo):
                speedup = base_throughput(demand, catalog[t]) / here
                if speedup <= 1.0 + rule.min_speedup:
                    continue
                gain = move_gain_s(
                    progress.expected_remaining_s, progress.unsaved_s, progress.restart_s, speedup
                )
                if gain <= rule.min_gain_s or (best is not None and gain <= best.gain_s):
                    continue
                if plan_gang(state, fixed, t, policy, memo) is not None:
                    best = _Candidate(gain, running, fixed, t)
        if best is None:
            return out
        plan = plan_gang(state, best.demand, best.gpu_type, policy, memo)
        assert plan is not None  # found free a moment ago, nothing changed since
        placement = commit(state, plan, policy)
        for replica in best.gang.replicas:
            state.release(replica)
        moved.add(best.gang.id)
        out.append(Move(best.gang.id, best.gang.gpu_type, placement, best.gain_s))
