"""GPUQueue namespace selectors on the sandbox: the scheduler watches namespaces' labels.

Two namespaces labelled `example.com/team` a and b, and a queue whose namespaceSelector takes
team a only:
- team a's job runs; team b's job is accepted but waits with QueueNotAllowed naming the queue
  and the namespace, holds no GPU and is not counted in the queue's status; once team b's
  namespace is relabelled, it runs;
- a job from a namespace the selector does not take runs once the queue's selector is changed to
  take it, and a running job of a namespace the new selector no longer takes keeps running.
Every queue and namespace made here is deleted at the end of the module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

pytestmark = pytest.mark.integration

SUFFIX = uuid.uuid4().hex[:6]
QUEUE = f"team-a-only-{SUFFIX}"
NS_A, NS_B, NS_C = f"qns-a-{SUFFIX}", f"qns-b-{SUFFIX}", f"qns-c-{SUFFIX}"
GROUP, VERSION = "gpufleet.io", "v1alpha1"
TEAM = "example.com/team"


def _job(name: str, queue: str) -> dict[str, Any]:
    manifest = training_job(name, 1, gpus=2, gpu_type="T4")
    manifest["spec"]["queue"] = queue
    return manifest


def _bound(kube: Kube, ns: str, job: str) -> int:
    pods = kube.pods(ns, f"gpufleet.io/trainingjob={job}")
    return sum(1 for p in pods if p["spec"].get("nodeName"))


def _status(kube: Kube, name: str) -> dict[str, Any]:
    obj: Any = kube.custom.get_cluster_custom_object(GROUP, VERSION, "gpuqueues", name)
    return dict(obj.get("status") or {})


@pytest.fixture(scope="module")
def teams(kube: Kube, sandbox: Sandbox, operator: OperatorProcess) -> Iterator[None]:
    """The queue (T4 nominal 8, team a only) and the three namespaces (c unlabelled)."""
    for name, team in ((NS_A, "a"), (NS_B, "b"), (NS_C, None)):
        labels = {TEAM: team} if team else {}
        body: Any = {"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": name, "labels": labels}}  # fmt: skip
        kube.core.create_namespace(body)
    queue = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUQueue",
        "metadata": {"name": QUEUE},
        "spec": {
            "quotas": [{"gpuType": "T4", "nominal": 8}],
            "namespaceSelector": {"matchExpressions": [
                {"key": TEAM, "operator": "In", "values": ["a"]}]},
        },
    }  # fmt: skip
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", queue)
    yield
    for name in (NS_A, NS_B, NS_C):
        kube.clean_namespace(name)
    sandbox.kubectl("delete", "gq", QUEUE, "--ignore-not-found", check=False)


def test_only_the_selected_namespace_runs_until_the_other_is_relabelled(
    kube: Kube, teams: None
) -> None:
    kube.create_job(NS_A, _job("a1", QUEUE))
    kube.create_job(NS_B, _job("b1", QUEUE))
    wait_for(lambda: kube.phase(NS_A, "a1") == "Running", "team a's job Running", 60)
    reason = wait_for(lambda: kube.waiting_reason(NS_B, "b1"), "team b's job says why it waits", 30)
    assert reason[0] == "QueueNotAllowed", reason
    assert f"queue {QUEUE} does not take jobs from namespace {NS_B}" in reason[1], reason
    assert f"{TEAM}=a" in reason[1], reason
    assert _bound(kube, NS_B, "b1") == 0
    # The queue's status counts team a's job only: b's is no demand of the queue.
    status = wait_for(
        lambda: (s := _status(kube, QUEUE)).get("runningJobs") == 1 and s,
        "the queue's status showing team a's job",
        30,
    )
    assert status["pendingJobs"] == 0, status
    [t4] = [r for r in status["resources"] if r["gpuType"] == "T4"]
    assert (t4["used"], t4["pending"]) == (2, 0), t4

    kube.core.patch_namespace(NS_B, {"metadata": {"labels": {TEAM: "a"}}})
    wait_for(lambda: kube.phase(NS_B, "b1") == "Running", "b1 Running once relabelled", 60)
    assert _bound(kube, NS_B, "b1") == 1


def test_a_selector_change_admits_waiting_jobs_and_stops_no_running_one(
    kube: Kube, teams: None
) -> None:
    kube.create_job(NS_A, _job("a2", QUEUE))
    wait_for(lambda: kube.phase(NS_A, "a2") == "Running", "team a's job Running", 60)
    kube.create_job(NS_C, _job("c1", QUEUE))
    reason = wait_for(lambda: kube.waiting_reason(NS_C, "c1"), "c1 says why it waits", 30)
    assert reason[0] == "QueueNotAllowed" and NS_C in reason[1], reason
    # The selector now takes every namespace but team a's: c (unlabelled) is taken, a is not.
    selector = {"matchExpressions": [{"key": TEAM, "operator": "NotIn", "values": ["a"]}]}
    kube.custom.patch_cluster_custom_object(
        GROUP, VERSION, "gpuqueues", QUEUE, {"spec": {"namespaceSelector": selector}}
    )
    wait_for(lambda: kube.phase(NS_C, "c1") == "Running", "c1 Running once selected", 60)
    # Cycles ran after the change (c1 was bound by one): team a's running job was not touched.
    assert kube.phase(NS_A, "a2") == "Running" and _bound(kube, NS_A, "a2") == 1
