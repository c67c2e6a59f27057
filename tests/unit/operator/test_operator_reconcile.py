"""The TrainingJob state machine: pod creation, phases from pods, pending reasons from the
scheduler, gang restarts within backoffLimit, disruptions not counted, deadline, TTL, suspend,
rejected templates, preemption."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.model.contract.reasons import PendingReason, SchedulerReason, WaitReason, pending_text
from gpufleet.operator import reconcile
from gpufleet.operator.objects import TrainingJobObject
from gpufleet.operator.reconcile import TEMPLATE_REJECTED

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def job(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "replicas": 2,
        "gpusPerReplica": 1,
        "template": {"spec": {"containers": [{"name": "t", "image": "x"}]}},
    }
    base.update(spec)
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": base,
        "status": status or {},
    }


def plan(manifest: dict[str, Any], *args: Any, **kwargs: Any) -> reconcile.Plan:
    """`reconcile.plan` of a manifest, validated as the handler does."""
    return reconcile.plan(TrainingJobObject.of(manifest), *args, **kwargs)


def pod(rank: int, phase: str = "Pending", node: str | None = None, **extra: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "metadata": {
            "name": f"j-worker-{rank}",
            "labels": {names.RANK_LABEL: str(rank)},
            "annotations": {names.ASSIGNED_GPUS: str(rank), names.ASSIGNED_TYPE: "L4"},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "conditions": extra.pop("conditions", [])},
    }
    p["metadata"].update(extra)
    return p


def cond(result: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in result["conditions"] if c["type"] == kind)


def test_new_job_creates_every_worker_and_is_queued() -> None:
    out = plan(job(), [], NOW)
    assert out.create == [0, 1]
    assert out.status["phase"] == "Queued"
    assert out.events and out.events[0][1] == "Queued"


def test_pending_reason_comes_from_the_scheduler() -> None:
    message = "NoNodesOfAcceptableType: no schedulable node has V100-32GB GPUs"
    waiting = [{"type": "PodScheduled", "status": "False", "message": message}]
    out = plan(job(), [pod(0, conditions=waiting), pod(1)], NOW)
    admitted = cond(out.status, "Admitted")
    assert admitted["status"] == "False"
    assert admitted["reason"] == "NoNodesOfAcceptableType" and admitted["message"] == message
    assert out.create == []


@pytest.mark.parametrize("reason", [*PendingReason, *SchedulerReason], ids=str)
def test_every_scheduler_code_is_the_condition_reason(reason: WaitReason) -> None:
    message = pending_text(reason, "why: in detail")
    waiting = [{"type": "PodScheduled", "status": "False", "message": message}]
    admitted = cond(plan(job(), [pod(0, conditions=waiting), pod(1)], NOW).status, "Admitted")
    assert (admitted["reason"], admitted["message"]) == (reason.value, message)


def test_a_message_without_a_known_code_still_explains() -> None:
    waiting = [{"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}]
    admitted = cond(plan(job(), [pod(0, conditions=waiting), pod(1)], NOW).status, "Admitted")
    assert (admitted["reason"], admitted["message"]) == (
        "InsufficientGPUs",
        "0/3 nodes are available",
    )


def test_a_new_reason_to_wait_is_one_warning_against_the_status_read() -> None:
    first = "NoNodesOfAcceptableType: no schedulable node has V100-32GB GPUs"
    waiting = [{"type": "PodScheduled", "status": "False", "message": first}]
    pods = [pod(0, conditions=waiting), pod(1)]
    out = plan(job(), pods, NOW)
    assert ("Warning", "NoNodesOfAcceptableType", first) in out.events
    again = plan(job(out.status), pods, NOW)  # the next pass reads what this one wrote
    assert again.events == []
    other = "InsufficientGPUs: 1 of 2 workers fit"
    waiting[0]["message"] = other
    later = plan(job(again.status), pods, NOW)
    assert [e for e in later.events if e[0] == "Warning"] == [
        ("Warning", "InsufficientGPUs", other)
    ]


def test_running_when_every_worker_runs() -> None:
    out = plan(job(), [pod(0, "Running", "n0"), pod(1, "Running", "n1")], NOW)
    assert out.status["phase"] == "Running"
    assert out.status["startTime"] == "2026-01-01T12:00:00Z"
    assert out.status["placement"][1] == {"replica": 1, "node": "n1", "gpuType": "L4", "gpus": [1]}
    assert cond(out.status, "Admitted")["reason"] == "Placed"


def test_admitted_while_bound_but_not_all_running() -> None:
    out = plan(job(), [pod(0, "Running", "n0"), pod(1, "Pending", "n1")], NOW)
    assert out.status["phase"] == "Admitted"


def test_failed_worker_restarts_the_whole_gang() -> None:
    out = plan(job(), [pod(0, "Failed", "n0"), pod(1, "Running", "n1")], NOW)
    assert sorted(out.delete) == ["j-worker-0", "j-worker-1"]
    assert out.status["restarts"] == 1 and out.status["phase"] == "Queued"
    assert any(e[1] == "GangRestart" for e in out.events)


def test_no_recreation_while_old_workers_are_terminating() -> None:
    gone = pod(0, "Running", "n0", deletionTimestamp="2026-01-01T11:59:59Z")
    out = plan(job(status={"restarts": 1}), [gone], NOW)
    assert out.create == [] and out.status["restarts"] == 1


def test_backoff_limit_fails_the_job() -> None:
    out = plan(
        job(status={"restarts": 1}, runPolicy={"backoffLimit": 1}),
        [pod(0, "Failed", "n0"), pod(1, "Running", "n1")],
        NOW,
    )
    assert out.status["phase"] == "Failed"
    assert cond(out.status, "Failed")["reason"] == "BackoffLimitExceeded"
    assert out.delete == ["j-worker-1"]


def test_disrupted_worker_does_not_count_as_a_failure() -> None:
    marked = [{"type": names.DISRUPTION_TARGET, "status": "True", "reason": "NodeFailure"}]
    out = plan(job(), [pod(0, "Failed", "n0", conditions=marked), pod(1, "Running", "n1")], NOW)
    assert out.status["restarts"] == 0 and len(out.delete) == 2


def test_preemption_is_reported_until_readmitted() -> None:
    out = plan(job(status={"phase": "Running"}), [], NOW, disruption=names.PREEMPTED_REASON)
    assert out.status["phase"] == "Preempted"
    assert cond(out.status, "Preempted")["reason"] == "PreemptedByHigherPriority"
    assert out.create == [0, 1]
    again = plan(job(status=out.status), [pod(0, "Running", "n0"), pod(1, "Running", "n1")], NOW)
    assert again.status["phase"] == "Running"
    assert cond(again.status, "Preempted")["status"] == "False"


def test_all_workers_succeeded() -> None:
    out = plan(job(), [pod(0, "Succeeded", "n0"), pod(1, "Succeeded", "n1")], NOW)
    assert out.status["phase"] == "Succeeded"
    assert out.status["completionTime"] == "2026-01-01T12:00:00Z"


def test_workers_that_finished_run_again_with_their_preempted_gang() -> None:
    # Soak run: rank 0 finished, then ranks 1-3 were preempted and recreated; the scheduler
    # places only whole gangs, so the three alone waited for ever.
    spec = {"replicas": 4}
    rerun = [pod(0, "Succeeded", "n0"), pod(1), pod(2), pod(3)]
    out = plan(job(status={"phase": "Preempted"}, **spec), rerun, NOW)
    assert out.delete == ["j-worker-0"] and out.create == []
    assert out.status["phase"] == "Queued" and out.status["restarts"] == 0
    assert cond(out.status, "PodsReady")["reason"] == "GangRestart"
    # The finished worker's pod gone, it is created again with the others pending.
    assert plan(job(status=out.status, **spec), rerun[1:], NOW).create == [0]
    # Finishing one after another is not that: a worker still placed keeps the others.
    finishing = [pod(0, "Succeeded", "n0"), pod(1, "Running", "n0"), pod(2, "Pending", "n1")]
    out = plan(job(replicas=3), finishing, NOW)
    assert out.delete == [] and out.status["phase"] == "Admitted"


def test_deadline_fails_a_running_job() -> None:
    start = NOW - timedelta(seconds=61)
    status = {"phase": "Running", "startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ")}
    out = plan(
        job(status=status, runPolicy={"activeDeadlineSeconds": 60}),
        [pod(0, "Running", "n0"), pod(1, "Running", "n1")],
        NOW,
    )
    assert out.status["phase"] == "Failed"
    assert cond(out.status, "Failed")["reason"] == "DeadlineExceeded"
    assert sorted(out.delete) == ["j-worker-0", "j-worker-1"]


def test_ttl_deletes_a_finished_job() -> None:
    done = (NOW - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"phase": "Succeeded", "completionTime": done}
    assert plan(job(status=status, runPolicy={"ttlSecondsAfterFinished": 30}), [], NOW).delete_job
    assert not plan(
        job(status=status, runPolicy={"ttlSecondsAfterFinished": 60}), [], NOW
    ).delete_job
    assert not plan(job(status=status), [], NOW).delete_job


def test_suspend_deletes_workers_and_resume_recreates_them() -> None:
    out = plan(job(runPolicy={"suspend": True}), [pod(0, "Running", "n0")], NOW)
    assert out.status["phase"] == "Suspended" and out.delete == ["j-worker-0"]
    assert out.create == []
    resumed = plan(job(status=out.status), [], NOW)
    assert resumed.create == [0, 1] and resumed.status["phase"] == "Queued"
    assert cond(resumed.status, "Suspended")["status"] == "False"


def test_rejected_template_fails_until_the_spec_changes() -> None:
    out = plan(job(), [], NOW, create_error="spec.containers[0].volumeMounts[0].name: Not found")
    assert out.status["phase"] == "Failed"
    assert cond(out.status, "Failed")["reason"] == TEMPLATE_REJECTED
    assert plan(job(status=out.status), [], NOW).create == []
    edited = job(status=out.status)
    edited["metadata"]["generation"] = 2
    retry = plan(edited, [], NOW)
    assert retry.create == [0, 1] and retry.status["phase"] == "Queued"


def test_transition_time_only_moves_on_status_change() -> None:
    first = plan(job(), [], NOW)
    later = plan(job(status=first.status), [], NOW + timedelta(seconds=10))
    assert cond(later.status, "Admitted")["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_elastic_job_runs_once_its_minimum_is_placed() -> None:
    spec: dict[str, Any] = {"elastic": {"minReplicas": 2, "maxReplicas": 4}, "replicas": None}
    out = plan(job(**spec), [], NOW)
    assert out.create == [0, 1, 2, 3]
    grown = [pod(0, "Running", "n0"), pod(1, "Running", "n1"), pod(2), pod(3)]
    out = plan(job(**spec), grown, NOW)
    assert out.status["phase"] == "Running" and out.status["replicas"] == 2
    too_few = [pod(0, "Running", "n0"), pod(1), pod(2), pod(3)]
    assert plan(job(**spec), too_few, NOW).status["phase"] == "Queued"


def test_elastic_job_starts_with_replicas_then_gets_room_to_grow() -> None:
    spec = {"elastic": {"minReplicas": 1, "maxReplicas": 4}, "replicas": 2}
    assert plan(job(**spec), [], NOW).create == [0, 1]
    # Not yet admitted: no pods beyond the start size are offered.
    assert plan(job(**spec), [pod(0), pod(1)], NOW).create == []
    admitted = [pod(0, "Running", "n0"), pod(1)]
    assert plan(job(**spec), admitted, NOW).create == [2, 3]


def test_elastic_job_succeeds_when_the_workers_that_ran_succeeded() -> None:
    spec = {"elastic": {"minReplicas": 2, "maxReplicas": 4}}
    done = [pod(0, "Succeeded", "n0"), pod(1, "Succeeded", "n1"), pod(2), pod(3)]
    out = plan(job(**spec), done, NOW)
    assert out.status["phase"] == "Succeeded"
    assert sorted(out.delete) == ["j-worker-2", "j-worker-3"]  # never placed: not needed now


def given_away(rank: int, phase: str = "Running", deleting: bool = True) -> dict[str, Any]:
    """A worker of a gang of 2 the scheduler evicted, as a preemption (model.contract)."""
    p = pod(rank, phase, "n0")
    p["metadata"]["annotations"] |= {
        names.GANG_SIZE: "2",
        names.DISRUPTED_BY: names.PREEMPTED_REASON,
    }
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T11:59:59Z"
    return p


def test_an_elastic_job_whose_growth_is_given_away_runs_on_smaller() -> None:
    spec = {"elastic": {"minReplicas": 2, "maxReplicas": 4}, "replicas": None}
    running = [pod(0, "Running", "n0"), pod(1, "Running", "n1"), pod(3)]
    out = plan(job(status={"phase": "Running"}, **spec), [*running, given_away(2)], NOW)
    assert out.status["phase"] == "Running" and out.status["restarts"] == 0
    assert "Preempted" not in {c["type"] for c in out.status["conditions"]}
    assert out.create == [] and out.delete == []  # created again once gone, as room to grow
    # Its pod already Failed (not yet deleted): no failure, no gang restart; it is deleted.
    out = plan(
        job(status={"phase": "Running"}, **spec), [*running, given_away(2, "Failed", False)], NOW
    )
    assert out.status["phase"] == "Running" and out.status["restarts"] == 0
    assert out.delete == ["j-worker-2"] and out.create == []
    assert "Preempted" not in {c["type"] for c in out.status["conditions"]}
    # Gone: created again.
    assert plan(job(status=out.status, **spec), running, NOW).create == [2]


def test_a_preempted_worker_within_the_gang_size_preempts_the_job() -> None:
    assert reconcile.job_disruption(given_away(1)) == names.PREEMPTED_REASON
    assert reconcile.job_disruption(given_away(2)) is None
    lost = given_away(2)
    lost["metadata"]["annotations"][names.DISRUPTED_BY] = "NodeFailure"
    assert reconcile.job_disruption(lost) == "NodeFailure"
    unsized = given_away(2)  # no gang size on the pod: nothing says it is growth
    del unsized["metadata"]["annotations"][names.GANG_SIZE]
    assert reconcile.job_disruption(unsized) == names.PREEMPTED_REASON
    spec = {"elastic": {"minReplicas": 2, "maxReplicas": 4}, "replicas": None}
    pods = [given_away(0), given_away(1), given_away(2), pod(3)]
    out = plan(job(status={"phase": "Running"}, **spec), pods, NOW)
    assert out.status["phase"] == "Preempted"
    assert cond(out.status, "Preempted")["reason"] == "PreemptedByHigherPriority"


# -- moves -------------------------------------------------------------------------------------


def moving(rank: int, at: datetime) -> dict[str, Any]:
    """A worker the scheduler is deleting to move its gang at `at`."""
    annotations = {
        names.DISRUPTED_BY: names.MOVED_REASON,
        names.MOVED_AT: at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    p = pod(rank, "Running", node="n", deletionTimestamp="2026-01-01T12:00:00Z")
    p["metadata"]["annotations"].update(annotations)
    return p


def test_a_move_is_counted_once_with_an_event() -> None:
    at = NOW - timedelta(seconds=5)
    running = job(status={"phase": "Running", "startTime": "2026-01-01T11:00:00Z"})
    out = plan(running, [moving(0, at), moving(1, at)], NOW)
    assert out.status["moves"] == 1
    assert out.status["moveTimes"] == ["2026-01-01T11:59:55Z"]
    assert [e[1] for e in out.events].count("Moved") == 1
    assert out.create == []  # recreated once the old workers are gone
    assert out.status["restarts"] == 0  # a move is no failure
    # The next pass reads the status written: the same move is not counted again.
    again = plan(job(status={**running["status"], **out.status}), [moving(0, at)], NOW)
    assert again.status["moves"] == 1
    assert "Moved" not in [e[1] for e in again.events]
    # Its pods gone, the gang is recreated; the move time the deleted pod carried (recorded
    # by the handler) is not counted twice either.
    gone = plan(job(status={**running["status"], **out.status}), [], NOW, moved=at)
    assert gone.create == [0, 1] and gone.status["moves"] == 1


def test_a_later_move_adds_to_the_count_and_times_are_capped() -> None:
    times = [(NOW - timedelta(hours=12 - i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(10)]
    status = {"phase": "Running", "moves": 10, "moveTimes": times}
    out = plan(job(status=status), [], NOW, moved=NOW)
    assert out.status["moves"] == 11
    assert out.status["moveTimes"] == [*times[1:], "2026-01-01T12:00:00Z"]


def test_a_move_seen_only_after_its_pods_vanished_is_counted() -> None:
    out = plan(job(status={"phase": "Running"}), [], NOW, moved=NOW - timedelta(seconds=1))
    assert out.status["moves"] == 1 and out.create == [0, 1]


def test_a_job_never_moved_has_no_move_fields() -> None:
    out = plan(
        job(status={"phase": "Running"}), [pod(0, "Running", "n"), pod(1, "Running", "n")], NOW
    )
    assert "moves" not in out.status and "moveTimes" not in out.status
