"""gpufleet's scheduler on the sandbox: a replica of whole GPUs that spans GPUs still in MIG
mode waits until the MIG manager has turned them whole, also when its first GPU was whole
already (the chaos run's `h100-mig-0: 8 x nvidia.com/gpu in use, 4 allocatable`: the cycle
that asked for the layout bound the replica at once)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpufleet.model.contract import names
from gpufleet.model.migparted import MIG_APPLIED_ANNOTATION
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, training_job, wait_for

NODE = "h100-mig-0"
WHOLE_NODES = ("h100-0", "h100-1", "h100-2")
# GPUs 0-3 whole, 4-7 in MIG (slices free): an 8-GPU replica needs 4-7 turned whole.
HALF = "test-half-mig"
HALF_ENTRIES = [
    {"devices": [0, 1, 2, 3], "mig-enabled": False},
    {"devices": [4, 5, 6, 7], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
]
POOL_CONFIG = "all-balanced"  # the fleet file's config of the h100-mig pool


def _node(kube: Kube) -> dict[str, Any]:
    raw: Any = kube.core.read_node(NODE, _preload_content=False)
    doc: dict[str, Any] = json.loads(raw.data)
    return doc


def _set_configs(kube: Kube, add: bool) -> None:
    cm = kube.core.read_namespaced_config_map(
        names.MIG_CONFIGMAP_NAME, names.MIG_CONFIGMAP_NAMESPACE
    )
    doc = yaml.safe_load(cm.data[names.MIG_CONFIGMAP_KEY])
    if add:
        doc["mig-configs"][HALF] = HALF_ENTRIES
    else:
        doc["mig-configs"].pop(HALF, None)
    cm.data[names.MIG_CONFIGMAP_KEY] = yaml.safe_dump(doc, sort_keys=False)
    kube.core.replace_namespaced_config_map(
        names.MIG_CONFIGMAP_NAME, names.MIG_CONFIGMAP_NAMESPACE, cm
    )


def _apply(kube: Kube, config: str) -> None:
    labels = {names.MIG_CONFIG_LABEL: config, names.MIG_STATE_LABEL: "pending"}
    kube.core.patch_node(NODE, {"metadata": {"labels": labels}})

    def applied() -> bool:
        meta = _node(kube)["metadata"]
        return (
            meta["labels"].get(names.MIG_STATE_LABEL) == "success"
            and meta.get("annotations", {}).get(MIG_APPLIED_ANNOTATION) == config
        )

    wait_for(applied, f"{NODE} on MIG config {config}")


def _cordon(kube: Kube, on: bool) -> None:
    for name in WHOLE_NODES:
        kube.core.patch_node(name, {"spec": {"unschedulable": on or None}})


@pytest.fixture
def half_mig_node(kube: Kube, sandbox: Sandbox, ns: str) -> Iterator[None]:
    """h100-mig-0 with GPUs 0-3 whole and 4-7 in MIG, the other H100 nodes cordoned; all
    given back afterwards (the MIG manager running again)."""
    _set_configs(kube, add=True)
    try:
        _apply(kube, HALF)
        assert _node(kube)["status"]["allocatable"][names.WHOLE_GPU_RESOURCE] == "4"
        _cordon(kube, True)
        yield
    finally:
        kube.clean_namespace(ns)
        if not sandbox.running_components().get("mig-manager", False):
            sandbox.start_component("mig-manager")
        _cordon(kube, False)
        _apply(kube, POOL_CONFIG)
        _set_configs(kube, add=False)


def test_replica_spanning_gpus_being_turned_whole_waits_for_the_mig_manager(
    kube: Kube, sandbox: Sandbox, ns: str, half_mig_node: None
) -> None:
    # The MIG manager is stopped: the layout gpufleet asks for stays unapplied, so a replica
    # bound in the asking cycle would hold 8 whole GPUs on a node that has 4.
    sandbox.stop_component("mig-manager")
    kube.create_job(ns, training_job("wide", 1, 8, "H100-80GB"))

    def asked() -> bool:
        return _node(kube)["metadata"]["labels"][names.MIG_CONFIG_LABEL].startswith("gpufleet-")

    wait_for(asked, f"gpufleet asks {NODE} for GPUs 4-7 whole", 60)
    # Polled while the scheduler runs: the checker for polling loops (a gang between two of
    # its bindings is not a violation yet; an over-committed node is, at once).
    settled = invariants.SettledChecker(kube.core)
    deadline = time.monotonic() + 10  # several cycles of the scheduler
    while time.monotonic() < deadline:
        (pod,) = kube.pods(ns)
        assert not pod["spec"].get("nodeName"), "bound before its GPUs were whole"
        assert settled.check() == []
        time.sleep(1)
    sandbox.start_component("mig-manager")
    wait_for(lambda: kube.phase(ns, "wide") == "Running", "the job Running once applied", 90)
    (pod,) = kube.pods(ns)
    assert pod["spec"]["nodeName"] == NODE
    assert pod["metadata"]["annotations"][names.ASSIGNED_GPUS] == "0,1,2,3,4,5,6,7"
    assert _node(kube)["status"]["allocatable"][names.WHOLE_GPU_RESOURCE] == "8"
    assert invariants.check(kube.core) == []
