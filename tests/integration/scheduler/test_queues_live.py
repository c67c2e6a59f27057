"""Queues on the sandbox: the operator and scheduler honour GPUQueues, and write their status.

Two teams share the 16 T4 GPUs of the default fleet, each with a nominal quota of 8:
- while team A is idle, team B borrows A's unused quota (two gangs of 8 GPUs run) and the
  queues' status shows it (B uses 16 and borrows 8, A lends 8; the numbers match the pods; B
  has a fair and an attained share, idle A a fair share of 0; `kubectl get gq -o wide` shows
  the shares);
- when A's job arrives, one whole gang of B is preempted and A's job runs; the time from A's
  job's creation to its pods bound is printed and stays within one scheduler cycle plus the
  victims' grace period (plus the operator's and kwok's reaction, bounded below); B's pods
  take their whole grace period to go (kwok's stage `kwok_grace.HONOUR_GRACE`), so A's job
  cannot be bound sooner; B's evicted job waits with QuotaExceeded naming the queue, the type
  and the numbers;
- a job naming a queue that does not exist waits with QueueNotFound, and runs once the queue is
  created (queues and jobs may come in any order); deleting a queue stops none of its running
  jobs, and a new job naming it waits with QueueNotFound;
- a job whose priority is outside its queue's range waits with QueueNotAllowed;
- a queue with a borrowing limit of 0 runs its first job within its nominal quota while its
  second, which would borrow, waits with QuotaExceeded naming the limit.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.sandbox import kwok_grace
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration

SUFFIX = uuid.uuid4().hex[:6]
TEAM_A, TEAM_B, LATE = f"team-a-{SUFFIX}", f"team-b-{SUFFIX}", f"late-{SUFFIX}"
GROUP, VERSION = "gpufleet.io", "v1alpha1"
# The victims' grace period: their pods stay (holding their GPUs) this long once deleted.
VICTIM_GRACE_S = 5
# What the operator (recreating nothing here: it only watches) and kwok (deleting the evicted
# pods, reporting the new ones Running) add to a scheduler cycle; measured at 1-3 s here.
REACTION_S = 10.0


def _queue(name: str, t4: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {"quotas": [{"gpuType": "T4", "nominal": t4}], **spec},
    }


def _job(
    name: str, queue: str, replicas: int, priority: int = 0, grace: int | None = None
) -> dict[str, Any]:
    manifest = training_job(name, replicas, gpus=4, gpu_type="T4", priority=priority)
    manifest["spec"]["queue"] = queue
    if grace is not None:  # its pods go only once their grace period is over
        template = manifest["spec"]["template"]
        template["metadata"] = {"annotations": {kwok_grace.HONOUR_GRACE: "true"}}
        template["spec"]["terminationGracePeriodSeconds"] = grace
    return manifest


@pytest.fixture(scope="module")
def teams(kube: Kube, sandbox: Sandbox) -> Iterator[None]:
    for name in (TEAM_A, TEAM_B):
        kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", _queue(name, 8))
    yield
    sandbox.kubectl("delete", "gq", TEAM_A, TEAM_B, LATE, "--ignore-not-found", check=False)


def _status(kube: Kube, name: str) -> dict[str, Any]:
    obj: Any = kube.custom.get_cluster_custom_object(GROUP, VERSION, "gpuqueues", name)
    return dict(obj.get("status") or {})


def _t4(kube: Kube, name: str) -> dict[str, Any] | None:
    rows = _status(kube, name).get("resources") or []
    return next((r for r in rows if r["gpuType"] == "T4" and "migProfile" not in r), None)


def _bound_gpus(kube: Kube, ns: str, job: str) -> int:
    pods = kube.pods(ns, f"gpufleet.io/trainingjob={job}")
    return sum(
        len(p["metadata"]["annotations"][names.ASSIGNED_GPUS].split(","))
        for p in pods
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    )


def test_borrow_while_idle_then_reclaim_by_preemption(
    kube: Kube, ns: str, sandbox: Sandbox, teams: None
) -> None:
    # Team B alone: two gangs of 2 x 4 T4 each, 16 GPUs, 8 of them borrowed from team A.
    for job in ("b1", "b2"):
        kube.create_job(ns, _job(job, TEAM_B, 2, grace=VICTIM_GRACE_S))
    for job in ("b1", "b2"):
        wait_for(lambda j=job: kube.phase(ns, j) == "Running", f"{job} Running", 60)
    used = _bound_gpus(kube, ns, "b1") + _bound_gpus(kube, ns, "b2")
    assert used == 16
    wait_for(
        lambda: (_t4(kube, TEAM_B) or {}).get("used") == used,
        "team B's status showing what its pods hold",
        30,
    )
    b, a = _t4(kube, TEAM_B), _t4(kube, TEAM_A)
    assert b is not None and a is not None
    assert (b["nominal"], b["used"], b["borrowed"], b["lent"]) == (8, 16, 8, 0)
    assert (a["nominal"], a["used"], a["borrowed"], a["lent"]) == (8, 0, 0, 8)
    status_b = _status(kube, TEAM_B)
    assert status_b["runningJobs"] == 2 and status_b["pendingJobs"] == 0
    active = {c["type"]: c for c in status_b["conditions"]}["Active"]
    assert (active["status"], active["reason"]) == ("True", "Ready")
    # Shares: idle team A deserves none; `kubectl get gq -o wide` shows both columns.
    assert status_b["fairShare"] > 0 and status_b["attainedShare"] > 0
    assert _status(kube, TEAM_A)["fairShare"] == 0
    wide = sandbox.kubectl("get", "gq", TEAM_B, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[5:9] == ["PENDING", "FAIR", "SHARE", "ATTAINED"], wide[0]
    # Read from the right: an empty PARENT cell prints nothing.
    fair, attained = (float(x) for x in wide[1].split()[-3:-1])
    assert (fair, attained) == (status_b["fairShare"], status_b["attainedShare"]), wide

    # Team A's job arrives: its nominal quota is lent, so a whole gang of B is preempted.
    started = time.monotonic()
    kube.create_job(ns, _job("a1", TEAM_A, 2))
    wait_for(lambda: _bound_gpus(kube, ns, "a1") == 8, "a1 bound", 90)
    latency = time.monotonic() - started
    bound = SchedulerSettings().resync_s + VICTIM_GRACE_S + REACTION_S
    print(f"[queues] lender's job bound {latency:.1f}s after creation (bound {bound:.0f}s)")
    # Not before the victims' pods are gone (deletionTimestamp has whole seconds: 1 s early).
    assert VICTIM_GRACE_S - 1 <= latency <= bound
    wait_for(lambda: kube.phase(ns, "a1") == "Running", "a1 Running", 30)
    print(f"[queues] lender's job Running {time.monotonic() - started:.1f}s after creation")
    running = wait_for(
        lambda: [j for j in ("b1", "b2") if _bound_gpus(kube, ns, j) == 8],
        "one of team B's gangs still bound",
        30,
    )
    assert len(running) == 1  # one whole gang preempted, the other untouched
    loser = "b2" if running == ["b1"] else "b1"
    reason = wait_for(lambda: kube.waiting_reason(ns, loser), f"{loser} says why it waits", 30)
    assert reason[0] == "QuotaExceeded", reason
    assert TEAM_B in reason[1] and "T4" in reason[1], reason
    wait_for(
        lambda: (
            (_t4(kube, TEAM_A) or {}).get("used") == 8
            and (_t4(kube, TEAM_B) or {}).get("used") == 8
        ),
        "both queues at their nominal quota in their status",
        30,
    )
    b = _t4(kube, TEAM_B)
    assert b is not None and (b["borrowed"], b["pending"]) == (0, 8)
    assert _status(kube, TEAM_A)["fairShare"] > 0  # A has work now
    assert invariants.check(kube.core) == []


def test_a_job_in_a_missing_queue_waits_until_the_queue_exists(kube: Kube, ns: str) -> None:
    kube.create_job(ns, _job("early", LATE, 1))
    reason = wait_for(lambda: kube.waiting_reason(ns, "early"), "early says why it waits", 30)
    assert reason[0] == "QueueNotFound" and f"queue {LATE} does not exist" in reason[1], reason
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", _queue(LATE, 4))
    wait_for(
        lambda: kube.phase(ns, "early") == "Running", "early Running once its queue exists", 60
    )


def test_deleting_a_queue_stops_no_running_job(kube: Kube, ns: str, sandbox: Sandbox) -> None:
    name = f"gone-{SUFFIX}"
    body = _queue(name, 4)
    body["spec"]["quotas"][0]["borrowingLimit"] = 0  # `orphan` (8 GPUs) never fits while it exists
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", body)
    try:
        kube.create_job(ns, _job("kept", name, 1))
        wait_for(lambda: kube.phase(ns, "kept") == "Running", "kept Running in its queue", 60)
    finally:
        sandbox.kubectl("delete", "gq", name, "--ignore-not-found", check=False)
    kube.create_job(ns, _job("orphan", name, 2))

    def missing() -> tuple[str, str] | None:
        reason = kube.waiting_reason(ns, "orphan")
        return reason if reason is not None and reason[0] == "QueueNotFound" else None

    # Once the scheduler has seen the deletion, the new job waits for the queue.
    reason = wait_for(missing, "orphan waiting with QueueNotFound", 30)
    assert f"queue {name} does not exist" in reason[1], reason
    assert kube.phase(ns, "kept") == "Running" and _bound_gpus(kube, ns, "kept") == 4


def test_a_priority_outside_the_queues_range_waits(kube: Kube, ns: str, sandbox: Sandbox) -> None:
    name = f"urgent-only-{SUFFIX}"
    body = _queue(name, 4, priorityRange={"min": 100})
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", body)
    try:
        kube.create_job(ns, _job("casual", name, 1, priority=5))
        reason = wait_for(lambda: kube.waiting_reason(ns, "casual"), "casual says why it waits", 30)
        assert reason[0] == "QueueNotAllowed" and "priority 5" in reason[1], reason
    finally:
        sandbox.kubectl("delete", "gq", name, "--ignore-not-found", check=False)


def test_a_borrowing_limit_of_0_keeps_a_queue_within_its_nominal(
    kube: Kube, ns: str, sandbox: Sandbox
) -> None:
    name = f"capped-{SUFFIX}"
    body = _queue(name, 4)
    body["spec"]["quotas"][0]["borrowingLimit"] = 0
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", body)
    try:
        kube.create_job(ns, _job("within", name, 1))
        wait_for(lambda: kube.phase(ns, "within") == "Running", "within Running", 60)
        kube.create_job(ns, _job("beyond", name, 1))
        reason = wait_for(lambda: kube.waiting_reason(ns, "beyond"), "beyond says why it waits", 30)
        assert reason[0] == "QuotaExceeded", reason
        assert f"queue {name} would exceed its quota for 4 x T4" in reason[1], reason
        assert "uses 4 of nominal 4 + borrowing limit 0" in reason[1], reason
    finally:
        sandbox.kubectl("delete", "gq", name, "--ignore-not-found", check=False)
