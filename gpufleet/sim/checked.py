"""A replay's decisions checked as they are made: the core's validator on each of them.

`CheckedPlace` wraps a policy's place function (the core's `place`, for gpufleet) and runs
`core.validate.decision_problems` on every decision with the policy's own service tier settings
(its threshold and its limit on re-evictions), counting what it finds; the replay itself is
unchanged. The queue bench's `--validate` reports the count (bench/queue_bench.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.sim.engine import PlaceFn

__all__ = ["CheckedPlace"]

EXAMPLES = 5  # problems kept in words (the first ones)


@dataclass
class CheckedPlace:
    """`place`, each of its decisions checked (module docstring)."""

    place: PlaceFn
    decisions: int = 0
    problems: int = 0
    examples: list[str] = field(default_factory=list)

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        decision = self.place(snapshot, pending, policy)
        found = decision_problems(
            snapshot,
            pending,
            decision,
            policy.service_tier_gpu_s,
            policy.service_tier_rerun_s,
        )
        self.decisions += 1
        self.problems += len(found)
        self.examples += found[: EXAMPLES - len(self.examples)]
        return decision

    def as_dict(self) -> dict[str, object]:
        return {"decisions": self.decisions, "problems": self.problems, "examples": self.examples}
