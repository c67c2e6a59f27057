"""A ServingJob through the fault the chaos benchmark's serving run ended on: its replicas
marked not Ready by the node-lifecycle controller after a control-plane outage longer than the
controller's grace.

When kube-apiserver comes back after such an outage, kube-controller-manager finds every node's
heartbeats too old, sets the nodes' Ready to Unknown and marks every pod on them not Ready (the
pod's Ready condition False, event NodeNotReady). Whether it does depends on when its monitor
runs against the outage, so the test writes that mark itself, as the controller does, instead of
stopping the API server and hoping for it (an outage run once saw no mark). A kubelet is the
source of truth of its pods' statuses and writes them again; the sandbox's kwok must too: the
job must be Ready again within `RECOVERY_S`, with the same replicas.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract.names import SERVINGJOB_LABEL
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for

GROUP, VERSION, PLURAL = "gpufleet.io", "v1alpha1", "servingjobs"
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "registry.example/vllm:1"}]}}
# The scheduler replaces the replicas of a node not ready for this long: longer than the
# test, so the replicas stay where they are and only their readiness goes and comes back.
NODE_FAILURE_GRACE_S = 300
RECOVERY_S = 60


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    grace = f"--node-failure-grace={NODE_FAILURE_GRACE_S}"
    with OperatorProcess(sandbox.kubeconfig, log, kube.coordination, grace) as proc:
        yield proc


def _phase(kube: Kube, ns: str, name: str) -> str | None:
    try:
        obj: Any = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    except (ApiException, OSError):
        return None  # the API server warming up after its restart
    return (obj.get("status") or {}).get("phase")


def _pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _mark_not_ready(kube: Kube, ns: str, name: str) -> None:
    """The node-lifecycle controller's mark on a pod of a node it found not ready."""
    condition = {"type": "Ready", "status": "False", "reason": "NodeNotReady"}
    kube.core.patch_namespaced_pod_status(name, ns, {"status": {"conditions": [condition]}})


def _recovered(kube: Kube, ns: str, selector: str) -> bool:
    """Every replica Ready again and the job's status saying so (its phase alone may still be
    the Ready of before the outage, until the operator's next pass)."""
    try:
        pods = kube.pods(ns, selector)
        obj: Any = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "steady")
    except (ApiException, OSError):
        return False
    status = obj.get("status") or {}
    ready = [(status.get(pool) or {}).get("readyReplicas") for pool in ("prefill", "decode")]
    return (
        len(pods) == 2
        and all(_pod_ready(p) for p in pods)
        and ready == [1, 1]
        and status.get("phase") == "Ready"
    )


def test_replicas_marked_not_ready_by_an_outage_serve_again_after_it(kube: Kube, ns: str) -> None:
    pool = {"minReplicas": 1, "gpusPerReplica": 1, "gpuTypes": [{"name": "L4"}],
            "template": TEMPLATE}  # fmt: skip
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ServingJob",
        "metadata": {"name": "steady"},
        "spec": {"prefill": pool, "decode": pool, "priority": 500},
    }
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    selector = f"{SERVINGJOB_LABEL}=steady"
    try:
        wait_for(lambda: _phase(kube, ns, "steady") == "Ready", "the job Ready", 90)
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods(ns, selector)}

        for name in sorted(before):
            _mark_not_ready(kube, ns, name)
        wait_for(
            lambda: _recovered(kube, ns, selector),
            f"the replicas Ready and the job Ready within {RECOVERY_S}s of the mark",
            RECOVERY_S,
        )
        after = kube.pods(ns, selector)
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in after} == before
    finally:
        with contextlib.suppress(ApiException):
            kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "steady")
        wait_for(lambda: not kube.pods(ns, selector), "the job's pods gone", 60)
