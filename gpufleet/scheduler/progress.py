"""Phase 1 of the cycle, for moves: what the scheduler knows of each movable running gang's
progress (the core's `RunProgress`), from its pods and the clock.

- Run time: since the gang's pods started (the latest `status.startTime` of its pods; a moved
  or restarted gang starts counting again, as it resumes from its checkpoint), once each of
  them has started (`model.contract.service.since_last_start`, as the tier's `run_s` does over
  its running pods only).
- Expected remaining time: `core.moves.expected_remaining` over the run lengths of gangs this
  process saw finish (their pods Succeeded), never the gang's own future; with none longer, the
  run time so far (the heavy tail of training jobs).
- Unsaved run time: with `interval=N` checkpoints, the run time since the last multiple of N;
  with checkpoints on a signal, none.
- Restart time: `scheduler.move_restart_s`, plus the grace period of a checkpoint on a signal.
- Recent moves: the move times the operator copies onto the pods (the job's
  `status.moveTimes`), within the last hour: the per-hour limit survives a scheduler restart.

Only gangs whose demand the snapshot carries (`cluster_view`: movable gangs) get progress; an
elastic job's growth units carry the job as their demand and get none.

The admin API's what-if reads a running scheduler's tracker from another thread: it takes a
`copy()` (made under the tracker's lock) and observes and attaches on that, never on the
scheduler's own.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gpufleet.core.borrowing import growth_job
from gpufleet.core.moves import expected_remaining, unsaved_s
from gpufleet.core.snapshot import RunningGang, RunProgress
from gpufleet.model.contract.moves import Checkpoint, read_move_times
from gpufleet.model.contract.service import since_last_start, started_at
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.scheduler import pods
from gpufleet.scheduler.cluster_view import ClusterView
from gpufleet.scheduler.pods import Pod, PodFacts

__all__ = ["ProgressTracker", "run_length"]

_HOUR = timedelta(hours=1)
_KEEP = 2048  # run lengths remembered (the most recent); enough for a stable mean


def run_length(pod: Pod) -> float | None:
    """Seconds a finished pod ran: from its start to its last container's finish."""
    start = started_at(pod)
    ends = [
        t
        for c in (pod.get("status") or {}).get("containerStatuses") or []
        if (t := parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt")))
    ]
    if start is None or not ends:
        return None
    return max(0.0, (max(ends) - start).total_seconds())


def _movable(gang: RunningGang) -> bool:
    return gang.demand is not None and growth_job(gang) is None


class ProgressTracker:
    """Remembers finished gangs' run lengths; gives movable running gangs their progress."""

    def __init__(
        self, restart_s: float, wall: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.restart_s = restart_s
        self.wall = wall
        self._lengths: list[float] = []  # sorted
        self._seen: OrderedDict[str, None] = OrderedDict()  # gang runs counted (by pod uid)
        # Guards the two above: the admin API copies them from its own threads.
        self._lock = threading.Lock()

    @property
    def lengths(self) -> list[float]:
        with self._lock:
            return list(self._lengths)

    def copy(self) -> ProgressTracker:
        """A tracker that knows what this one knows now, and is independent of it."""
        other = ProgressTracker(self.restart_s, self.wall)
        with self._lock:
            other._lengths = list(self._lengths)
            other._seen = OrderedDict(self._seen)
        return other

    def observe(self, facts: Iterable[PodFacts]) -> None:
        """Count the run of each gang whose rank-0 pod is seen Succeeded (once per pod uid)."""
        with self._lock:
            self._observe(facts)

    def _observe(self, facts: Iterable[PodFacts]) -> None:
        for f in facts:
            if not (f.terminal and f.ours and f.gang_label and f.rank[0] == 0):
                continue
            if (f.pod.get("status") or {}).get("phase") != "Succeeded":
                continue
            uid = str(f.pod["metadata"].get("uid", f.key))
            if uid in self._seen:
                continue
            self._seen[uid] = None
            length = run_length(f.pod)
            if length is not None:
                bisect.insort(self._lengths, length)
            if len(self._seen) > _KEEP:
                self._seen.popitem(last=False)
            if len(self._lengths) > _KEEP:  # forget one from the middle: keeps the spread
                del self._lengths[len(self._lengths) // 2]

    def attach(self, view: ClusterView) -> ClusterView:
        """`view` with the progress of every movable running gang (one that carries a demand;
        an elastic job's growth units carry the job's instead, and keep it: rebalance.py)."""
        snapshot = view.snapshot
        if not any(_movable(g) for g in snapshot.running):
            return view
        now = self.wall()
        lengths = self.lengths
        running = tuple(
            self._with_progress(g, view.running_pods, view.facts, now, lengths)
            if _movable(g)
            else g
            for g in snapshot.running
        )
        return replace(view, snapshot=replace(snapshot, running=running))

    def _with_progress(
        self,
        gang: RunningGang,
        members: Mapping[str, tuple[str, ...]],
        facts: Mapping[str, PodFacts],
        now: datetime,
        lengths: list[float],
    ) -> RunningGang:
        gang_pods = [facts[k].pod for k in members.get(gang.id, ()) if k in facts]
        ran = since_last_start(gang_pods, now, each_started=True)
        first = pods.pod_annotations(gang_pods[0]) if gang_pods else {}
        checkpoint = Checkpoint.read(first)
        if checkpoint is None or ran is None:
            # Not every pod has started yet: nothing to weigh a move against.
            return replace(gang, demand=None)
        recent = sum(1 for t in read_move_times(first) if t > now - _HOUR)
        progress = RunProgress(
            expected_remaining_s=expected_remaining(lengths, ran),
            unsaved_s=unsaved_s(ran, checkpoint.interval_s),
            restart_s=self.restart_s + checkpoint.grace_s,
            recent_moves=recent,
        )
        return replace(gang, progress=progress)
