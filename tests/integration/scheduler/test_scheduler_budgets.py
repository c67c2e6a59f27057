"""Preemption through the Eviction API on the sandbox, with a real PodDisruptionBudget: a budget
that cannot cover a whole victim gang stops the preemption before any pod is evicted (the
preemptor waits and says why); once the budget allows the whole gang, the victims are evicted
together (the API server's disruption controller computes the budget) and the job shows as
Preempted, not failed."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from gpufleet.model.contract import names
from gpufleet.testing.operator import Kube, SettledInvariants, training_job, wait_for

LOW = "gpufleet.io/trainingjob=low"


def policy(kube: Kube) -> client.PolicyV1Api:
    return client.PolicyV1Api(kube.core.api_client)


def budget(kube: Kube, ns: str) -> dict[str, Any]:
    raw: Any = policy(kube).read_namespaced_pod_disruption_budget("low", ns, _preload_content=False)
    doc: dict[str, Any] = json.loads(raw.data)
    return doc


def scheduled_message(pod: dict[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == names.POD_SCHEDULED and c["status"] == "False":
            return str(c.get("message", ""))
    return ""


def test_budget_protects_a_whole_gang_until_it_allows_all_of_it(kube: Kube, ns: str) -> None:
    kube.create_job(ns, training_job("low", 4, 4, "L4", priority=1))  # all 16 L4 GPUs
    # minAvailable as a number: the disruption controller then needs no scale subresource
    # on the pods' owner (the TrainingJob) to compute the budget.
    wait_for(lambda: kube.phase(ns, "low") == "Running", "low Running")
    low_before = {p["metadata"]["uid"] for p in kube.pods(ns, LOW)}
    policy(kube).create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "low"},
            "spec": {
                "minAvailable": 3,
                "selector": {"matchLabels": {"gpufleet.io/trainingjob": "low"}},
            },
        },
    )
    wait_for(
        lambda: (budget(kube, ns).get("status") or {}).get("disruptionsAllowed") == 1,
        "the disruption controller allows 1 disruption",
    )

    kube.create_job(ns, training_job("high", 1, 4, "L4", priority=10))

    def high_blocked() -> bool:
        pods = kube.pods(ns, "gpufleet.io/trainingjob=high")
        return bool(pods) and scheduled_message(pods[0]).startswith(
            "PreemptionBlockedByDisruptionBudget: cannot preempt"
        )

    wait_for(high_blocked, "high pending with the budget as its reason", 30)
    message = scheduled_message(kube.pods(ns, "gpufleet.io/trainingjob=high")[0])
    assert f"PodDisruptionBudget {ns}/low allows 1 disruption(s), the gang has 4 pod(s)" in message
    # Not one pod of the gang was evicted: all four still run, unmarked.
    low_pods = kube.pods(ns, LOW)
    assert {p["metadata"]["uid"] for p in low_pods} == low_before
    assert all(not p["metadata"].get("deletionTimestamp") for p in low_pods)
    assert all(
        c["type"] != names.DISRUPTION_TARGET or c["status"] != "True"
        for p in low_pods
        for c in (p.get("status") or {}).get("conditions") or []
    )
    assert kube.phase(ns, "high") != "Running" and kube.phase(ns, "low") == "Running"

    # The budget now allows the whole gang to go: the preemption goes ahead, whole.
    policy(kube).patch_namespaced_pod_disruption_budget("low", ns, {"spec": {"minAvailable": 0}})
    wait_for(lambda: kube.phase(ns, "high") == "Running", "high Running", 60)
    watch = SettledInvariants(kube.core)

    def low_requeued() -> bool:
        assert watch.check() == []
        pods = kube.pods(ns, LOW)
        fresh = {p["metadata"]["uid"] for p in pods} & low_before == set()
        return len(pods) == 4 and fresh and kube.phase(ns, "low") == "Preempted"

    wait_for(low_requeued, "every low pod replaced, phase Preempted")
    assert [p for p in kube.pods(ns, LOW) if p["spec"].get("nodeName")] == []
