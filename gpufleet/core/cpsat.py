"""CP-SAT placement (placeholder: delegates to greedy until the model lands)."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.core.decision import GangPlacement, SolveStats
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import LayoutCache, place_greedy
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState


def place_cpsat(
    snapshot: Snapshot,
    state: ClusterState,
    pending: Sequence[Gang],
    policy: Policy,
    layouts: LayoutCache,
) -> tuple[dict[str, GangPlacement], SolveStats]:
    return place_greedy(state, pending, policy, layouts), SolveStats("greedy-fallback", "UNKNOWN")
