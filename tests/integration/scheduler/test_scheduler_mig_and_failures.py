"""gpufleet's scheduler on the sandbox, MIG and failures: a MIG job that needs a new layout makes
the scheduler ask the MIG manager (node label contract) and lands on the new slice only after
`state=success`; a gang on a node that vanishes or goes NotReady is restarted elsewhere as a
whole gang, without counting as a failure of the job."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.model.migparted import MIG_APPLIED_ANNOTATION
from gpufleet.sandbox import fleetnodes
from gpufleet.testing import invariants
from gpufleet.testing.node_faults import break_nodes, restore_nodes
from gpufleet.testing.operator import Kube, SettledInvariants, training_job, wait_for


def node_json(kube: Kube, name: str) -> dict[str, Any]:
    raw: Any = kube.core.read_node(name, _preload_content=False)
    doc: dict[str, Any] = json.loads(raw.data)
    return doc


def node_ready(kube: Kube, name: str) -> bool:
    """Ready and free of the taints the node lifecycle controller adds while it is not."""
    try:
        return fleetnodes.usable(node_json(kube, name))
    except Exception:
        return False


def set_mig_config(kube: Kube, node: str, config: str) -> None:
    labels = {names.MIG_CONFIG_LABEL: config, names.MIG_STATE_LABEL: "pending"}
    kube.core.patch_node(node, {"metadata": {"labels": labels}})

    def applied() -> bool:
        meta = node_json(kube, node)["metadata"]
        return (
            meta["labels"].get(names.MIG_STATE_LABEL) == "success"
            and meta.get("annotations", {}).get(MIG_APPLIED_ANNOTATION) == config
        )

    wait_for(applied, f"{node} back on MIG config {config}")


def test_mig_job_triggers_repartitioning_and_lands_on_the_new_slice(kube: Kube, ns: str) -> None:
    # A100-80GB nodes start with MIG off (all-disabled) or with 1g.10gb slices only: a 3g.40gb
    # replica needs a GPU repartitioned first.
    kube.create_job(ns, training_job("mig", 1, gpu_type="A100-80GB", mig_profile="3g.40gb"))
    # A repartitioning first (the MIG manager applies the new layout), then a binding: 90 s as
    # for the relayout in test_mig_relayout_spanning.py; how fast is not what this test measures.
    wait_for(lambda: kube.phase(ns, "mig") == "Running", "MIG job Running", 90)
    (pod,) = kube.pods(ns)
    node_name = pod["spec"]["nodeName"]
    annotations = pod["metadata"]["annotations"]
    assert annotations[names.ASSIGNED_MIG].startswith("3g.40gb@")
    node = node_json(kube, node_name)
    config = node["metadata"]["labels"][names.MIG_CONFIG_LABEL]
    try:
        assert config.startswith("gpufleet-")
        assert node["metadata"]["labels"][names.MIG_STATE_LABEL] == "success"
        assert int(node["status"]["allocatable"]["nvidia.com/mig-3g.40gb"]) >= 1
        layout = json.loads(node["metadata"]["annotations"][names.MIG_LAYOUT_ANNOTATION])
        gpu = annotations[names.ASSIGNED_GPUS]
        assert annotations[names.ASSIGNED_MIG] in layout["gpus"][gpu]
        cm = kube.core.read_namespaced_config_map(
            names.MIG_CONFIGMAP_NAME, names.MIG_CONFIGMAP_NAMESPACE
        )
        assert f"{config}:" in cm.data[names.MIG_CONFIGMAP_KEY]
        status = kube.job(ns, "mig")
        assert status is not None
        assert status["status"]["placement"][0]["migSlice"]["profile"] == "3g.40gb"
        assert invariants.check(kube.core) == []
    finally:
        kube.clean_namespace(ns)
        original = "all-1g.10gb" if node_name.startswith("a100-mig") else "all-disabled"
        set_mig_config(kube, node_name, original)


def _vanish(kube: Kube, node: str) -> dict[str, Any]:
    saved = node_json(kube, node)
    kube.core.delete_node(node)
    return saved


def _restore_vanished(kube: Kube, node: str, saved: dict[str, Any]) -> None:
    meta = saved["metadata"]
    body: Any = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "labels": meta["labels"],
            "annotations": {
                k: v for k, v in meta["annotations"].items() if not k.startswith("kubectl.")
            },
        },
        # The pool's own taints (the GPU Operator's), not those the lifecycle controller added.
        "spec": {
            "taints": [
                t
                for t in saved["spec"].get("taints") or []
                if t["key"] not in fleetnodes.NOT_READY_TAINTS
            ]
        },
        "status": {k: saved["status"][k] for k in ("capacity", "allocatable", "nodeInfo", "phase")},
    }
    wait_for(lambda: not _exists(kube, node), f"{node} deleted")
    kube.core.create_node(body)


def _exists(kube: Kube, node: str) -> bool:
    try:
        kube.core.read_node(node)
        return True
    except Exception:
        return False


def _break_ready(kube: Kube, node: str) -> dict[str, Any]:
    break_nodes(kube.core, [node], "test")
    return {}


def _restore_ready(kube: Kube, node: str, _: dict[str, Any]) -> None:
    restore_nodes(kube.core, [node], report_ready=True)


@pytest.mark.parametrize(
    ("break_node", "restore_node"),
    [
        pytest.param(_vanish, _restore_vanished, id="node-vanishes"),
        pytest.param(_break_ready, _restore_ready, id="node-not-ready"),
    ],
)
def test_gang_on_a_failed_node_moves_as_a_whole(
    kube: Kube, ns: str, break_node: Any, restore_node: Any
) -> None:
    # Two 4-GPU L4 replicas: one per node, so losing one node breaks half the gang.
    kube.create_job(ns, training_job("mover", 2, 4, "L4"))
    wait_for(lambda: kube.phase(ns, "mover") == "Running", "Running")
    before = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in kube.pods(ns)}
    victim = sorted(before.values())[0]
    taints = node_json(kube, victim)["spec"].get("taints")
    saved = break_node(kube, victim)
    watch = SettledInvariants(kube.core)
    try:

        def moved() -> bool:
            assert watch.check() == []
            pods = kube.pods(ns)
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            return (
                len(live) == 2
                and not {p["metadata"]["uid"] for p in live} & set(before)
                and all(p["spec"].get("nodeName") not in (None, victim) for p in live)
                and kube.phase(ns, "mover") == "Running"
            )

        # The node failure grace, the gang's restart, a scheduler cycle and two bindings, each
        # slower on a loaded machine; how fast is not what this test measures.
        wait_for(moved, "both replicas restarted off the failed node", 90)
        status = kube.job(ns, "mover")
        assert status is not None and status["status"]["restarts"] == 0
        assert victim not in {p["node"] for p in status["status"]["placement"]}
        assert invariants.check(kube.core) == []
    finally:
        kube.clean_namespace(ns)
        restore_node(kube, victim, saved)
        wait_for(lambda: node_ready(kube, victim), f"{victim} Ready and untainted again", 90)
        # Later modules share the sandbox: the node is back as its pool made it.
        assert node_json(kube, victim)["spec"].get("taints") == taints
