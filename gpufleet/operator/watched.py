"""Objects of one kind that carry a label, kept current by a watch the composition root runs
(in `gpufleet operator`, the ServingJobs' Deployments): the ServingJob pass's check reads them
instead of listing them from the API server every tick."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["LabelledObjects"]

Obj = dict[str, Any]


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "default", meta["name"]


class LabelledObjects:
    """The watched objects carrying `label`, by namespace and label value. `replace` takes a
    list's items, `event` a watch event; `labelled` is a `ports.Labelled`."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], Obj] = {}

    def replace(self, items: list[Obj]) -> None:
        with self._lock:
            self._objects = {_key(o): o for o in items}

    def event(self, kind: str, obj: Obj) -> None:
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(_key(obj), None)
            else:
                self._objects[_key(obj)] = obj

    def labelled(self, namespace: str, value: str) -> list[Obj]:
        """The objects in `namespace` labelled `<label>=<value>`, by name."""
        with self._lock:
            found = [
                o
                for (ns, _), o in self._objects.items()
                if ns == namespace and (o["metadata"].get("labels") or {}).get(self.label) == value
            ]
        return sorted(found, key=lambda o: str(o["metadata"]["name"]))
