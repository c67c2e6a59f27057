"""The placement entry point: `place(snapshot, pending, policy) -> Decision`."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot


def place(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
    """Decide placements, MIG repartitions, preemptions, power caps and pending reasons."""
    raise NotImplementedError("placement engine lands in the next commits")
