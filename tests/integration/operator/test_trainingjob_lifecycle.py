"""TrainingJob end to end on the sandbox with `gpufleet operator` as a real process.

Aspects: the examples reach Running (and the one that cannot fit says why, with the core's
reason); worker pods carry ranks, PyTorch rendezvous variables, GPU requests and owner
references, and get a headless Service; status shows the placement; Events mark transitions;
deleting a job removes everything it owned; bad input (a GPU type no node has, a pod template
the API server rejects) ends in a clear condition; suspend and resume; a failed worker restarts
the whole gang.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.model.contract.timestamps import parse_time
from gpufleet.model.gpus import load_catalog
from gpufleet.model.power import capped_power_w
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.settings import OperatorSettings
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, wait_for

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def job(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicas": 1,
        "gpusPerReplica": 1,
        "gpuTypes": [{"name": "T4"}],
        "template": {"spec": {"containers": [{"name": "main", "image": "registry.example/x:1"}]}},
    }
    body.update(spec)
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": body,
    }


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", [])}


def test_examples_reach_running_and_the_misfit_says_why(
    kube: Kube, ns: str, sandbox: Sandbox
) -> None:
    # The queues the example jobs name (cluster-scoped: kept for the session, as a user would).
    for path in sorted(EXAMPLES.glob("gpuqueue-*.yaml")):
        sandbox.kubectl("apply", "-f", str(path))
    running = {
        "trainingjob-gang-h100.yaml": "llama-finetune",
        "trainingjob-mig-slice.yaml": "bert-mig",
        "trainingjob-elastic.yaml": "resnet-elastic",
        "trainingjob-high-priority.yaml": "urgent-pretrain",
    }
    for file in [*running, "trainingjob-unschedulable.yaml"]:
        kube.create_job(ns, example(file))

    # The high-priority example may preempt another one, which is then placed again (on its
    # other GPU type), so wait for one listing in which all four run together.
    def all_running() -> dict[str, dict[str, Any]] | None:
        jobs = {j["metadata"]["name"]: j for j in kube.jobs(ns)}
        phases = [(jobs.get(n, {}).get("status") or {}).get("phase") for n in running.values()]
        return jobs if all(p == "Running" for p in phases) else None

    jobs = wait_for(all_running, "the four examples Running together", 60)
    gang = jobs["llama-finetune"]
    status = gang["status"]
    assert status["replicas"] == 2 and status["gpuType"] in ("H100-80GB", "A100-80GB")
    assert [p["replica"] for p in status["placement"]] == [0, 1]
    assert all(len(p["gpus"]) == 4 for p in status["placement"])
    pods = sorted(
        kube.pods(ns, "gpufleet.io/trainingjob=llama-finetune"), key=lambda p: p["metadata"]["name"]
    )
    assert [p["metadata"]["name"] for p in pods] == [
        "llama-finetune-worker-0",
        "llama-finetune-worker-1",
    ]
    for rank, pod in enumerate(pods):
        assert env(pod) == {
            "MASTER_ADDR": f"llama-finetune-worker-0.llama-finetune.{ns}.svc",
            "MASTER_PORT": "29500",
            "WORLD_SIZE": "2",
            "RANK": str(rank),
        }
        assert pod["spec"]["schedulerName"] == "gpufleet"
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["uid"] == gang["metadata"]["uid"] and owner["controller"]
    service = kube.core.read_namespaced_service("llama-finetune", ns)
    assert service.spec.cluster_ip == "None"

    (slot,) = jobs["bert-mig"]["status"]["placement"]
    assert slot["migSlice"]["profile"] == "3g.40gb"

    assert kube.phase(ns, "too-big") == "Queued"
    # The scheduler writes a pending reason once it has held a moment (longer while bindings
    # are in flight), so the job first says it waits for the scheduler, then why.
    admitted = wait_for(
        lambda: (
            (c := kube.condition(ns, "too-big", "Admitted"))
            and c["message"].startswith("ReplicaExceedsNode")
            and c
        ),
        "the core's reason on the job that cannot fit",
        60,  # a scheduler cycle, the reason's write and an operator pass: not what is measured
    )
    assert admitted["status"] == "False"
    assert admitted["message"].startswith("ReplicaExceedsNode: needs 16 x H100-80GB on one node")

    reasons = {e["reason"] for e in kube.events(ns, "llama-finetune")}
    assert {"Queued", "Running"} <= reasons
    # The preempted example may still be bound again pod by pod (its Running status can lag
    # its eviction): a gang caught between two bindings is read again until whole.
    assert invariants.final_check(kube.core) == []


def test_deleting_a_job_removes_everything_it_owned(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("short", replicas=2))
    wait_for(lambda: kube.phase(ns, "short") == "Running", "short Running")
    kube.delete_job(ns, "short")
    wait_for(lambda: kube.job(ns, "short") is None, "job gone (finalizer released)")
    wait_for(lambda: not kube.pods(ns), "pods gone")
    services = kube.core.list_namespaced_service(ns).items
    assert [s.metadata.name for s in services] == []


def test_gpu_type_no_node_has_is_explained(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("volta", gpuTypes=[{"name": "V100-32GB"}]))

    def explained() -> dict[str, Any] | None:
        c = kube.condition(ns, "volta", "Admitted")
        return c if c and c["reason"] == "NoNodesOfAcceptableType" else None

    admitted = wait_for(explained, "NoNodesOfAcceptableType condition")
    assert admitted["message"] == (
        "NoNodesOfAcceptableType: no schedulable node has V100-32GB GPUs"
    )
    assert kube.phase(ns, "volta") == "Queued"

    def warned() -> bool:
        return any(
            e["type"] == "Warning" and e["reason"] == "NoNodesOfAcceptableType"
            for e in kube.events(ns, "volta")
        )

    # kopf posts events from a background queue, so the event may follow the condition.
    wait_for(warned, "a NoNodesOfAcceptableType Warning event", 30)


def test_rejected_pod_template_fails_with_the_api_servers_message(kube: Kube, ns: str) -> None:
    container = {
        "name": "main",
        "image": "registry.example/x:1",
        "volumeMounts": [{"name": "missing", "mountPath": "/data"}],
    }
    kube.create_job(ns, job("broken", template={"spec": {"containers": [container]}}))
    wait_for(lambda: kube.phase(ns, "broken") == "Failed", "broken Failed")
    failed = kube.condition(ns, "broken", "Failed")
    assert failed is not None and failed["reason"] == "PodTemplateRejected"
    assert "volumeMounts[0].name" in failed["message"]
    assert kube.pods(ns) == []


def test_suspend_releases_gpus_and_resume_runs_again(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("pausable", replicas=2))
    wait_for(lambda: kube.phase(ns, "pausable") == "Running", "Running")
    kube.patch_job(ns, "pausable", {"spec": {"runPolicy": {"suspend": True}}})
    wait_for(lambda: kube.phase(ns, "pausable") == "Suspended", "Suspended")
    wait_for(lambda: not kube.pods(ns), "pods deleted while suspended")
    kube.patch_job(ns, "pausable", {"spec": {"runPolicy": {"suspend": False}}})
    wait_for(lambda: kube.phase(ns, "pausable") == "Running", "Running again")


def test_failed_worker_restarts_the_whole_gang(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("flaky", replicas=2, runPolicy={"backoffLimit": 1}))
    wait_for(lambda: kube.phase(ns, "flaky") == "Running", "Running")
    first = {p["metadata"]["uid"] for p in kube.pods(ns)}
    kube.core.patch_namespaced_pod_status("flaky-worker-1", ns, {"status": {"phase": "Failed"}})

    def restarted() -> bool:
        job_ = kube.job(ns, "flaky") or {}
        pods = kube.pods(ns)
        fresh = {p["metadata"]["uid"] for p in pods} & first == set()
        return (
            (job_.get("status") or {}).get("restarts") == 1
            and len(pods) == 2
            and fresh
            and job_["status"]["phase"] == "Running"
        )

    wait_for(restarted, "both workers replaced and running, restarts=1", 30)
    kube.core.patch_namespaced_pod_status("flaky-worker-0", ns, {"status": {"phase": "Failed"}})
    wait_for(lambda: kube.phase(ns, "flaky") == "Failed", "Failed after backoffLimit", 30)
    failed = kube.condition(ns, "flaky", "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    wait_for(
        lambda: all(p["status"].get("phase") == "Failed" for p in kube.pods(ns)), "no live workers"
    )


def test_success_then_ttl_deletes_the_job(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("done", replicas=2, runPolicy={"ttlSecondsAfterFinished": 2}))
    wait_for(lambda: kube.phase(ns, "done") == "Running", "Running")
    for rank in range(2):
        kube.core.patch_namespaced_pod_status(
            f"done-worker-{rank}", ns, {"status": {"phase": "Succeeded"}}
        )
    wait_for(lambda: kube.phase(ns, "done") == "Succeeded", "Succeeded")
    succeeded = kube.condition(ns, "done", "Succeeded")
    assert succeeded is not None and succeeded["reason"] == "Completed"
    wait_for(lambda: kube.job(ns, "done") is None, "deleted after ttlSecondsAfterFinished", 15)


def test_status_accounts_gpu_time_and_energy(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("meter", replicas=2))
    wait_for(lambda: kube.phase(ns, "meter") == "Running", "Running")
    time.sleep(6)
    # The accounting charges each running pod from its status.startTime (as the cluster
    # recorded it, in whole seconds) to the operator's check that sees it no longer running.
    pods = kube.pods(ns)
    assert len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)
    started = [parse_time(p["status"].get("startTime")) for p in pods]
    assert all(s is not None for s in started)
    stopped = time.time()  # the workers ran at least until here
    for rank in range(2):
        kube.core.patch_namespaced_pod_status(
            f"meter-worker-{rank}", ns, {"status": {"phase": "Succeeded"}}
        )
    wait_for(lambda: kube.phase(ns, "meter") == "Succeeded", "Succeeded")
    status = (kube.job(ns, "meter") or {})["status"]
    read = time.time()  # every charge in `status` was made before here
    # One T4 per worker. Upper bound: no pass charges past its own clock, so a worker is charged
    # at most from its start to this read (the status rounds to 0.1). Lower bound: a worker is
    # charged at least to its stop, less one operator tick (a check that acted last saw it
    # running a tick before it stopped) and the whole second the operator's clock is
    # truncated to.
    early = OperatorSettings().tick_s + 1.0  # the operator runs with the default tick
    at_least = sum(stopped - s.timestamp() - early for s in started if s is not None)
    at_most = sum(read - s.timestamp() for s in started if s is not None)
    assert at_least <= status["gpuSeconds"] <= at_most + 0.05, (at_least, at_most)
    watts = capped_power_w(load_catalog()["T4"], None)
    assert status["estimatedEnergyJoules"] == pytest.approx(status["gpuSeconds"] * watts, abs=5)
    assert status["usageAccountedTime"]


def test_active_deadline_fails_a_running_job(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("slow", replicas=1, runPolicy={"activeDeadlineSeconds": 2}))
    wait_for(lambda: kube.phase(ns, "slow") == "Running", "Running")
    wait_for(lambda: kube.phase(ns, "slow") == "Failed", "Failed past the deadline", 15)
    failed = kube.condition(ns, "slow", "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    wait_for(lambda: not kube.pods(ns), "workers deleted")
