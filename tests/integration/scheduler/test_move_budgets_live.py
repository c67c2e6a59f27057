"""Moves under a PodDisruptionBudget on the sandbox, through `gpufleet operator` as a real
process, the real API server and its disruption controller.

Aspects: two identical checkpointing TrainingJobs start on L4 while the A100s and H100s are
busy; one of them has a budget (minAvailable 1 over its one pod: disruptionsAllowed 0). When
the A100s free, the job without a budget moves there, while the protected one keeps its pod
(same uid, never marked or deleted, `status.moves` unset) for as long as the budget is there;
once the budget is deleted it moves as well. No GPU is ever double-booked nor a gang partly
bound. The Event the scheduler posts when a budget stops a move at the last moment (a race
the sandbox cannot time: unit-tested in test_scheduler_move_budgets) is accepted by the real
API server and listed with the TrainingJob, as `kubectl describe tj` finds it (the job named
from its worker's controller reference). The module gives back what it changed: the MIG nodes
it cordoned are uncordoned.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from test_moves_live import (
    CORDONED,
    SETTINGS,
    fill_fast_gpus,
    movable,
    settled_invariants,
    status,
    wait_running,
)

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.scheduler.lease_events import object_events
from gpufleet.scheduler.mover import MOVE_BLOCKED, job_reference
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    configured_operator,
    wait_for,
)

pytestmark = pytest.mark.integration

GUARDED, FREE = "guarded", "free"


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator (moves priced with a 1 s restart); the MIG nodes cordoned, as in
    test_moves_live (an empty one could be repartitioned into a fast node before the test
    frees one)."""
    folder = tmp_path_factory.mktemp("operator")
    with configured_operator(sandbox.kubeconfig, kube, folder, SETTINGS, CORDONED) as proc:
        yield proc


def policy(kube: Kube) -> client.PolicyV1Api:
    return client.PolicyV1Api(kube.core.api_client)


def budget_status(kube: Kube, ns: str) -> dict[str, Any]:
    raw: Any = policy(kube).read_namespaced_pod_disruption_budget(
        GUARDED, ns, _preload_content=False
    )
    doc: dict[str, Any] = json.loads(raw.data)
    return {**(doc.get("status") or {}), "generation": doc["metadata"].get("generation", 0)}


def test_a_job_under_a_budget_at_zero_is_not_moved(kube: Kube, ns: str) -> None:
    clean = settled_invariants(kube)
    fill_fast_gpus(kube, ns)
    kube.create_job(ns, movable(GUARDED))
    kube.create_job(ns, movable(FREE))
    wait_running(kube, ns, GUARDED, "L4")
    wait_running(kube, ns, FREE, "L4")
    (guarded_pod,) = kube.bound(ns, GUARDED)
    (free_pod,) = kube.bound(ns, FREE)

    # minAvailable as a number: the disruption controller then needs no scale subresource on
    # the pods' owner (the TrainingJob) to compute the budget.
    policy(kube).create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": GUARDED},
            "spec": {
                "minAvailable": 1,
                "selector": {"matchLabels": {names.TRAININGJOB_LABEL: GUARDED}},
            },
        },
    )

    def processed_at_zero() -> bool:
        st = budget_status(kube, ns)
        return st.get("observedGeneration", 0) >= st["generation"] and (
            st.get("disruptionsAllowed") == 0 and st.get("currentHealthy") == 1
        )

    wait_for(processed_at_zero, "the disruption controller allows 0 disruptions", 30)
    assert clean()

    kube.delete_job(ns, "fill-a100")
    wait_running(kube, ns, FREE, "A100-80GB")
    (moved,) = kube.bound(ns, FREE)
    assert moved["metadata"]["uid"] != free_pod["metadata"]["uid"]
    assert status(kube, ns, FREE).get("moves") == 1

    # The A100s stay free enough for the guarded job too: the budget alone keeps it.
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        clean()
        pods_now = kube.pods(ns, f"{names.TRAININGJOB_LABEL}={GUARDED}")
        assert [p["metadata"]["uid"] for p in pods_now] == [guarded_pod["metadata"]["uid"]]
        pod = pods_now[0]
        assert not pod["metadata"].get("deletionTimestamp")
        assert names.DISRUPTED_BY not in (pod["metadata"].get("annotations") or {})
        time.sleep(0.5)
    st = status(kube, ns, GUARDED)
    assert st.get("gpuType") == "L4" and not st.get("moves")

    # Without the budget the same job moves.
    policy(kube).delete_namespaced_pod_disruption_budget(GUARDED, ns)

    def guarded_moved() -> bool:
        clean()
        st = status(kube, ns, GUARDED)
        return st.get("moves") == 1 and st.get("gpuType") == "A100-80GB"

    wait_for(guarded_moved, "the guarded job moved once its budget is gone", timeout=90)
    wait_running(kube, ns, GUARDED, "A100-80GB")


def test_the_skipped_move_event_is_listed_with_the_trainingjob(kube: Kube, ns: str) -> None:
    kube.create_job(ns, movable(GUARDED))
    wait_running(kube, ns, GUARDED)
    (pod,) = kube.bound(ns, GUARDED)
    text = f"gang {ns}/{GUARDED}: move to A100-80GB skipped: PodDisruptionBudget {ns}/x allows 0"
    object_events(kube.core)(job_reference(pod), "Normal", MOVE_BLOCKED, text)
    job = kube.job(ns, GUARDED) or {}
    # kubectl describe selects an object's Events by involvedObject name, namespace, kind, uid.
    (event,) = [e for e in kube.events(ns, GUARDED) if e["reason"] == MOVE_BLOCKED]
    assert event["involvedObject"]["kind"] == "TrainingJob"
    assert event["involvedObject"]["uid"] == job["metadata"]["uid"]
    assert (event["type"], event["message"]) == ("Normal", text)
