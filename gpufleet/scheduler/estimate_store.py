"""The live workload estimate's ConfigMap: where the scheduler keeps the request shapes it has
seen (arrivals.py), so the next process to lead starts from them (issue 14's prior from
history, persisted by the operator).

The ConfigMap holds one key, `arrivals.json`: `ArrivalCounts.to_dict()` (the decay window and
each shape's decayed count). It is written whole (an unconditional update, or a create the first
time); only the Lease holder writes it. A missing, unreadable or invalid ConfigMap means no prior:
the problem is logged and scheduling starts from an empty estimate.
"""

from __future__ import annotations

import json
import logging

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.core.workload import ArrivalCounts

__all__ = ["KEY", "EstimateStore"]

log = logging.getLogger("gpufleet.scheduler")

KEY = "arrivals.json"


class EstimateStore:
    """Reads and writes the counts in ConfigMap `namespace/name`."""

    def __init__(self, core: client.CoreV1Api, namespace: str, name: str) -> None:
        self.core = core
        self.namespace = namespace
        self.name = name

    def load(self) -> ArrivalCounts | None:
        """The counts kept, or None (nothing kept yet, or not readable: logged)."""
        try:
            obj = self.core.read_namespaced_config_map(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("workload estimate %s not read: %s", self._where(), exc.reason)
            return None
        except Exception as exc:  # the API server unreachable: start without a prior
            log.warning("workload estimate %s not read: %s", self._where(), exc)
            return None
        text = (obj.data or {}).get(KEY)
        if not text:
            return None
        try:
            document = json.loads(text)
            if not isinstance(document, dict):
                raise ValueError(f"{KEY} must hold an object")
            return ArrivalCounts.from_dict(document)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            log.error("workload estimate %s ignored: %s", self._where(), exc)
            return None

    def save(self, counts: ArrivalCounts) -> None:
        """Write the counts (raises the API's error; the caller tries again later)."""
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            data={KEY: json.dumps(counts.to_dict(), sort_keys=True)},
        )
        try:
            self.core.replace_namespaced_config_map(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.core.create_namespaced_config_map(self.namespace, body)

    def _where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"
