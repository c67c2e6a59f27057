"""A ServingJob through the fault the chaos benchmark's serving run ended on: a control-plane
outage longer than the node-lifecycle controller's grace.

While kube-apiserver is down no kubelet can renew its node's Lease; when it is back, the
sandbox's real kube-controller-manager finds every node's heartbeats older than its grace (40 s),
sets the nodes' Ready to Unknown and marks every pod of them not Ready (event NodeNotReady on
each pod). The Deployments' ready counts drop to 0 and the job is Degraded. The kubelets are
heard again at once and write their pods' statuses again (a kubelet is the source of truth of
its pods' statuses), so the job must be Ready again within `RECOVERY_S` of the API server's
return, with the same replicas: the outage was shorter than the scheduler's node-failure grace,
so none was replaced.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract.names import SERVINGJOB_LABEL
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for

GROUP, VERSION, PLURAL = "gpufleet.io", "v1alpha1", "servingjobs"
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "registry.example/vllm:1"}]}}
# Longer than the node-lifecycle controller's grace (the sandbox's 40 s).
OUTAGE_S = 50
# The scheduler replaces the replicas of a node not ready for this long: longer than the
# outage, so the replicas stay where they are and only their readiness goes and comes back.
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


def _marked(kube: Kube, ns: str, pods: list[str]) -> bool:
    """Whether the node-lifecycle controller marked every one of `pods` not Ready (its event;
    the pod's condition may already be True again by the time it is read)."""
    try:
        return all(
            any(e.get("reason") == "NodeNotReady" for e in kube.events(ns, name)) for name in pods
        )
    except (ApiException, OSError):
        return False


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


def test_replicas_marked_not_ready_by_an_outage_serve_again_after_it(
    sandbox: Sandbox, kube: Kube, ns: str
) -> None:
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

        sandbox.stop_component("kube-apiserver")
        time.sleep(OUTAGE_S)
        sandbox.start_component("kube-apiserver")
        back = time.monotonic()
        wait_for(
            lambda: _marked(kube, ns, sorted(before)),
            "the replicas marked not Ready by the node-lifecycle controller",
            60,
        )
        wait_for(
            lambda: _recovered(kube, ns, selector),
            f"the replicas Ready and the job Ready within {RECOVERY_S}s of the API server's return",
            max(1.0, RECOVERY_S - (time.monotonic() - back)),
        )
        after = kube.pods(ns, selector)
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in after} == before
    finally:
        with contextlib.suppress(ApiException):
            kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "steady")
        wait_for(lambda: not kube.pods(ns, selector), "the job's pods gone", 60)
