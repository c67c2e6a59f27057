"""GET /queues and GET /queues/{name} on a fixed cluster (the sandbox's default fleet):

- each queue's figures per GPU type (nominal, used, borrowed, pending, held), its running and
  waiting jobs and conditions, equal to the status body the scheduler's writer makes of the
  same view (`QueueStatusWriter`), a queue whose parent does not exist shown not Active;
- pages by limit and continue; one queue; 404 (a problem) for an unknown one; 403 without
  `list`/`get` on gpuqueues; an empty list where no GPUQueue exists;
- `gpufleet queues` prints one row per queue and GPU type.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

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
)
from httpx import Client

from gpufleet.admin.cli import run_client
from gpufleet.admin.live import LiveFleet
from gpufleet.scheduler.queue_objects import QueueStatusWriter


def _queue(name: str, nominal: int, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"quotas": [{"gpuType": "H100-80GB", "nominal": nominal}]}
    if parent is not None:
        spec["parent"] = parent
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def _live() -> LiveFleet:
    """research runs 8 H100s (its quota); team runs 8 (4 borrowed) and waits for 16 more;
    orphan's parent does not exist."""
    llama = training_job("llama", "team-b", replicas=2, gpus=4, queue="research", phase="Running")
    big = training_job("big", "team-a", gpus=8, queue="team", phase="Running")
    wide = training_job("wide", "team-a", gpus=16, queue="team", phase="Queued")
    first, second = job_pods(llama)
    pods = [
        bind(first, "h100-0", "0,1,2,3", "H100-80GB"),
        bind(second, "h100-0", "4,5,6,7", "H100-80GB"),
        *[bind(p, "h100-1", "0,1,2,3,4,5,6,7", "H100-80GB") for p in job_pods(big)],
        *job_pods(wide),
    ]
    live = live_fleet(sandbox_nodes(), pods, [llama, big, wide])
    live.cache.replace_namespaces([{"metadata": {"name": ns}} for ns in ("team-a", "team-b")])
    live.cache.replace_queues(
        [_queue("research", 8), _queue("team", 4), _queue("orphan", 2, parent="nowhere")]
    )
    return live


@pytest.fixture
def live() -> LiveFleet:
    return _live()


@pytest.fixture
def client(live: LiveFleet) -> Iterator[Client]:
    with served(context(live)) as c:
        yield c


def _h100(queue: dict[str, Any]) -> dict[str, Any]:
    [row] = [r for r in queue["resources"] if r["gpuType"] == "H100-80GB"]
    return row


def test_queues_show_the_figures_their_status_shows(client: Client, live: LiveFleet) -> None:
    doc = client.get("/api/v1/queues", headers=auth()).json()
    queues = {q["name"]: q for q in doc["items"]}
    assert list(queues) == ["orphan", "research", "team"]
    research, team, orphan = queues["research"], queues["team"], queues["orphan"]
    assert (research["runningJobs"], research["pendingJobs"]) == (1, 0)
    assert (team["runningJobs"], team["pendingJobs"]) == (1, 1)
    row = _h100(research)
    assert (row["nominal"], row["used"], row["borrowed"], row["pending"]) == (8, 8, 0, 0)
    row = _h100(team)
    assert (row["nominal"], row["used"], row["borrowed"], row["pending"]) == (4, 8, 4, 16)
    assert {c["type"]: c["status"] for c in research["conditions"]}["Active"] == "True"
    [active] = [c for c in orphan["conditions"] if c["type"] == "Active"]
    assert (active["status"], active["reason"]) == ("False", "ParentNotFound")
    assert orphan["parent"] == "nowhere" and research["parent"] is None
    # The very figures the scheduler's status writer makes of the same view.
    written: dict[str, dict[str, Any]] = {}
    view = live.observe().view
    QueueStatusWriter(lambda name, body: written.__setitem__(name, body)).write(
        view.snapshot, [pg.gang for pg in view.pending]
    )
    for name, body in written.items():
        shown = {k: v for k, v in queues[name].items() if k not in ("name", "parent")}
        for condition in body["conditions"]:
            del condition["lastTransitionTime"]
        assert shown == body | {"resources": [{"migProfile": None} | r for r in body["resources"]]}


def test_queues_page_and_one_queue(client: Client) -> None:
    names, token = [], None
    for _ in range(4):
        params = {"limit": "2"} | ({"continue": token} if token else {})
        page = client.get("/api/v1/queues", headers=auth(), params=params).json()
        names += [q["name"] for q in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert names == ["orphan", "research", "team"]
    one = client.get("/api/v1/queues/team", headers=auth())
    assert one.status_code == 200 and _h100(one.json())["used"] == 8
    missing = client.get("/api/v1/queues/nope", headers=auth())
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert "GPUQueue nope not found" in missing.json()["detail"]


def test_queues_need_gpuqueue_permissions(live: LiveFleet) -> None:
    grants = {g for g in admin_grants() if g[2] != "gpuqueues"}
    with served(context(live, FakeReviewer(grants))) as c:
        assert c.get("/api/v1/queues", headers=auth()).status_code == 403
        assert c.get("/api/v1/queues/team", headers=auth()).status_code == 403


def test_no_queues_without_gpuqueues() -> None:
    with served(context(live_fleet(sandbox_nodes(), [], []))) as c:
        doc = c.get("/api/v1/queues", headers=auth()).json()
        assert doc["items"] == [] and doc["metadata"]["remainingItemCount"] == 0
        assert c.get("/api/v1/queues/team", headers=auth()).status_code == 404


def test_gpufleet_queues_prints_a_table(client: Client) -> None:
    args = argparse.Namespace(
        command="queues", kubeconfig=None, context=None, server=str(client.base_url),
        token="admin-token", certificate_authority=None, insecure_skip_tls_verify=False,
        output="table",
    )  # fmt: skip
    printed: list[str] = []
    assert run_client(args, printed.append) == 0
    lines = printed[0].splitlines()
    assert lines[0].split()[:3] == ["QUEUE", "PARENT", "STATE"]
    team = next(line.split() for line in lines if line.startswith("team "))
    assert team[:2] == ["team", "Active"] and team[-6:] == ["4", "8", "4", "0", "16", "0"]
    orphan = next(line.split() for line in lines if line.startswith("orphan "))
    assert orphan[:3] == ["orphan", "nowhere", "ParentNotFound"]
