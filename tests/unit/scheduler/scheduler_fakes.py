"""In-memory stand-ins for the API writers, to test the loop without an API server."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpufleet.model.mig import MigLayout
from gpufleet.scheduler.binder import BindRequest
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.mig import config_name


class FakeBinder:
    """Records writes; `fail` names pods whose binding the 'API server' refuses."""

    def __init__(self) -> None:
        self.bound: dict[str, BindRequest] = {}
        self.deleted: list[tuple[str, str, bool]] = []
        self.marked: dict[str, str] = {}
        self.mark_calls = 0
        self.fail: set[str] = set()

    def bind(self, requests: Iterable[BindRequest]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for r in requests:
            if r.pod_key in self.fail:
                out[r.pod_key] = "409 Conflict"
            else:
                self.bound[r.pod_key] = r
                out[r.pod_key] = None
        return out

    def delete_pods(
        self, keys: Iterable[str], reason: str, message: str, force: bool = False
    ) -> list[str]:
        self.deleted.extend((k, reason, force) for k in keys)
        return []

    def mark_pending(self, messages: Mapping[str, str]) -> None:
        self.mark_calls += 1
        self.marked.update(messages)


class FakeMig:
    def __init__(self) -> None:
        self.requests: list[tuple[str, list[MigLayout | None]]] = []

    def request(self, node: str, layouts: Sequence[MigLayout | None], in_use: Any) -> str:
        self.requests.append((node, list(layouts)))
        return config_name(node, layouts)


def load(cache: SchedulerCache, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
    cache.replace_nodes(nodes)
    cache.replace_pods(pods)
