"""The read routes on a fixed cluster (the sandbox's default fleet, jobs built by the operator):

- GET /fleet: every GPU node, GPUs and MIG slices with their holders (pod, gang, job, queue),
  power from the power model, capacity by type and profile, pending MIG reconfigurations;
  pagination by limit and continue, and a foreign token refused with 400;
- GET /jobs: placement from the pods, the core's reason split into code and message, queue
  positions by priority then age, filters, and namespaces filtered by what the user may list;
  a message without a known code is `Unknown`; without waiting pods, the job's Admitted=False
  condition (the scheduler's code as its reason);
- GET /jobs/{namespace}/{kind}/{name}: one job; 404 for an unknown one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from admin_fakes import (
    FakeReviewer,
    admin_grants,
    auth,
    bind,
    context,
    job_pods,
    live_fleet,
    sandbox_nodes,
    served,
    training_job,
    waiting,
)
from httpx import Client

from gpufleet.model.contract import names
from gpufleet.model.contract.reasons import PendingReason, pending_text
from gpufleet.model.gpus import load_catalog
from gpufleet.model.power import capped_power_w

CATALOG = load_catalog()


def _cluster() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    bert = training_job("bert", "team-a", mig="1g.10gb", gpus=None, gpu_type="A100-80GB")
    bert["status"] = {"phase": "Running", "gpuSeconds": 60.0, "estimatedEnergyJoules": 9000.0}
    llama = training_job("llama", "team-b", replicas=2, gpus=4, priority=5, phase="Running")
    llama["spec"]["queue"] = "research"
    old = training_job("old", "team-a", gpus=16, phase="Queued", created="2026-01-01T00:00:00Z")
    new = training_job("new", "team-a", gpus=16, phase="Queued", created="2026-01-02T00:00:00Z")
    high = training_job("high", "team-b", gpus=16, priority=9, phase="Queued")
    pods = [bind(p, "a100-mig-0", "0", "A100-80GB", "1g.10gb@0") for p in job_pods(bert)]
    llama_pods = job_pods(llama)
    pods += [bind(llama_pods[0], "h100-0", "0,1,2,3", "H100-80GB")]
    capped = bind(llama_pods[1], "h100-0", "4,5,6,7", "H100-80GB")
    capped["metadata"]["annotations"][names.POWER_CAP] = "500"
    pods.append(capped)
    reason = "ReplicaExceedsNode: needs 16 x H100-80GB on one node; the largest node has 8 GPUs"
    for job in (old, new, high):
        pods += [waiting(p, reason) for p in job_pods(job)]
    return [bert, llama, old, new, high], pods


@pytest.fixture
def client() -> Iterator[Client]:
    jobs, pods = _cluster()
    live = live_fleet(sandbox_nodes(), pods, jobs)
    with served(context(live)) as c:
        yield c


def test_fleet_shows_nodes_gpus_slices_holders_and_power(client: Client) -> None:
    doc = client.get("/api/v1/fleet", headers=auth()).json()
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert len(nodes) == 16 and doc["metadata"]["remainingItemCount"] == 0
    h100 = nodes["h100-0"]
    assert h100["gpuType"] == "H100-80GB" and h100["ready"] and h100["gpusInUse"] == 8
    holder = h100["gpus"][5]["holder"]
    assert holder["pod"] == "team-b/llama-worker-1" and holder["gang"] == "team-b/llama"
    assert holder["job"] == {"namespace": "team-b", "kind": "TrainingJob", "name": "llama"}
    assert holder["queue"] == "research" and holder["priority"] == 5 and holder["powerCapW"] == 500
    h100_type = CATALOG["H100-80GB"]
    assert h100["gpus"][5]["powerW"] == pytest.approx(500.0)
    assert h100["gpus"][0]["powerW"] == pytest.approx(capped_power_w(h100_type, None), abs=0.1)
    assert h100["powerW"] == pytest.approx(4 * capped_power_w(h100_type, None) + 4 * 500, abs=1)
    mig = nodes["a100-mig-0"]
    assert mig["migConfig"] == "all-1g.10gb" and mig["migConfigState"] == "success"
    slices = mig["gpus"][0]["slices"]
    assert mig["gpus"][0]["migEnabled"] and len(slices) == 7
    held = [s for s in slices if s.get("holder")]
    assert [(s["profile"], s["start"]) for s in held] == [("1g.10gb", 0)]
    assert held[0]["holder"]["job"]["name"] == "bert"
    idle = nodes["t4-0"]
    assert idle["gpusInUse"] == 0 and all(g["holder"] is None for g in idle["gpus"])
    assert idle["gpus"][0]["powerW"] == CATALOG["T4"].power.idle_w


def test_fleet_capacity_counts_by_type_and_profile(client: Client) -> None:
    doc = client.get("/api/v1/fleet", headers=auth()).json()
    cap = {(c["gpuType"], c.get("migProfile")): c for c in doc["capacity"]}
    # 3 H100 nodes of whole GPUs; h100-mig-0 is all-balanced MIG.
    assert cap[("H100-80GB", None)] == {
        "gpuType": "H100-80GB", "migProfile": None, "allocatable": 24, "allocated": 8,
        "outsideQueues": None,  # queues not watched here (test_admin_metrics_collector.py)
    }  # fmt: skip
    assert cap[("A100-80GB", "1g.10gb")]["allocatable"] == 56
    assert cap[("A100-80GB", "1g.10gb")]["allocated"] == 1
    assert cap[("H100-80GB", "3g.40gb")]["allocatable"] == 8  # one per balanced GPU
    assert doc["pendingGangs"] == 3 and doc["pendingMigReconfigurations"] == []


def test_fleet_pages_follow_each_other(client: Client) -> None:
    seen: list[str] = []
    token = None
    for _ in range(10):
        params = {"limit": 5} | ({"continue": token} if token else {})
        doc = client.get("/api/v1/fleet", headers=auth(), params=params).json()
        seen += [n["name"] for n in doc["nodes"]]
        token = doc["metadata"].get("continue")
        if token is None:
            break
    assert seen == sorted(seen) and len(seen) == len(set(seen)) == 16
    foreign = client.get("/api/v1/jobs", headers=auth(), params={"continue": "bogus!"})
    assert foreign.status_code == 400
    assert foreign.headers["content-type"] == "application/problem+json"
    first = client.get("/api/v1/fleet", headers=auth(), params={"limit": 1}).json()
    wrong = client.get(
        "/api/v1/jobs", headers=auth(), params={"continue": first["metadata"]["continue"]}
    )
    assert wrong.status_code == 400 and "continue token" in wrong.json()["detail"]


def test_jobs_show_placement_reason_queue_position_and_usage(client: Client) -> None:
    items = client.get("/api/v1/jobs", headers=auth()).json()["items"]
    jobs = {(j["namespace"], j["name"]): j for j in items}
    assert [(j["namespace"], j["kind"], j["name"]) for j in items] == sorted(
        (j["namespace"], j["kind"], j["name"]) for j in items
    )
    bert = jobs[("team-a", "bert")]
    assert bert["waiting"] is None and bert["queuePosition"] is None
    assert bert["placement"] == [
        {
            "pod": "bert-worker-0", "node": "a100-mig-0", "gpuType": "A100-80GB", "gpus": [0],
            "migSlice": "1g.10gb@0", "powerCapW": None,
        }
    ]  # fmt: skip
    assert bert["gpuSeconds"] == 60.0 and bert["estimatedEnergyJoules"] == 9000.0
    old = jobs[("team-a", "old")]
    assert old["waiting"] == {
        "reason": "ReplicaExceedsNode",
        "message": "needs 16 x H100-80GB on one node; the largest node has 8 GPUs",
    }
    # One queue ("default"): priority first, then creation time.
    positions = {name: jobs[(ns, name)]["queuePosition"] for ns, name in jobs if name != "bert"}
    assert positions == {"llama": None, "high": 1, "old": 2, "new": 3}


@pytest.mark.parametrize(
    ("params", "names"),
    [
        pytest.param({"namespace": "team-b"}, ["high", "llama"], id="namespace"),
        pytest.param({"queue": "research"}, ["llama"], id="queue"),
        pytest.param({"phase": "Queued"}, ["new", "old", "high"], id="phase"),
        pytest.param({"kind": "ServingJob"}, [], id="kind"),
    ],
)
def test_job_filters(client: Client, params: dict[str, str], names: list[str]) -> None:
    items = client.get("/api/v1/jobs", headers=auth(), params=params).json()["items"]
    assert [j["name"] for j in items] == names


def test_jobs_paginate(client: Client) -> None:
    first = client.get("/api/v1/jobs", headers=auth(), params={"limit": 2}).json()
    assert len(first["items"]) == 2 and first["metadata"]["remainingItemCount"] == 3
    rest = client.get(
        "/api/v1/jobs", headers=auth(), params={"continue": first["metadata"]["continue"]}
    ).json()
    names = [j["name"] for j in first["items"] + rest["items"]]
    assert names == ["bert", "new", "old", "high", "llama"]


def test_a_user_sees_only_namespaces_they_may_list() -> None:
    jobs, pods = _cluster()
    reviewer = FakeReviewer(admin_grants() | {("viewer", "list", "trainingjobs", "team-b")})
    with served(context(live_fleet(sandbox_nodes(), pods, jobs), reviewer)) as c:
        items = c.get("/api/v1/jobs", headers=auth("viewer-token")).json()["items"]
        assert {j["namespace"] for j in items} == {"team-b"}
        denied = c.get("/api/v1/jobs", headers=auth("viewer-token"), params={"namespace": "team-a"})
        assert denied.status_code == 403
        assert (
            "viewer may not list trainingjobs.gpufleet.io in namespace team-a"
            in (denied.json()["detail"])
        )
        # Queue positions still count the jobs the user cannot see.
        high = next(j for j in items if j["name"] == "high")
        assert high["queuePosition"] == 1


def test_one_job_and_unknown_ones(client: Client) -> None:
    job = client.get("/api/v1/jobs/team-b/TrainingJob/llama", headers=auth())
    assert job.status_code == 200 and job.json()["gpuType"] == "H100-80GB"
    assert [r["pod"] for r in job.json()["placement"]] == ["llama-worker-0", "llama-worker-1"]
    missing = client.get("/api/v1/jobs/team-b/TrainingJob/nope", headers=auth())
    assert missing.status_code == 404
    assert missing.json()["detail"] == "TrainingJob team-b/nope not found"
    bad_kind = client.get("/api/v1/jobs/team-b/Pod/llama", headers=auth())
    assert bad_kind.status_code == 422


def test_reasons_without_a_code_and_from_the_job_condition() -> None:
    foreign = training_job("foreign", "team-a", gpus=8, phase="Queued")
    pods = [waiting(p, "0/3 nodes are available") for p in job_pods(foreign)]
    # No pod yet (the operator waits for the previous workers to exit): the condition says why.
    podless = training_job("podless", "team-a", gpus=8, phase="Queued")
    text = pending_text(PendingReason.INSUFFICIENT_GPUS, "needs 8 x H100-80GB, 4 free")
    podless["status"]["conditions"] = [
        {"type": "Admitted", "status": "False", "reason": "InsufficientFreeGpus", "message": text}
    ]
    live = live_fleet(sandbox_nodes(), pods, [foreign, podless])
    with served(context(live)) as c:
        items = {j["name"]: j for j in c.get("/api/v1/jobs", headers=auth()).json()["items"]}
    assert items["foreign"]["waiting"] == {
        "reason": "Unknown",
        "message": "0/3 nodes are available",
    }
    assert items["podless"]["waiting"] == {
        "reason": "InsufficientFreeGpus",
        "message": "needs 8 x H100-80GB, 4 free",
    }
