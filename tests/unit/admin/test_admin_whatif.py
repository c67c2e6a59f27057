"""POST /whatif on a fixed cluster: the core's decision for a manifest, nothing written.

- a gang that fits is placed whole on one GPU type, with replicas on nodes and GPUs;
- a high-priority gang on a full pool names the preemptible gangs it would evict, as jobs;
- a MIG replica that needs a repartition lists the MIG change;
- one that cannot fit says why, as the scheduler would write it on its pods (the core's
  reason, with the node filters that left nodes out);
- a ServingJob is one gang per replica;
- it decides with the GPUQueues, as the scheduler does: QuotaExceeded beyond a queue's quota,
  QueueNotFound for a missing queue, and the service tier (a fresh gang of a queue takes the
  GPUs of a served gang of the same queue and priority);
- it takes the scheduler's snapshot steps (scheduler/decision_view.py): a gang a
  PodDisruptionBudget protects is never named as a victim, and when the budgets cannot be read
  no gang is;
- and its stateful ones (scheduler/stateful_steps.py): with the running gangs' progress, a
  service-tier eviction must pay for the work it throws away, so a served gang 300 s past its
  hourly checkpoint is not named as a victim of a fresh gang (one without a checkpoint is);
- invalid manifests are refused by the CRD models (422 naming the field), an existing job with
  409, and the cluster's pods and jobs are unchanged afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from admin_fakes import (
    auth,
    bind,
    context,
    job_pods,
    live_fleet,
    sandbox_nodes,
    served,
    training_job,
)
from httpx import Client

from gpufleet.admin.live import LiveFleet
from gpufleet.model.contract import names
from gpufleet.model.contract.standby import ASLEEP
from gpufleet.model.contract.timestamps import format_time


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}},
            **spec,
        },
    }


def _busy_h100() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every whole H100 taken by preemptible priority-0 gangs of one node each."""
    jobs, pods = [], []
    for i in range(3):
        job = training_job(f"low-{i}", "team-b", replicas=1, gpus=8, phase="Running")
        jobs.append(job)
        pods += [bind(p, f"h100-{i}", "0,1,2,3,4,5,6,7", "H100-80GB") for p in job_pods(job)]
    return jobs, pods


@pytest.fixture
def live() -> LiveFleet:
    jobs, pods = _busy_h100()
    nodes = sandbox_nodes()
    for node in nodes:  # the MIG H100 node is cordoned: no whole H100 is free
        if node["metadata"]["name"] == "h100-mig-0":
            node.setdefault("spec", {})["unschedulable"] = True
    return live_fleet(nodes, pods, jobs)


@pytest.fixture
def http(live: LiveFleet) -> Iterator[Client]:
    with served(context(live)) as client:
        yield client


def test_a_fitting_gang_is_placed_whole(http: Client) -> None:
    body = manifest("fits", replicas=2, gpusPerReplica=2, gpuTypes=[{"name": "A100-80GB"}])
    doc = http.post("/api/v1/whatif", headers=auth(), json=body).json()
    assert doc["placed"] and doc["job"] == {"namespace": "team-a", "kind": "TrainingJob",
                                            "name": "fits"}  # fmt: skip
    (gang,) = doc["gangs"]
    assert gang["gang"] == "team-a/fits" and gang["gpuType"] == "A100-80GB" and gang["gpus"] == 4
    assert [len(r["gpus"]) for r in gang["replicas"]] == [2, 2]
    assert gang["preempts"] == [] and gang["waiting"] is None
    assert doc["policy"] == "balanced"


def test_a_high_priority_gang_names_its_victims(http: Client, live: LiveFleet) -> None:
    before = live.observe()
    body = manifest("urgent", replicas=1, gpusPerReplica=8, priority=900,
                    gpuTypes=[{"name": "H100-80GB"}])  # fmt: skip
    doc = http.post("/api/v1/whatif", headers=auth(), json=body).json()
    (gang,) = doc["gangs"]
    assert gang["placed"] and gang["gpuType"] == "H100-80GB" and gang["gpus"] == 8
    (victim,) = gang["preempts"]
    node = gang["replicas"][0]["node"]
    index = node.rsplit("-", 1)[1]
    assert victim == {
        "gang": f"team-b/low-{index}",
        "job": {"namespace": "team-b", "kind": "TrainingJob", "name": f"low-{index}"},
        "pods": [f"team-b/low-{index}-worker-0"],
    }
    after = live.observe()
    assert set(after.view.facts) == set(before.view.facts) and after.jobs == before.jobs


def _budget(job: str, allowed: int) -> dict[str, Any]:
    return {
        "metadata": {"name": job, "namespace": "team-b", "generation": 1},
        "spec": {"selector": {"matchLabels": {"gpufleet.io/trainingjob": job}}},
        "status": {"observedGeneration": 1, "disruptionsAllowed": allowed},
    }


@pytest.mark.parametrize(
    ("budgets", "victims"),
    [
        pytest.param([], {"low-0"}, id="none"),
        pytest.param([_budget("low-0", 0), _budget("low-1", 0)], {"low-2"}, id="two-protected"),
        pytest.param([_budget("low-0", 1)], {"low-0"}, id="one-disruption-allowed"),
        pytest.param(None, set(), id="unreadable"),
    ],
)
def test_a_gang_a_budget_protects_is_never_a_victim(
    live: LiveFleet, budgets: list[dict[str, Any]] | None, victims: set[str]
) -> None:
    def read(namespaces: Any) -> list[dict[str, Any]]:
        assert set(namespaces) == {"team-b"}
        if budgets is None:
            raise ConnectionError("the API server is away")
        return budgets

    live.read_budgets = read
    body = manifest("urgent", replicas=1, gpusPerReplica=8, priority=900,
                    gpuTypes=[{"name": "H100-80GB"}])  # fmt: skip
    with served(context(live)) as http:
        (gang,) = http.post("/api/v1/whatif", headers=auth(), json=body).json()["gangs"]
    assert gang["placed"] == bool(victims)
    assert {v["job"]["name"] for v in gang["preempts"]} == victims


def test_a_mig_replica_lists_the_repartition(http: Client) -> None:
    body = manifest("slice", replicas=1, migProfile="3g.40gb", gpuTypes=[{"name": "A100-80GB"}])
    (gang,) = http.post("/api/v1/whatif", headers=auth(), json=body).json()["gangs"]
    assert gang["placed"] and gang["replicas"][0]["migSlice"].startswith("3g.40gb@")
    (change,) = gang["migChanges"]
    assert (change["node"], change["gpu"]) == (
        gang["replicas"][0]["node"],
        gang["replicas"][0]["gpus"][0],
    )
    assert gang["replicas"][0]["migSlice"] in change["layout"]


def test_a_gang_that_cannot_fit_says_why(http: Client) -> None:
    body = manifest("huge", replicas=1, gpusPerReplica=16, gpuTypes=[{"name": "H100-80GB"}])
    doc = http.post("/api/v1/whatif", headers=auth(), json=body).json()
    assert not doc["placed"]
    assert doc["gangs"][0]["waiting"] == {
        "reason": "ReplicaExceedsNode",
        # The scheduler's message: the core's, with the node filters that left nodes out.
        "message": "needs 16 x H100-80GB on one node; the largest node has 8 GPUs "
        "(NodeUnschedulable: 1 node is cordoned)",
    }


def test_a_serving_job_is_one_gang_per_replica(http: Client) -> None:
    pool = {
        "minReplicas": 2,
        "gpusPerReplica": 1,
        "gpuTypes": [{"name": "L4"}],
        "template": {"spec": {"containers": [{"name": "vllm", "image": "x"}]}},
    }
    body = {"kind": "ServingJob", "metadata": {"name": "chat"}, "spec": {"server": pool}}
    doc = http.post("/api/v1/whatif", headers=auth(), json=body).json()
    assert doc["placed"] and doc["job"]["namespace"] == "default"
    assert len(doc["gangs"]) == 2
    assert {g["gpuType"] for g in doc["gangs"]} == {"L4"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(
            manifest("both", replicas=1, gpusPerReplica=1, migProfile="1g.10gb"),
            "mutually exclusive",
            id="gpus-and-mig",
        ),
        pytest.param(manifest("bad", replicas=0, gpusPerReplica=1), "replicas", id="replicas-0"),
        pytest.param(
            manifest("x", replicas=1, gpusPerReplica=1, colour="red"), "colour", id="unknown"
        ),
        pytest.param({"kind": "Deployment", "spec": {}}, "kind", id="other-kind"),
        pytest.param(
            {**manifest("x", replicas=1, gpusPerReplica=1), "metadata": {}},
            "metadata.name is required",
            id="no-name",
        ),
    ],
)
def test_invalid_manifests_are_refused(http: Client, body: dict[str, Any], field: str) -> None:
    response = http.post("/api/v1/whatif", headers=auth(), json=body)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert field in problem["detail"] or any(
        field in ".".join(map(str, e["loc"])) or field in e["msg"] for e in problem["errors"]
    )


def test_an_existing_job_is_a_conflict(http: Client) -> None:
    body = manifest("low-0", replicas=1, gpusPerReplica=8, gpuTypes=[{"name": "H100-80GB"}])
    body["metadata"]["namespace"] = "team-b"
    response = http.post("/api/v1/whatif", headers=auth(), json=body)
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "TrainingJob team-b/low-0 exists already; a what-if is for a new job"
    )


def _queue(name: str, **quota: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {"quotas": [{"gpuType": "A100-80GB", **quota}]},
    }


def test_a_gang_beyond_its_queues_quota_waits(http: Client, live: LiveFleet) -> None:
    live.cache.replace_queues([_queue("closed", nominal=0, borrowingLimit=0)])
    live.cache.replace_namespaces([{"metadata": {"name": "team-a"}}])
    body = manifest("held", replicas=1, gpusPerReplica=1, queue="closed",
                    gpuTypes=[{"name": "A100-80GB"}])  # fmt: skip
    (gang,) = http.post("/api/v1/whatif", headers=auth(), json=body).json()["gangs"]
    assert not gang["placed"] and gang["waiting"]["reason"] == "QuotaExceeded"
    assert "closed" in gang["waiting"]["message"]


def test_a_gang_of_a_missing_queue_waits(http: Client, live: LiveFleet) -> None:
    live.cache.replace_queues([_queue("closed", nominal=0, borrowingLimit=0)])
    body = manifest("lost", replicas=1, gpusPerReplica=1, queue="missing",
                    gpuTypes=[{"name": "A100-80GB"}])  # fmt: skip
    (gang,) = http.post("/api/v1/whatif", headers=auth(), json=body).json()["gangs"]
    assert not gang["placed"] and gang["waiting"]["reason"] == "QueueNotFound"
    assert "missing" in gang["waiting"]["message"]


def test_a_fresh_gang_takes_the_gpus_of_a_served_one_of_its_queue(live: LiveFleet) -> None:
    # The busy H100s are held by gangs of the queue `default` running since long ago: far past
    # the service tier, so a fresh gang of the queue and of their priority may take their GPUs.
    started = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    live.cache.replace_pods([dict(p, status=started) for p in live.cache.state().pods])
    gang = _fresh_gang_of_default(live)
    assert gang["placed"], gang
    (victim,) = gang["preempts"]
    assert victim["job"]["namespace"] == "team-b" and victim["job"]["name"].startswith("low-")


@pytest.mark.parametrize(
    ("checkpoint", "evicted"),
    [
        # An hourly checkpoint: the eviction would throw away all 300 s run so far, more
        # than the fresh gang's gain pays back before the served gang is expected to end.
        pytest.param("interval=3600", False, id="lost-work-not-paid-back"),
        # Without a checkpoint the scheduler knows no progress: the disruption weight alone.
        pytest.param(None, True, id="no-progress"),
    ],
)
def test_a_tier_eviction_pays_for_the_victims_lost_work(
    live: LiveFleet, checkpoint: str | None, evicted: bool
) -> None:
    # The busy H100s are held by gangs of the queue `default` for 300 s: 2400 GPU-s each, past
    # the service tier (1800), so a fresh gang of the queue and of their priority may evict one
    # if that pays for the work it throws away (borrowing.restarts_paid_back) - which needs
    # their progress (scheduler/progress.py), as the scheduler gives it.
    started = format_time(datetime.now(UTC) - timedelta(seconds=300))
    pods = []
    for pod in live.cache.state().pods:
        pod = dict(pod, status={"phase": "Running", "startTime": started})
        if checkpoint is not None:
            annotations = pod["metadata"]["annotations"]
            pod["metadata"] = {**pod["metadata"], "annotations": {**annotations,
                               names.CHECKPOINT: checkpoint}}  # fmt: skip
        pods.append(pod)
    live.cache.replace_pods(pods)
    gang = _fresh_gang_of_default(live)
    assert gang["placed"] == evicted and bool(gang["preempts"]) == evicted, gang
    if not evicted:
        assert gang["waiting"]["reason"] != "NotOffered", gang


def _fresh_gang_of_default(live: LiveFleet) -> dict[str, Any]:
    """The what-if's answer for a fresh 8-GPU H100 gang of the queue `default` (24 H100)."""
    quota = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue",
             "metadata": {"name": "default"},
             "spec": {"quotas": [{"gpuType": "H100-80GB", "nominal": 24}]}}  # fmt: skip
    live.cache.replace_queues([quota])
    body = manifest("fresh", replicas=1, gpusPerReplica=8, queue="default",
                    gpuTypes=[{"name": "H100-80GB"}])  # fmt: skip
    with served(context(live)) as http:
        (gang,) = http.post("/api/v1/whatif", headers=auth(), json=body).json()["gangs"]
    return dict(gang)


def test_a_preemptible_gang_borrows_an_asleep_standbys_gpus() -> None:
    # h100-0's 8 GPUs are held by an asleep standby of priority 5: the scheduler lends them to
    # preemptible gangs of lower priority (lending.decide); every other whole H100 is busy.
    jobs, pods = _busy_h100()
    asleep = training_job("asleep", "team-b", replicas=1, gpus=8, priority=5, phase="Running")
    (pod,) = [bind(p, "h100-0", "0,1,2,3,4,5,6,7", "H100-80GB") for p in job_pods(asleep)]
    pod["metadata"]["annotations"][names.STANDBY] = ASLEEP
    jobs[0], pods = asleep, [pod, *(p for p in pods if p["spec"]["nodeName"] != "h100-0")]
    nodes = sandbox_nodes()
    for node in nodes:
        if node["metadata"]["name"] == "h100-mig-0":
            node.setdefault("spec", {})["unschedulable"] = True
    body = manifest("borrower", replicas=1, gpusPerReplica=8, gpuTypes=[{"name": "H100-80GB"}])
    with served(context(live_fleet(nodes, pods, jobs))) as http:
        (gang,) = http.post("/api/v1/whatif", headers=auth(), json=body).json()["gangs"]
    assert gang["placed"] and gang["replicas"][0]["node"] == "h100-0", gang
    assert gang["preempts"] == []
    body["spec"]["preemptible"] = False  # only preemptible gangs borrow
    with served(context(live_fleet(nodes, pods, jobs))) as http:
        (gang,) = http.post("/api/v1/whatif", headers=auth(), json=body).json()["gangs"]
    assert not gang["placed"], gang
