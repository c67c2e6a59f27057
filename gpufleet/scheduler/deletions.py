"""Pods this process deleted, remembered until the watch shows them gone.

Their gangs are settling: neither partly bound (to complete) nor to restart again, and not
offered to the core until the operator has recreated their pods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpufleet.scheduler.pods import PodFacts


class Deletions:
    """Pod key -> until when to wait for the watch to show it deleting or gone."""

    def __init__(self, clock: Callable[[], float], linger: float) -> None:
        self.clock = clock
        self.linger = linger
        self._until: dict[str, float] = {}

    def remember(self, keys: Sequence[str]) -> None:
        until = self.clock() + self.linger
        self._until.update(dict.fromkeys(keys, until))

    def gangs_settling(self, facts: Mapping[str, PodFacts]) -> set[str]:
        """Gangs with a pod this process is deleting whose deletion the watch has not shown
        yet; forgets pods the watch shows deleting or gone, or waited for long enough."""
        now = self.clock()
        out: set[str] = set()
        for key, until in list(self._until.items()):
            f = facts.get(key)
            if until < now or f is None or f.deleting:
                del self._until[key]
            else:
                out.add(f.gang)
        return out
