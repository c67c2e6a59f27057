"""What the admin API decides and changes, against the sandbox with the operator running:

- what-if agrees with the scheduler: the same manifest, then applied, lands on the same GPU type
  and count, and a high-priority one preempts exactly the victims the what-if named;
- what-if takes the scheduler's snapshot steps: a gang a PodDisruptionBudget protects is never
  named as a victim (it used to be), and the scheduler, given the job, preempts the victim the
  what-if named instead;
- what-if decides with the cluster's GPUQueues, as the scheduler does: a job in a queue whose
  quota of its type is 0 (and that may not borrow) would wait with QuotaExceeded naming the
  queue, while the same job in a queue with room would run; a job naming a queue that does not
  exist would wait with QueueNotFound;
- drain keeps a PodDisruptionBudget: a gang the budget protects stays bound and is reported
  blocked, while an unprotected gang is evicted whole and placed again on another node;
- a MIG layout change is refused with 409 while the node's GPUs are in use, and with
  drain=true the gang is moved off and the MIG manager applies the layout.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from admin_helpers import AdminApi, mig_configs, restore_mig_configs
from kubernetes import client

from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import assigned_gpus, assigned_type
from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, training_job, wait_for


def _running(kube: Kube, ns: str, job: str, replicas: int) -> list[dict[str, Any]]:
    return wait_for(
        lambda: (pods := kube.bound(ns, job)) and len(pods) == replicas and pods,
        f"{job} bound",
        90,
    )


def _gpu_count(pods: list[dict[str, Any]]) -> int:
    return sum(len(assigned_gpus(p["metadata"]["annotations"]) or ()) for p in pods)


def _preempted(kube: Kube, ns: str, job: str) -> bool:
    condition = kube.condition(ns, job, "Preempted")
    return bool(condition and condition["status"] == "True")


def test_whatif_agrees_with_the_scheduler(kube: Kube, ns: str, admin: tuple[AdminApi, str]) -> None:
    api, token = admin
    # Every T4 (4 nodes x 4) is held by a preemptible gang; priorities make the victim unique.
    for i in range(4):
        kube.create_job(ns, training_job(f"low-{i}", 1, 4, "T4", priority=10 + i))
    for i in range(4):
        _running(kube, ns, f"low-{i}", 1)
    cases = [
        training_job("urgent", 1, 4, "T4", priority=500),
        training_job("spread", 2, 1, "L4"),
    ]
    with api.client(token) as http:
        answers = {}
        for manifest in cases:
            manifest["metadata"]["namespace"] = ns
            response = http.post("/api/v1/whatif", json=manifest)
            assert response.status_code == 200, response.text
            answers[manifest["metadata"]["name"]] = response.json()["gangs"][0]
    urgent = answers["urgent"]
    assert urgent["placed"] and [v["job"]["name"] for v in urgent["preempts"]] == ["low-0"]
    for manifest in cases:
        kube.create_job(ns, manifest)
    for manifest in cases:
        name = manifest["metadata"]["name"]
        answer = answers[name]
        pods = _running(kube, ns, name, len(answer["replicas"]))
        types = {assigned_type(p["metadata"]["annotations"]) for p in pods}
        assert types == {answer["gpuType"]}, name
        assert _gpu_count(pods) == answer["gpus"], name
    victims = {v["job"]["name"] for v in urgent["preempts"]}
    wait_for(lambda: all(_preempted(kube, ns, v) for v in victims), "victims preempted", 60)
    assert {f"low-{i}" for i in range(4) if _preempted(kube, ns, f"low-{i}")} == victims


def _budget(kube: Kube, ns: str, job: str, pods: int) -> None:
    """A PodDisruptionBudget keeping all `pods` of TrainingJob `job`, once the disruption
    controller has counted them (no disruption allowed)."""
    policy = client.PolicyV1Api(kube.core.api_client)
    body: Any = {
        "metadata": {"name": job},
        "spec": {
            "minAvailable": pods,
            "selector": {"matchLabels": {"gpufleet.io/trainingjob": job}},
        },
    }
    policy.create_namespaced_pod_disruption_budget(ns, body)
    wait_for(
        lambda: (
            (status := policy.read_namespaced_pod_disruption_budget(job, ns).status)
            and status.current_healthy == pods
            and status.disruptions_allowed == 0
        ),
        "the budget counted",
        60,
    )


def test_whatif_never_names_a_victim_a_budget_protects(
    kube: Kube, ns: str, admin: tuple[AdminApi, str]
) -> None:
    api, token = admin
    # Every T4 (4 nodes x 4) is held by a preemptible gang; low-0, the lowest priority, is
    # the victim but for its budget (minAvailable 1 of its one pod: no disruption allowed).
    for i in range(4):
        kube.create_job(ns, training_job(f"low-{i}", 1, 4, "T4", priority=10 + i))
    for i in range(4):
        _running(kube, ns, f"low-{i}", 1)
    _budget(kube, ns, "low-0", 1)
    urgent = training_job("urgent", 1, 4, "T4", priority=500)
    urgent["metadata"]["namespace"] = ns
    with api.client(token) as http:
        response = http.post("/api/v1/whatif", json=urgent)
    assert response.status_code == 200, response.text
    answer = response.json()["gangs"][0]
    assert answer["placed"] and [v["job"]["name"] for v in answer["preempts"]] == ["low-1"]
    # The scheduler agrees: its eviction of low-0 would be refused; it preempts low-1 only.
    kube.create_job(ns, urgent)
    _running(kube, ns, "urgent", 1)
    wait_for(lambda: _preempted(kube, ns, "low-1"), "low-1 preempted", 60)
    assert not _preempted(kube, ns, "low-0")
    assert {p["metadata"]["uid"] for p in kube.bound(ns, "low-0")}, "low-0 still bound"


def _queue(name: str, t4: int, **quota: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {"quotas": [{"gpuType": "T4", "nominal": t4, **quota}]},
    }


@pytest.fixture
def queues(kube: Kube, sandbox: Sandbox) -> Iterator[tuple[str, str]]:
    """Two GPUQueues: one with no T4 quota that may not borrow, one with room for 4 T4."""
    suffix = uuid.uuid4().hex[:6]
    closed, roomy = f"closed-{suffix}", f"roomy-{suffix}"
    for body in (_queue(closed, 0, borrowingLimit=0), _queue(roomy, 4)):
        kube.custom.create_cluster_custom_object(API_GROUP, API_VERSION, "gpuqueues", body)
    yield closed, roomy
    sandbox.kubectl("delete", "gq", closed, roomy, "--ignore-not-found", check=False)


def _whatif_gang(http: httpx.Client, ns: str, name: str, queue: str) -> dict[str, Any]:
    manifest = training_job(name, 1, 1, "T4")
    manifest["metadata"]["namespace"] = ns
    manifest["spec"]["queue"] = queue
    response = http.post("/api/v1/whatif", json=manifest)
    assert response.status_code == 200, response.text
    gang: dict[str, Any] = response.json()["gangs"][0]
    return gang


def _waiting(gang: dict[str, Any]) -> tuple[str, str]:
    waiting = gang.get("waiting") or {}
    return str(waiting.get("reason")), str(waiting.get("message"))


def test_whatif_decides_with_the_queues(
    kube: Kube, ns: str, admin: tuple[AdminApi, str], queues: tuple[str, str]
) -> None:
    api, token = admin
    closed, roomy = queues
    with api.client(token) as http:
        # The API's cache learns of the new queues from its watch: until then QueueNotFound.
        held = wait_for(
            lambda: (
                (g := _whatif_gang(http, ns, "held", closed))
                and _waiting(g)[0] != "QueueNotFound"
                and g
            ),
            f"the admin API seeing queue {closed}",
            30,
        )
        assert not held["placed"] and not held["replicas"], held
        reason, message = _waiting(held)
        assert reason == "QuotaExceeded" and closed in message, held
        runs = _whatif_gang(http, ns, "runs", roomy)
        assert runs["placed"] and runs["gpuType"] == "T4" and runs["gpus"] == 1, runs


def test_whatif_for_a_missing_queue(kube: Kube, ns: str, admin: tuple[AdminApi, str]) -> None:
    api, token = admin
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    with api.client(token) as http:
        gang = _whatif_gang(http, ns, "lost", missing)
    assert not gang["placed"], gang
    reason, message = _waiting(gang)
    assert reason == "QueueNotFound" and missing in message, gang


def test_drain_keeps_a_disruption_budget(kube: Kube, ns: str, admin: tuple[AdminApi, str]) -> None:
    api, token = admin
    kube.create_job(ns, training_job("guarded", 2, 4, "T4"))  # two whole T4 nodes
    kube.create_job(ns, training_job("movable", 1, 4, "L4"))  # one whole L4 node
    guarded = _running(kube, ns, "guarded", 2)
    movable = _running(kube, ns, "movable", 1)
    _budget(kube, ns, "guarded", 2)
    guarded_node = guarded[0]["spec"]["nodeName"]
    movable_node = movable[0]["spec"]["nodeName"]
    try:
        with api.client(token) as http:
            blocked = http.post(f"/api/v1/nodes/{guarded_node}/drain").json()
            moved = http.post(f"/api/v1/nodes/{movable_node}/drain").json()
        (gang,) = [g for g in blocked["gangs"] if g["gang"] == f"{ns}/guarded"]
        assert gang["outcome"] == "blocked" and "PodDisruptionBudget" in gang["reason"]
        assert sorted(gang["pods"]) == [f"{ns}/guarded-worker-0", f"{ns}/guarded-worker-1"]
        assert not blocked["complete"] and blocked["unschedulable"]
        (gang,) = [g for g in moved["gangs"] if g["gang"] == f"{ns}/movable"]
        assert gang["outcome"] == "evicted" and moved["complete"]
        # The budget held: both guarded pods are still bound where they were.
        assert {p["metadata"]["uid"] for p in kube.bound(ns, "guarded")} == {
            p["metadata"]["uid"] for p in guarded
        }
        # The movable gang runs again, on another node.
        again = wait_for(
            lambda: [
                p for p in kube.bound(ns, "movable")
                if p["metadata"]["uid"] != movable[0]["metadata"]["uid"]
            ],
            "movable placed again",
            90,
        )  # fmt: skip
        assert again[0]["spec"]["nodeName"] != movable_node
    finally:
        with api.client(token) as http:
            for node in {guarded_node, movable_node}:
                assert http.post(f"/api/v1/nodes/{node}/uncordon").status_code == 200


def test_mig_layout_needs_a_drain_while_busy(
    kube: Kube, ns: str, admin: tuple[AdminApi, str]
) -> None:
    api, token = admin
    layouts = mig_configs(kube)
    kube.create_job(ns, training_job("slice", 1, gpu_type="A100-80GB", mig_profile="1g.10gb"))
    (pod,) = _running(kube, ns, "slice", 1)
    node = pod["spec"]["nodeName"]
    labels = kube.core.read_node(node).metadata.labels
    before = labels[names.MIG_CONFIG_LABEL]
    wanted = "all-3g.40gb" if before != "all-3g.40gb" else "all-1g.10gb"
    with api.client(token) as http:
        refused = http.put(f"/api/v1/nodes/{node}/mig-layout", json={"layout": wanted})
        assert refused.status_code == 409, refused.text
        assert f"{ns}/slice" in refused.json()["detail"]
        unknown = http.put(f"/api/v1/nodes/{node}/mig-layout", json={"layout": "no-such"})
        assert unknown.status_code == 422
        done = http.put(f"/api/v1/nodes/{node}/mig-layout", json={"layout": wanted, "drain": True})
        assert done.status_code == 200, done.text
    doc = done.json()
    assert doc["layout"] == wanted and doc["state"] == "pending"
    assert [g["gang"] for g in doc["drained"]["gangs"]] == [f"{ns}/slice"]

    def applied() -> bool:
        node_labels = kube.core.read_node(node).metadata.labels
        return bool(
            node_labels.get(names.MIG_CONFIG_LABEL) == wanted
            and node_labels.get(names.MIG_STATE_LABEL) == "success"
        )

    wait_for(applied, f"{node} reconfigured to {wanted}", 60)
    assert not kube.core.read_node(node).spec.unschedulable  # the drain's cordon is lifted
    _running(kube, ns, "slice", 1)  # placed again
    with api.client(token) as http:  # the API puts the sandbox's layout back
        restore = http.put(
            f"/api/v1/nodes/{node}/mig-layout", json={"layout": before, "drain": True}
        )
        assert restore.status_code == 200, restore.text
    restore_mig_configs(kube, ns, layouts)  # and any the scheduler changed meanwhile
