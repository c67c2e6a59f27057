"""Asking a node for new MIG layouts through the NVIDIA MIG-manager label contract.

The core decides per-GPU layouts (profile and start slice per instance). mig-parted configs hold
profile counts per device, so gpufleet writes one config per node and layout into the MIG
manager's ConfigMap (`devices: [i]` entries), records the exact layout on the node as an
annotation, and sets `nvidia.com/mig.config` to the new config's name with the state label at
`pending`; the MIG manager turns the state to `success` when the slices exist. Configs gpufleet
wrote that no node uses any more are pruned on the next write.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import MigState, format_layout, layout_annotation
from gpufleet.model.mig import MigLayout

CONFIG_PREFIX = "gpufleet-"


def config_entries(layouts: Sequence[MigLayout | None]) -> list[dict[str, Any]]:
    """mig-parted entries giving GPU i the layout `layouts[i]` (None = MIG off)."""
    entries: list[dict[str, Any]] = []
    for index, layout in enumerate(layouts):
        if layout is None:
            entries.append({"devices": [index], "mig-enabled": False})
        else:
            counts = dict(sorted(Counter(p.profile for p in layout).items()))
            entries.append({"devices": [index], "mig-enabled": True, "mig-devices": counts})
    return entries


def config_name(node: str, layouts: Sequence[MigLayout | None]) -> str:
    """A stable name per node and layout, so re-asking for the same layout is a no-op."""
    text = json.dumps([None if lay is None else format_layout(lay) for lay in layouts])
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{CONFIG_PREFIX}{node}-{digest}"[:63]


def merged_configs(
    doc: Mapping[str, Any], name: str, entries: list[dict[str, Any]], in_use: Iterable[str]
) -> dict[str, Any]:
    """The ConfigMap document with config `name` added and unused gpufleet configs removed."""
    keep = set(in_use) | {name}
    configs = {
        k: v
        for k, v in (doc.get("mig-configs") or {}).items()
        if not k.startswith(CONFIG_PREFIX) or k in keep
    }
    configs[name] = entries
    return {**doc, "version": doc.get("version", "v1"), "mig-configs": configs}


class MigRequester:
    """Writes a node's new MIG layout request (ConfigMap entry, then node labels)."""

    def __init__(
        self, api: client.CoreV1Api, namespace: str = names.MIG_CONFIGMAP_NAMESPACE
    ) -> None:
        self.api = api
        self.namespace = namespace  # of the MIG manager's ConfigMap

    def request(
        self, node: str, layouts: Sequence[MigLayout | None], configs_in_use: Iterable[str]
    ) -> str:
        name = config_name(node, layouts)
        entries = config_entries(layouts)
        for _ in range(5):  # optimistic concurrency on the shared ConfigMap
            cm = self.api.read_namespaced_config_map(names.MIG_CONFIGMAP_NAME, self.namespace)
            doc = yaml.safe_load((cm.data or {}).get(names.MIG_CONFIGMAP_KEY, "")) or {}
            if (doc.get("mig-configs") or {}).get(name) == entries:
                break
            cm.data = {
                **(cm.data or {}),
                names.MIG_CONFIGMAP_KEY: yaml.safe_dump(
                    merged_configs(doc, name, entries, configs_in_use), sort_keys=False
                ),
            }
            try:
                self.api.replace_namespaced_config_map(names.MIG_CONFIGMAP_NAME, self.namespace, cm)
                break
            except ApiException as exc:
                if exc.status != 409:
                    raise
        else:
            raise RuntimeError("MIG ConfigMap kept changing; try again next cycle")
        self.api.patch_node(
            node,
            {
                "metadata": {
                    "labels": {
                        names.MIG_CONFIG_LABEL: name,
                        names.MIG_STATE_LABEL: MigState.PENDING.value,
                    },
                    "annotations": {names.MIG_LAYOUT_ANNOTATION: layout_annotation(name, layouts)},
                }
            },
        )
        return name
