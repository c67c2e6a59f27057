"""Fakes for the unit tests of the invariant checkers (`gpufleet.testing.invariants`)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any


class Reads:
    """`read_cluster`'s two lists: the `nodes`, and one list of pods per read (the last one
    repeats)."""

    def __init__(self, *states: list[dict[str, Any]], nodes: tuple[dict[str, Any], ...] = ()):
        self.states = list(states)
        self.nodes = list(nodes)
        self.reads = 0

    def list_node(self, **_: Any) -> Any:
        return SimpleNamespace(data=json.dumps({"items": self.nodes}).encode())

    def list_pod_for_all_namespaces(self, **_: Any) -> Any:
        items = self.states[min(self.reads, len(self.states) - 1)]
        self.reads += 1
        return SimpleNamespace(data=json.dumps({"items": items}).encode())


class Clock:
    """A clock the test moves: `sleep` advances it."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
