"""Moves as pods carry them: how a gang saves its progress, when it was moved, and the mark on
the pods the scheduler deletes to move it.

The operator writes the checkpoint mode and the recent move times on every pod it creates
(from the TrainingJob's `spec.checkpoint` and `status.moveTimes`); the scheduler reads them to
price a move (the core's `RunProgress`) and to hold the per-hour limit, and marks the pods it
deletes for a move (`move_marker`), which the operator counts in the job's status. Reading is
lenient, as for the wishes: an unreadable value reads as absent (the gang is not moved).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time, parse_time

__all__ = [
    "Checkpoint",
    "checkpoint_annotations",
    "move_marker",
    "move_times_annotations",
    "moved_at",
    "read_move_times",
]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Every `interval_s` seconds of running, or (`interval_s` None) on SIGTERM within
    `grace_s`."""

    interval_s: int | None = None
    grace_s: int = 0

    def __post_init__(self) -> None:
        if self.interval_s is None and self.grace_s <= 0:
            raise ValueError("a checkpoint on signal needs a grace period > 0")
        if self.interval_s is not None and (self.interval_s <= 0 or self.grace_s):
            raise ValueError("an interval checkpoint needs interval > 0 and no grace period")

    def annotations(self) -> dict[str, str]:
        if self.interval_s is not None:
            return {names.CHECKPOINT: f"interval={self.interval_s}"}
        return {names.CHECKPOINT: f"signal={self.grace_s}"}

    @classmethod
    def read(cls, annotations: Mapping[str, str]) -> Checkpoint | None:
        """The mode a pod's annotations state; None when absent or unreadable."""
        mode, _, raw = annotations.get(names.CHECKPOINT, "").partition("=")
        if not raw.isdigit() or int(raw) <= 0:
            return None
        if mode == "interval":
            return cls(interval_s=int(raw))
        if mode == "signal":
            return cls(grace_s=int(raw))
        return None


def checkpoint_annotations(interval_s: int | None, grace_s: int | None) -> dict[str, str]:
    """The annotation of a job's checkpoint mode (none when it states neither)."""
    if interval_s is not None:
        return Checkpoint(interval_s=interval_s).annotations()
    if grace_s is not None:
        return Checkpoint(grace_s=grace_s).annotations()
    return {}


def move_times_annotations(times: Iterable[datetime]) -> dict[str, str]:
    """The annotation of a gang's recent move times (none when it was never moved)."""
    text = ",".join(format_time(t) for t in times)
    return {names.MOVE_TIMES: text} if text else {}


def read_move_times(annotations: Mapping[str, str]) -> tuple[datetime, ...]:
    """The move times a pod's annotations state (unreadable entries left out)."""
    raw = annotations.get(names.MOVE_TIMES, "")
    return tuple(t for item in raw.split(",") if (t := parse_time(item.strip())) is not None)


def move_marker(at: datetime) -> dict[str, str]:
    """The annotations (a merge patch) the scheduler writes on a pod it deletes for a move."""
    return {names.DISRUPTED_BY: names.MOVED_REASON, names.MOVED_AT: format_time(at)}


def moved_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the move that deletes `pod` began; None when it is not deleted for a move."""
    annotations = pod["metadata"].get("annotations") or {}
    if annotations.get(names.DISRUPTED_BY) != names.MOVED_REASON:
        return None
    return parse_time(annotations.get(names.MOVED_AT))
