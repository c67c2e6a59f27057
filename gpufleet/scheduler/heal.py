"""Phase 2 of the cycle: gangs with a pod on a failed or vanished node restart whole.

A node that stays NotReady for `grace` seconds (or disappears) has failed; every pod of a gang
with a member on it is deleted, forced (no kubelet will confirm), so the operator recreates the
whole gang and the scheduler places it again elsewhere.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.cache import CachedState
from gpufleet.scheduler.deletions import Deletions
from gpufleet.scheduler.nodes import node_ready
from gpufleet.scheduler.pods import PodFacts

log = logging.getLogger("gpufleet.scheduler")

NODE_FAILURE_REASON = "NodeFailure"


class NodeHealer:
    """Remembers since when each node is not ready; restarts the gangs of failed nodes."""

    def __init__(
        self,
        binder: Binder,
        deletions: Deletions,
        grace: float,
        clock: Callable[[], float],
    ) -> None:
        self.binder = binder
        self.deletions = deletions
        self.grace = grace
        self.clock = clock
        self._not_ready_since: dict[str, float] = {}

    def _failed_nodes(self, nodes: Mapping[str, Mapping[str, Any]]) -> set[str]:
        """Nodes not ready for `grace` seconds; forgets nodes that are gone."""
        now = self.clock()
        for name, node in nodes.items():
            if node_ready(node):
                self._not_ready_since.pop(name, None)
            else:
                self._not_ready_since.setdefault(name, now)
        failed = {n for n, t in self._not_ready_since.items() if now - t >= self.grace}
        for name in list(self._not_ready_since):
            if name not in nodes:
                self._not_ready_since.pop(name)
        return failed

    def restart_broken(
        self, state: CachedState, facts: Mapping[str, PodFacts], cycle: int
    ) -> list[str]:
        """Delete every pod of gangs that have a pod on a failed or vanished node; the gangs."""
        nodes = {n["metadata"]["name"]: n for n in state.nodes}
        failed_nodes = self._failed_nodes(nodes)
        broken: dict[str, str] = {}
        members: dict[str, list[str]] = defaultdict(list)
        for f in facts.values():
            if not f.ours or f.terminal:
                continue
            members[f.gang].append(f.key)
            where = f.node
            if where is None or f.deleting:
                continue
            if where not in nodes:
                broken[f.gang] = f"node {where} disappeared"
            elif where in failed_nodes:
                broken[f.gang] = f"node {where} is not ready"
        for gid, why in sorted(broken.items()):
            log.warning("cycle=%d gang %s: %s; restarting the whole gang", cycle, gid, why)
            # Forced: no kubelet will confirm the deletion of pods on a dead node.
            self.deletions.remember(members[gid])
            self.binder.delete_pods(members[gid], NODE_FAILURE_REASON, why, force=True)
        return sorted(broken)
