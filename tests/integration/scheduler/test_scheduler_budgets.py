"""Preemption through the Eviction API on the sandbox, with a real PodDisruptionBudget: a budget
that cannot cover a whole victim gang stops the preemption before any pod is evicted (the
preemptor waits and says why); once the budget allows the whole gang, the victims are evicted
together (the API server's disruption controller computes the budget) and the job shows as
Preempted, not failed. A victim that checkpoints (a job the scheduler could move) under a budget
at 0 is shown to the core as protected, so the core, not the eviction path, finds the budget:
the preemptor still waits with PreemptionBlockedByDisruptionBudget, on its pod and as its
TrainingJob's Admitted reason, and preempts once the budget is gone."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from gpufleet.model.contract import names
from gpufleet.testing.operator import Kube, SettledInvariants, training_job, wait_for

LOW = "gpufleet.io/trainingjob=low"
CKPT = "gpufleet.io/trainingjob=ckpt"


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


def test_a_checkpointing_victim_under_a_budget_gives_the_same_reason(kube: Kube, ns: str) -> None:
    low = training_job("ckpt", 4, 4, "L4", priority=1)  # all 16 L4 GPUs
    low["spec"]["checkpoint"] = {"onSignal": True, "gracePeriodSeconds": 2}
    kube.create_job(ns, low)
    wait_for(lambda: kube.phase(ns, "ckpt") == "Running", "ckpt Running")
    before = {p["metadata"]["uid"] for p in kube.pods(ns, CKPT)}
    policy(kube).create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "ckpt"},
            "spec": {
                "minAvailable": 4,
                "selector": {"matchLabels": {names.TRAININGJOB_LABEL: "ckpt"}},
            },
        },
    )

    def at_zero() -> bool:
        raw: Any = policy(kube).read_namespaced_pod_disruption_budget(
            "ckpt", ns, _preload_content=False
        )
        st = json.loads(raw.data).get("status") or {}
        return st.get("disruptionsAllowed") == 0 and st.get("currentHealthy") == 4

    wait_for(at_zero, "the disruption controller allows 0 disruptions", 30)

    kube.create_job(ns, training_job("high", 1, 4, "L4", priority=10))
    expected = (
        f"PreemptionBlockedByDisruptionBudget: cannot preempt {ns}/ckpt: a PodDisruptionBudget "
        "forbids stopping it now"
    )

    def high_reason() -> str:
        pods = kube.pods(ns, "gpufleet.io/trainingjob=high")
        return scheduled_message(pods[0]) if pods else ""

    # (In the sandbox's default queue, which borrows all it uses: before the budget's reason
    # came first, the queue's quota was given as the reason.)
    wait_for(
        lambda: high_reason().startswith("PreemptionBlockedByDisruptionBudget"),
        "high pending with the budget as its reason",
        30,
    )
    assert high_reason() == expected

    def admitted() -> dict[str, Any] | None:
        c = kube.condition(ns, "high", "Admitted")
        return c if c and c.get("reason") == "PreemptionBlockedByDisruptionBudget" else None

    condition = wait_for(admitted, "high's Admitted reason is the budget", 30)
    assert condition["message"] == expected
    assert {p["metadata"]["uid"] for p in kube.pods(ns, CKPT)} == before
    assert kube.phase(ns, "ckpt") == "Running"

    # Without the budget the victim is the core's again: preempted whole, high runs.
    policy(kube).delete_namespaced_pod_disruption_budget("ckpt", ns)
    wait_for(lambda: kube.phase(ns, "high") == "Running", "high Running", 60)
    wait_for(lambda: kube.phase(ns, "ckpt") == "Preempted", "ckpt Preempted", 30)
