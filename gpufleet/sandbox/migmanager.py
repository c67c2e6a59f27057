"""A fake NVIDIA MIG manager for the sandbox's simulated nodes.

It honours the MIG-manager label contract: when a node's `nvidia.com/mig.config` names a config
in the `default-mig-parted-config` ConfigMap, it sets `nvidia.com/mig.config.state=pending`,
rewrites the node's whole-GPU and `nvidia.com/mig-<profile>` capacity/allocatable and the
per-profile count labels to match, then sets `state=success`. A config that does not exist or
does not fit the node's GPUs gives `state=failed` and leaves capacity untouched.

Run as `python -m gpufleet.sandbox.migmanager --kubeconfig FILE`; the sandbox starts it.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract.assignment import MigState
from gpufleet.model.contract.names import (
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
)
from gpufleet.model.gfd import hardware_for, mig_count_labels, type_for_product
from gpufleet.model.migparted import MigConfigError, node_resources, resolve_layouts
from gpufleet.sandbox.node_manifests import MIG_APPLIED_ANNOTATION

log = logging.getLogger("gpufleet.migmanager")

# Seconds the manager stays in `pending`, as a real reconfiguration takes a while; the scheduler
# must wait for `success` before using the new slices.
RECONFIGURE_DELAY = 1.0


def plan_update(node: dict[str, Any], configs: dict[str, Any]) -> dict[str, Any] | None:
    """What to write for `node`, or None when there is nothing to do.

    Pure: returns {"state": ..., "labels": {...}, "resources": {...} | None}; `resources` maps
    extended-resource names to counts (0 removes nothing, a missing old profile maps to None).
    """
    meta = node["metadata"]
    labels: dict[str, str] = meta.get("labels") or {}
    wanted = labels.get(MIG_CONFIG_LABEL)
    if wanted is None:
        return None
    applied = (meta.get("annotations") or {}).get(MIG_APPLIED_ANNOTATION)
    if applied == wanted and labels.get(MIG_STATE_LABEL) in (MigState.SUCCESS, MigState.FAILED):
        return None
    gpu_type = type_for_product(labels.get(GPU_PRODUCT_LABEL, ""))
    try:
        if gpu_type is None:
            raise MigConfigError(f"unknown GPU product {labels.get(GPU_PRODUCT_LABEL)!r}")
        hw = hardware_for(gpu_type)
        layouts = resolve_layouts(configs, wanted, hw, int(labels[GPU_COUNT_LABEL]))
    except (MigConfigError, KeyError, ValueError) as exc:
        return {"config": wanted, "state": "failed", "error": str(exc), "resources": None}
    new = node_resources(layouts)
    current = node.get("status", {}).get("capacity", {}) or {}
    # Profiles the old layout advertised and the new one does not are removed (merge-patch null).
    resources: dict[str, int | None] = {k: None for k in current if k.startswith("nvidia.com/mig-")}
    resources |= new
    label_patch: dict[str, str | None] = {
        k: None for k in labels if k.startswith("nvidia.com/mig-") and k.endswith(".count")
    }
    label_patch |= mig_count_labels(new)
    return {"config": wanted, "state": "success", "resources": resources, "labels": label_patch}


class MigManager:
    """Watches nodes and applies MIG config label changes."""

    def __init__(self, api: client.CoreV1Api, namespace: str, configmap: str) -> None:
        self.api = api
        self.namespace = namespace
        self.configmap = configmap

    def _configs(self) -> dict[str, Any]:
        cm = self.api.read_namespaced_config_map(self.configmap, self.namespace)
        doc: dict[str, Any] = yaml.safe_load((cm.data or {}).get("config.yaml", "")) or {}
        return doc

    def _patch_labels(self, name: str, labels: dict[str, Any], applied: str | None = None) -> None:
        body: dict[str, Any] = {"metadata": {"labels": labels}}
        if applied is not None:
            body["metadata"]["annotations"] = {MIG_APPLIED_ANNOTATION: applied}
        self.api.patch_node(name, body)

    def reconcile(self, name: str) -> None:
        """Apply the node's wanted MIG config if it changed."""
        # Read the node afresh: events queued while an earlier change was applied carry stale
        # copies, and acting on those would apply a config twice.
        try:
            node = self.api.api_client.sanitize_for_serialization(self.api.read_node(name))
            configs = self._configs()
        except ApiException as exc:
            log.warning("node %s: cannot read node or MIG configs: %s", name, exc.reason)
            return
        plan = plan_update(node, configs)
        if plan is None:
            return
        if plan["state"] == "failed":
            log.warning("node %s: MIG config %r refused: %s", name, plan["config"], plan["error"])
            self._patch_labels(
                name, {MIG_STATE_LABEL: MigState.FAILED.value}, applied=plan["config"]
            )
            return
        log.info("node %s: applying MIG config %r", name, plan["config"])
        self._patch_labels(name, {MIG_STATE_LABEL: MigState.PENDING.value})
        time.sleep(RECONFIGURE_DELAY)
        counts = {k: (None if v is None else str(v)) for k, v in plan["resources"].items()}
        self.api.patch_node_status(name, {"status": {"capacity": counts, "allocatable": counts}})
        # Say `success` only if nobody asked for another config meanwhile: a success next to a
        # newer config name would tell the scheduler that layout is in place when it is not.
        # The resourceVersion makes the patch fail if the node changed after this read.
        fresh = self.api.read_node(name).metadata
        if (fresh.labels or {}).get(MIG_CONFIG_LABEL) != plan["config"]:
            log.info(
                "node %s: config changed while applying %r; next one follows", name, plan["config"]
            )
            return
        body: dict[str, Any] = {
            "metadata": {
                "resourceVersion": fresh.resource_version,
                "labels": plan["labels"] | {MIG_STATE_LABEL: MigState.SUCCESS.value},
                "annotations": {MIG_APPLIED_ANNOTATION: plan["config"]},
            }
        }
        try:
            self.api.patch_node(name, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            log.info("node %s: changed while applying %r; re-reading", name, plan["config"])

    def run(self) -> None:
        """Watch nodes forever; a full resync on every (re)connect catches missed events."""
        while True:
            try:
                nodes = self.api.list_node(label_selector=MIG_CONFIG_LABEL)
                for item in nodes.items:
                    self.reconcile(item.metadata.name)
                stream = watch.Watch().stream(
                    self.api.list_node,
                    label_selector=MIG_CONFIG_LABEL,
                    resource_version=nodes.metadata.resource_version,
                    timeout_seconds=60,
                )
                for event in stream:
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.reconcile(event["raw_object"]["metadata"]["name"])
            except ApiException as exc:
                log.warning("watch failed (%s); resyncing", exc.reason)
                time.sleep(1)
            except Exception:  # the API server may restart; keep the manager alive
                log.exception("unexpected error; resyncing")
                time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="gpufleet-system")
    parser.add_argument("--configmap", default="default-mig-parted-config")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config.load_kube_config(config_file=args.kubeconfig)
    MigManager(client.CoreV1Api(), args.namespace, args.configmap).run()


if __name__ == "__main__":
    main()
