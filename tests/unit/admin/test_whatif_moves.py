"""The what-if reports the moves the core plans to make room for the asked gang (`Move` with
`for_gang`), from the decision it already takes (admin/whatif.py).

Hand-built after tests/unit/core/test_queue_reclaim_relocation.py, as operator-made pods: three
A100 nodes. a0: six one-GPU jobs of `ones` (nominal 0, all borrowed) and two of `keeper`
(nominal 1: it borrows one GPU, so a reclaim may take one of them and then must stop); a1: an
8-GPU job of `full`; a2: a 4-GPU job of `full` and four free GPUs. Every job checkpoints on a
signal and has run for two hours. An 8-GPU job of `lender` (nominal 8) is owed its quota, but
no reclaim alone can free a node: the core reclaims a0's borrowed GPUs (the six `ones` jobs
and one `keeper` job), moves the other `keeper` job to a2 and places the job on a0, in one
decision (core/evacuation.py, reclaim with moves).

- the what-if's answer names that move beside the evictions: the moved gang and its job and
  pods, its GPU type, from a0 to a2, the price the core charged (the restart: same type, nothing
  unsaved) and the message of the scheduler's event;
- beside a scheduler, the scheduler given the job moves the very gang, with that message;
- over HTTP the field is `moves`, camelCase, empty for a gang placed without moving anyone,
  and optional in the published schema (older answers had no such field); `gpufleet whatif`
  prints the move under the waiting gang.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from admin_fakes import auth, bind, context, job_pods, live_fleet, served, training_job

from gpufleet.admin.cli import show_whatif
from gpufleet.admin.live import JobStore, LiveFleet
from gpufleet.admin.main import create_app
from gpufleet.admin.steps import BesideScheduler
from gpufleet.admin.whatif import what_if
from gpufleet.model.gpus import load_catalog
from gpufleet.model.trainingjob import TrainingJob
from tests.unit.scheduler.scheduler_builders import NodeBuilder
from tests.unit.scheduler.scheduler_fakes import GREEDY, FakeBinder, scheduler

A100 = "A100-80GB"
NS = "team-a"
GRACE = 2  # seconds the jobs take to save on SIGTERM
RESTART = 60.0  # SchedulerSettings.move_restart_s, the default
NOMINAL = {"lender": 8, "ones": 0, "keeper": 1, "full": 12}


def _queue(name: str, nominal: int) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {"quotas": [{"gpuType": A100, "nominal": nominal}]},
    }


def _running(name: str, queue: str, node: str, gpus: tuple[int, ...]) -> tuple[Any, Any]:
    """A running one-replica job of `queue` on `gpus` of `node`, checkpointing on a signal,
    started two hours ago; its pod as the scheduler's binding leaves it."""
    job = training_job(name, NS, gpus=len(gpus), gpu_type=A100, queue=queue, phase="Running")
    job["spec"]["checkpoint"] = {"onSignal": True, "gracePeriodSeconds": GRACE}
    (pod,) = job_pods(job)
    pod = bind(pod, node, ",".join(map(str, gpus)), A100)
    started = datetime.now(UTC) - timedelta(hours=2)
    pod["status"]["startTime"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    return job, pod


def _fleet() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes, pods and jobs of the module docstring."""
    nodes = [NodeBuilder(f"a{i}", A100, 8).obj() for i in range(3)]
    made = [_running(f"one-{k}", "ones", "a0", (k,)) for k in range(6)]
    made += [_running("keep-0", "keeper", "a0", (6,)), _running("keep-1", "keeper", "a0", (7,))]
    made.append(_running("full-a1", "full", "a1", tuple(range(8))))
    made.append(_running("full-a2", "full", "a2", (0, 1, 2, 3)))
    return nodes, [pod for _, pod in made], [job for job, _ in made]


def _with_queues(live: LiveFleet) -> LiveFleet:
    live.cache.replace_queues([_queue(q, n) for q, n in NOMINAL.items()])
    live.cache.replace_namespaces([{"metadata": {"name": NS}}])
    return live


def _manifest(name: str, gpus: int, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "gpusPerReplica": gpus,
            "gpuTypes": [{"name": A100}],
            "queue": queue,
            "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}},
        },
    }


def _message() -> str:
    """The scheduler's event message for the move (scheduler/mover.py, `move_message`)."""
    return (
        f"moved to {A100} (from {A100}) to empty a node for waiting gang {NS}/lender: "
        f"expected to finish {RESTART + GRACE:.0f}s later"
    )


def test_the_move_made_for_the_gang_is_the_schedulers() -> None:
    nodes, pods, jobs = _fleet()
    live = _with_queues(live_fleet(nodes, pods, jobs))
    binder = FakeBinder()
    sched = scheduler(live.cache, binder)
    beside = LiveFleet(live.cache, JobStore(), load_catalog(), steps=BesideScheduler(sched))
    job = TrainingJob.model_validate(_manifest("lender", 8, "lender"))

    answer = what_if(beside, job, GREEDY, "greedy")
    (gang,) = answer.gangs
    assert gang.placed and {r.node for r in gang.replicas} == {"a0"}, gang
    (move,) = gang.moves
    moved = move.gang.split("/")[1]
    assert moved in {"keep-0", "keep-1"}, move
    kept = "keep-1" if moved == "keep-0" else "keep-0"
    victims = {v.gang.split("/")[1] for v in gang.preempts}
    assert victims == {*(f"one-{k}" for k in range(6)), kept}, victims
    assert move.job is not None and (move.job.namespace, move.job.name) == (NS, moved)
    assert move.pods == [f"{NS}/{moved}-worker-0"]
    assert (move.from_gpu_type, move.gpu_type) == (A100, A100)
    assert (move.from_nodes, move.to_nodes) == (["a0"], ["a2"])
    (replica,) = move.replicas
    assert replica.node == "a2" and len(replica.gpus) == 1 and replica.gpus[0] >= 4
    # The price the core charged: the restart and the checkpoint's grace (same type, nothing
    # unsaved with a checkpoint on a signal).
    assert move.delay_s == pytest.approx(RESTART + GRACE)
    assert move.reason == _message()

    # The scheduler, given the job, moves that very gang, with that message on its event.
    live.cache.replace_pods([*live.cache.state().pods, *job_pods(_manifest_obj())])
    report = sched.run_cycle()
    assert report.moved == [move.gang] and binder.move_messages == [move.reason]
    assert [key for key, _ in binder.moved] == move.pods


def _manifest_obj() -> dict[str, Any]:
    """The lender job as the API server would show it once created."""
    job = _manifest("lender", 8, "lender")
    job["metadata"]["uid"] = "uid-lender"
    return job


@pytest.fixture
def http() -> Iterator[Any]:
    nodes, pods, jobs = _fleet()
    with served(context(_with_queues(live_fleet(nodes, pods, jobs)))) as client:
        yield client


def test_the_answer_carries_the_moves_as_json(http: Any) -> None:
    doc = http.post("/api/v1/whatif", headers=auth(), json=_manifest("lender", 8, "lender"))
    assert doc.status_code == 200, doc.text
    (gang,) = doc.json()["gangs"]
    assert gang["placed"] and len(gang["preempts"]) == 7, gang
    (move,) = gang["moves"]
    moved = move["gang"].split("/")[1]
    assert move == {
        "gang": f"{NS}/{moved}",
        "job": {"namespace": NS, "kind": "TrainingJob", "name": moved},
        "pods": [f"{NS}/{moved}-worker-0"],
        "fromGpuType": A100,
        "gpuType": A100,
        "fromNodes": ["a0"],
        "toNodes": ["a2"],
        "replicas": move["replicas"],
        "delayS": pytest.approx(RESTART + GRACE),
        "reason": _message(),
    }
    printed = show_whatif(doc.json()).splitlines()
    assert f"    moves {NS}/{moved} from a0 ({A100}) to a2 ({A100}), 62s later" in printed
    # A gang placed on free GPUs moves no one.
    small = http.post("/api/v1/whatif", headers=auth(), json=_manifest("small", 2, "full"))
    (gang,) = small.json()["gangs"]
    assert gang["placed"] and gang["moves"] == [], gang


def test_the_field_is_optional_in_the_published_schema() -> None:
    schemas = create_app(context(live_fleet([], [], []))).openapi()["components"]["schemas"]
    outcome = schemas["GangOutcomePublic"]
    assert "moves" in outcome["properties"] and "moves" not in outcome.get("required", [])
    assert outcome["properties"]["moves"]["items"] == {"$ref": "#/components/schemas/MovePublic"}
    assert {"delayS", "reason", "fromNodes", "toNodes"} <= set(schemas["MovePublic"]["properties"])
