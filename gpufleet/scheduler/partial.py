"""Phases 2 and 7 of the cycle: gangs left partly bound, completed or restarted whole.

A crash between the bindings (or evictions) of one gang, or a member deleted by hand, leaves
some of a gang's pods bound: they hold GPUs without doing work. The unbound pods are offered to
the core as `<gang>#rest`, on the GPU type the bound pods hold (cluster_view); the core counts the
bound pods' GPUs as taken and places the rest in what is free. When that placement is bound
(phase 8) the gang is whole again and nothing restarts. The gang restarts (its bound pods
deleted, the operator recreates them) when the core says the rest does not fit, when the rest of
a same-node gang would land on another node, or when the rest has not been offered for `grace`
seconds (pods missing, invalid). A rest waiting for preemption victims or a MIG
reconfiguration keeps waiting.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Topology
from gpufleet.model.contract.reasons import SchedulerReason, pending_text
from gpufleet.scheduler import pods
from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.cycle_report import CycleReport
from gpufleet.scheduler.deletions import Deletions
from gpufleet.scheduler.pods import PodFacts

log = logging.getLogger("gpufleet.scheduler")

GANG_INCOMPLETE_REASON = "GangIncomplete"


def partial_gangs(facts: Mapping[str, PodFacts], skip: Collection[str]) -> dict[str, list[str]]:
    """Gangs with some, but fewer than their gang size, live pods bound -> those pods.

    Assumed bindings count as bound, so a gang this process is binding is whole; gangs in
    `skip` (restarting, being rolled back, preempted) are left alone.
    """
    bound: dict[str, list[str]] = defaultdict(list)
    size: dict[str, int] = {}
    for f in facts.values():
        if not f.ours or f.terminal or f.deleting or not f.node or not f.gang_label:
            continue
        bound[f.gang].append(f.key)
        size[f.gang] = f.size
    return {g: keys for g, keys in bound.items() if len(keys) < size[g] and g not in skip}


class PartialGangs:
    """Since when each gang has been partly bound; completes or restarts them."""

    def __init__(
        self, binder: Binder, deletions: Deletions, grace: float, clock: Callable[[], float]
    ) -> None:
        self.binder = binder
        self.deletions = deletions
        self.grace = grace
        self.clock = clock
        self._since: dict[str, float] = {}

    def complete(
        self,
        partial: Mapping[str, list[str]],
        facts: Mapping[str, PodFacts],
        decision: Decision,
        held: Mapping[str, str],
        waiting: Mapping[str, str],
        report: CycleReport,
    ) -> dict[str, str]:
        """Complete partly bound gangs where the core found room for their rest; restart the
        others whole (module docstring). Returns rests that must not be bound (a same-node
        gang's rest placed on another node)."""
        now = self.clock()
        for gid in [g for g in self._since if g not in partial]:
            del self._since[gid]
        placed = {p.gang_id: p for p in decision.placements}
        refused = {p.gang_id: p.message for p in decision.pending}
        blocked: dict[str, str] = {}
        restart: dict[str, str] = {}
        for gid, keys in sorted(partial.items()):
            since = self._since.setdefault(gid, now)
            rest = f"{gid}#rest"
            if rest in placed and rest not in held:
                nodes = {facts[k].node for k in keys if k in facts}
                topology = pods.topology(facts[keys[0]].pod) if keys[0] in facts else None
                where = {r.node for r in placed[rest].replicas}
                if topology is Topology.SAME_NODE and not where <= nodes:
                    blocked[rest] = pending_text(
                        SchedulerReason.GANG, "restarting (rest fits only elsewhere)"
                    )
                    restart[gid] = "its rest fits only on another node than its bound pods"
                    continue
                log.info(
                    "cycle=%d gang %s: %d pod(s) bound, completing it with %d more",
                    report.cycle, gid, len(keys), len(placed[rest].replicas),
                )  # fmt: skip
                report.completed.append(gid)
            elif rest in held or rest in waiting:
                continue
            elif rest in refused:
                restart[gid] = f"the rest of the gang does not fit ({refused[rest]})"
            elif now - since >= self.grace:
                restart[gid] = f"its other pods were not schedulable for {self.grace:.0f}s"
        for gid, why in sorted(restart.items()):
            self._restart(gid, partial[gid], why, report)
        return blocked

    def _restart(self, gid: str, keys: list[str], why: str, report: CycleReport) -> None:
        why = f"{len(keys)} of its pods run without the rest of the gang; {why}"
        log.warning("cycle=%d gang %s: %s; restarting the whole gang", report.cycle, gid, why)
        self.deletions.remember(keys)
        self.binder.delete_pods(keys, GANG_INCOMPLETE_REASON, why)
        report.restarted.append(gid)
        self._since.pop(gid, None)
