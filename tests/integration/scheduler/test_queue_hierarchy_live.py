"""A queue hierarchy on the sandbox: what the scheduler reports on the queues' status.

A department with a nominal quota of 8 T4 and two teams under it whose nominal quotas add up to
12 (each alone fits the department, so the admission policy takes them):
- the department's status says Oversubscribed=True (ChildrenExceedParent, naming T4), the teams'
  say False; a team's running job counts in its own and the department's `used`, matching the
  pods;
- a queue whose parent does not exist is Active=False (ParentNotFound) and its job waits with
  QueueNotFound naming the missing parent;
- three queues each other's parents in a ring (the admission policy refuses two-queue cycles
  only: it compares a queue with one other) are accepted, each Active=False (ParentCycle), and
  a job in one of them waits with QueueNotFound naming the cycle.
Every queue made here is deleted at the end of the module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration

SUFFIX = uuid.uuid4().hex[:6]
DEPT, TEAM_X, TEAM_Y = f"dept-{SUFFIX}", f"team-x-{SUFFIX}", f"team-y-{SUFFIX}"
ORPHAN, GONE = f"orphan-{SUFFIX}", f"gone-{SUFFIX}"
RING = (f"ring-a-{SUFFIX}", f"ring-b-{SUFFIX}", f"ring-c-{SUFFIX}")
GROUP, VERSION = "gpufleet.io", "v1alpha1"


def _queue(name: str, t4: int, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"quotas": [{"gpuType": "T4", "nominal": t4}]} if t4 else {}
    if parent is not None:
        spec["parent"] = parent
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def _status(kube: Kube, name: str) -> dict[str, Any]:
    obj: Any = kube.custom.get_cluster_custom_object(GROUP, VERSION, "gpuqueues", name)
    return dict(obj.get("status") or {})


def _condition(kube: Kube, name: str, kind: str) -> dict[str, Any] | None:
    found = [c for c in _status(kube, name).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else None


def _t4_used(kube: Kube, name: str) -> int | None:
    rows = _status(kube, name).get("resources") or []
    return next((r["used"] for r in rows if r["gpuType"] == "T4" and "migProfile" not in r), None)


def _reason(kube: Kube, ns: str, job: str) -> tuple[str, str] | None:
    """The job's pending reason once the scheduler has given one."""
    condition = kube.condition(ns, job, "Admitted")
    if condition is None or condition["reason"] in ("WaitingForScheduler", "Admitted"):
        return None
    return str(condition["reason"]), str(condition["message"])


def _job(name: str, queue: str) -> dict[str, Any]:
    manifest = training_job(name, 1, gpus=4, gpu_type="T4")
    manifest["spec"]["queue"] = queue
    return manifest


@pytest.fixture(scope="module")
def hierarchy(kube: Kube, sandbox: Sandbox) -> Iterator[None]:
    for body in (_queue(DEPT, 8), _queue(TEAM_X, 8, DEPT), _queue(TEAM_Y, 4, DEPT)):
        kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", body)
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", _queue(ORPHAN, 4, GONE))
    yield
    sandbox.kubectl("delete", "gq", TEAM_X, TEAM_Y, ORPHAN, DEPT, "--ignore-not-found", check=False)


def test_children_over_the_parent_are_reported_and_usage_adds_up(
    kube: Kube, ns: str, hierarchy: None
) -> None:
    over = wait_for(
        lambda: (c := _condition(kube, DEPT, "Oversubscribed")) and c["status"] == "True" and c,
        "the department's status saying its children exceed it",
        30,
    )
    assert over["reason"] == "ChildrenExceedParent" and "T4" in over["message"], over
    for team in (TEAM_X, TEAM_Y):
        fits = wait_for(lambda t=team: _condition(kube, t, "Oversubscribed"), f"{team} status", 30)
        assert fits["status"] == "False", fits

    kube.create_job(ns, _job("x1", TEAM_X))
    wait_for(lambda: kube.phase(ns, "x1") == "Running", "x1 Running", 60)
    pods = kube.pods(ns, "gpufleet.io/trainingjob=x1")
    held = sum(len(p["metadata"]["annotations"][names.ASSIGNED_GPUS].split(",")) for p in pods)
    assert held == 4
    wait_for(
        lambda: _t4_used(kube, TEAM_X) == held and _t4_used(kube, DEPT) == held,
        "the team's and the department's status showing what the pods hold",
        30,
    )
    assert _t4_used(kube, TEAM_Y) == 0


def test_a_queue_whose_parent_is_missing_takes_no_jobs(
    kube: Kube, ns: str, hierarchy: None
) -> None:
    active = wait_for(
        lambda: (c := _condition(kube, ORPHAN, "Active")) and c["status"] == "False" and c,
        "the orphan's status saying it takes no jobs",
        30,
    )
    assert active["reason"] == "ParentNotFound" and GONE in active["message"], active
    kube.create_job(ns, _job("lost", ORPHAN))

    why = wait_for(lambda: _reason(kube, ns, "lost"), "the orphan's job says why it waits", 30)
    assert why[0] == "QueueNotFound" and f"parent {GONE} does not exist" in why[1], why


def test_queues_on_a_longer_parent_cycle_take_no_jobs(
    kube: Kube, ns: str, sandbox: Sandbox
) -> None:
    a, b, c = RING
    try:
        # a -> b -> c -> a, created while each parent is still missing or not yet closing the
        # ring, so the policy (one other queue at a time) sees no two-queue cycle.
        for name, parent in ((a, b), (b, c), (c, a)):
            kube.custom.create_cluster_custom_object(
                GROUP, VERSION, "gpuqueues", _queue(name, 0, parent)
            )
        for name in RING:
            active = wait_for(
                lambda n=name: (
                    (got := _condition(kube, n, "Active")) and got["status"] == "False" and got
                ),
                f"{name}'s status saying it takes no jobs",
                30,
            )
            assert active["reason"] == "ParentCycle" and "parent cycle" in active["message"]
        kube.create_job(ns, _job("ringed", a))
        why = wait_for(lambda: _reason(kube, ns, "ringed"), "the ring's job says why it waits", 30)
        assert why[0] == "QueueNotFound" and f"parent cycle {a} -> " in why[1], why
    finally:
        sandbox.kubectl("delete", "gq", *RING, "--ignore-not-found", check=False)
