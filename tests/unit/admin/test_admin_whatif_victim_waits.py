"""POST /whatif when the asked gang would wait for another gang's victim: every whole H100 is
held by a priority-0 gang of 8 GPUs, and a pending priority-900 gang of 4 GPUs evicts one of
them. A gang of 4 GPUs asked about at priority 500 takes the 4 GPUs that eviction frees and the
other gang does not need (`GangPlacement.waits_for`): it names no victim of its own (before, it
named a second gang of 8 GPUs to evict), and not the other gang's victim either; it names that
victim in `waitsFor` (empty for a gang placed on free GPUs), the CLI prints it, and the schema
publishes the field as optional."""

from __future__ import annotations

from typing import Any

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
from test_admin_whatif import manifest

from gpufleet.admin.cli import show_whatif
from gpufleet.admin.main import create_app


def test_a_gang_that_waits_for_another_gangs_victim_names_no_victim() -> None:
    jobs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for i in range(3):
        job = training_job(f"low-{i}", "team-b", replicas=1, gpus=8, phase="Running")
        jobs.append(job)
        pods += [bind(p, f"h100-{i}", "0,1,2,3,4,5,6,7", "H100-80GB") for p in job_pods(job)]
    urgent = training_job("urgent", "team-c", replicas=1, gpus=4, priority=900)
    jobs.append(urgent)
    pods += job_pods(urgent)
    nodes = sandbox_nodes()
    for node in nodes:  # the MIG H100 node is cordoned: no whole H100 is free
        if node["metadata"]["name"] == "h100-mig-0":
            node.setdefault("spec", {})["unschedulable"] = True
    live = live_fleet(nodes, pods, jobs)
    body = manifest("later", replicas=1, gpusPerReplica=4, priority=500,
                    gpuTypes=[{"name": "H100-80GB"}])  # fmt: skip
    with served(context(live)) as http:
        doc = http.post("/api/v1/whatif", headers=auth(), json=body).json()
    (gang,) = doc["gangs"]
    assert gang["placed"] and gang["gpus"] == 4
    assert gang["preempts"] == []
    # It says whom it waits for instead: the gang evicted for the urgent one, whose GPUs it takes.
    (awaited,) = gang["waitsFor"]
    victim = awaited["gang"]
    assert victim in {f"team-b/low-{i}" for i in range(3)}, awaited
    name = victim.split("/")[1]
    assert awaited["job"] == {"namespace": "team-b", "kind": "TrainingJob", "name": name}
    assert awaited["pods"] == [f"team-b/{name}-worker-0"]
    assert awaited["forGang"] == ["team-c/urgent"]
    assert f"    waits for {victim} to exit (evicted for team-c/urgent)" in (
        show_whatif(doc).splitlines()
    )


def test_a_gang_placed_on_free_gpus_waits_for_no_one() -> None:
    live = live_fleet(sandbox_nodes(), [], [])
    body = manifest("free", replicas=1, gpusPerReplica=4, priority=500,
                    gpuTypes=[{"name": "H100-80GB"}])  # fmt: skip
    with served(context(live)) as http:
        doc = http.post("/api/v1/whatif", headers=auth(), json=body).json()
    (gang,) = doc["gangs"]
    assert gang["placed"] and gang["preempts"] == [] and gang["waitsFor"] == [], gang
    assert not any("waits for" in line for line in show_whatif(doc).splitlines())


def test_the_field_is_optional_in_the_published_schema() -> None:
    schemas = create_app(context(live_fleet([], [], []))).openapi()["components"]["schemas"]
    outcome = schemas["GangOutcomePublic"]
    assert "waitsFor" in outcome["properties"] and "waitsFor" not in outcome["required"]
    items = outcome["properties"]["waitsFor"]["items"]
    assert items == {"$ref": "#/components/schemas/AwaitedVictimPublic"}
    assert outcome["properties"]["waitsFor"]["description"]
    assert {"gang", "job", "pods", "forGang"} <= set(schemas["AwaitedVictimPublic"]["properties"])
