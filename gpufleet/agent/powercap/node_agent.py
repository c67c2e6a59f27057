"""The node agent's loop: watch the pods of one node, apply their GPUs' caps, report them.

It lists the node's pods, then watches them; every change re-derives the caps each GPU should
have (`desired.py`) and hands the GPUs whose cap changed to the limiter. What is in force is
recorded on the node (`gpufleet.model.contract.power`), written only when it changed; a
restarted agent reads that record back, so caps it applied before are removed once no pod
needs them. The watch is re-listed every `relist_s` (and after any error), so a missed event
costs at most that long.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client, watch

from gpufleet.agent.powercap.desired import desired_caps
from gpufleet.agent.powercap.limiters import PowerLimiter
from gpufleet.model.contract import names
from gpufleet.model.contract.power import applied_caps, format_applied_caps

log = logging.getLogger("gpufleet.nodeagent")

__all__ = ["NodeAgent"]

Obj = Mapping[str, Any]


class NodeAgent:
    def __init__(
        self,
        api: client.CoreV1Api,
        node: str,
        limiter: PowerLimiter,
        relist_s: float = 30.0,
    ) -> None:
        self.api = api
        self.node = node
        self.limiter = limiter
        self.relist_s = relist_s
        self.applied: dict[int, float] = {}  # GPU -> watts in force
        self._reported: dict[int, float] = {}
        self._watch: watch.Watch | None = None

    def load_record(self) -> None:
        """The caps an earlier run applied, as it recorded them on the node."""
        meta = self.api.read_node(self.node).metadata
        self.applied = applied_caps((meta.annotations if meta else None) or {})
        self._reported = dict(self.applied)

    def reconcile(self, pods: Iterable[Obj]) -> None:
        """Apply the caps the pods ask for; record on the node what is in force."""
        desired = desired_caps(pods)
        for gpu in sorted(set(self.applied) | set(desired)):
            want = desired.get(gpu)
            if self.applied.get(gpu) == want:
                continue
            try:
                got = self.limiter.apply(gpu, want)
            except Exception as exc:  # the next change or re-list tries again
                log.warning("GPU %d: cannot set the cap to %s W: %s", gpu, want, exc)
                continue
            if got is None:
                self.applied.pop(gpu, None)
            else:
                self.applied[gpu] = got
            log.info("GPU %d: cap %s", gpu, "removed" if got is None else f"{got:.0f} W")
        if self.applied != self._reported:
            text = format_applied_caps(self.applied) if self.applied else None
            self.api.patch_node(
                self.node, {"metadata": {"annotations": {names.APPLIED_POWER_CAPS: text}}}
            )
            self._reported = dict(self.applied)

    def run(self, stop: threading.Event) -> None:
        """List, reconcile, watch and reconcile on every event, until `stop`."""
        selector = f"spec.nodeName={self.node}"
        while not stop.is_set():
            try:
                raw: Any = self.api.list_pod_for_all_namespaces(
                    field_selector=selector, _preload_content=False
                )
                listed = json.loads(raw.data)
                pods = {p["metadata"]["uid"]: p for p in listed.get("items") or ()}
                self.reconcile(pods.values())
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                events = self._watch.stream(  # type: ignore[no-untyped-call]
                    self.api.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=max(1, int(self.relist_s)),
                )
                for event in events:
                    if stop.is_set():
                        break
                    pod = event["raw_object"]  # the API's own (camelCase) shape
                    if event["type"] == "DELETED":
                        pods.pop(pod["metadata"]["uid"], None)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        pods[pod["metadata"]["uid"]] = pod
                    else:  # ERROR (e.g. the resource version expired): list again
                        break
                    self.reconcile(pods.values())
            except Exception as exc:
                log.warning("watching the pods of %s failed (%s); listing again", self.node, exc)
                stop.wait(1.0)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]
