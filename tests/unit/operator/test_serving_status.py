"""A ServingJob's status from its Deployments and this pass's scaling: per-pool counts, desired
replicas and the last scale time/reason (kept when nothing changed), phase rules, Ready and
per-pool conditions (with the scheduler's reason while replicas wait for GPUs), ScalingActive
and MetricsAvailable, and the Events: Scaled per change, one per phase transition, one per
metrics transition, deduplicated by what was posted before; with standbys, the ready count is
the one the pass counted (awake replicas that serve), not the Deployment's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.model.contract.reasons import PendingNote
from gpufleet.model.servingjob import ServingJobStatus
from gpufleet.operator.serving_status import (
    METRICS_AVAILABLE,
    POOL_CREATED,
    SCALED,
    MetricsHealth,
    Posted,
    ScaleChange,
    plan,
)

NOW = datetime(2026, 12, 2, 15, 0, 0, tzinfo=UTC)
EARLIER = "2026-12-02T14:00:00Z"


def job(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "llm", "namespace": "ns", "uid": "u", "generation": 3},
        "spec": {},
        "status": status or {},
    }


def dep(replicas: int, ready: int) -> dict[str, Any]:
    return {
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas, "readyReplicas": ready},
    }


def cond(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_pool_status_counts_and_schema() -> None:
    out = plan(job(), {"prefill": dep(2, 1), "decode": None}, {"prefill": 2, "decode": 1}, NOW)
    assert out.status["prefill"] == {"replicas": 2, "readyReplicas": 1, "desiredReplicas": 2}
    assert out.status["decode"] == {"replicas": 0, "readyReplicas": 0, "desiredReplicas": 1}
    assert out.status["observedGeneration"] == 3
    ServingJobStatus.model_validate(out.status)  # the CRD's own schema accepts it


def test_with_standbys_ready_counts_the_replicas_that_serve() -> None:
    # The Deployment reports 3 pods ready (its count lags the awake conditions): one is an
    # asleep standby and one was woken and is still waking; 1 serves, what the pass counted.
    serving = {"prefill": 1}
    out = plan(
        job(), {"prefill": dep(3, 3)}, {"prefill": 2}, NOW, asleep={"prefill": 1}, ready=serving
    )
    assert out.status["prefill"] == {
        "replicas": 3,
        "asleepReplicas": 1,
        "readyReplicas": 1,
        "desiredReplicas": 2,
    }
    assert out.status["phase"] == "Progressing"  # neither standby serves yet
    full = plan(
        job(),
        {"prefill": dep(3, 2)},
        {"prefill": 2},
        NOW,
        asleep={"prefill": 1},
        ready={"prefill": 2},
    )
    assert full.status["phase"] == "Ready" and full.status["prefill"]["readyReplicas"] == 2
    ServingJobStatus.model_validate(out.status)


def test_a_change_sets_time_reason_and_a_scaled_event() -> None:
    change = ScaleChange("decode", 1, 3, "decode: scale 1->3 (scale_up_capacity); demand 90 seqs")
    out = plan(job(), {"decode": dep(3, 1)}, {"decode": 3}, NOW, changes=[change])
    assert out.status["decode"]["lastScaleTime"] == "2026-12-02T15:00:00Z"
    assert out.status["decode"]["lastScaleReason"] == change.message
    assert ("Normal", SCALED, change.message) in out.events
    created = ScaleChange("decode", None, 1, "decode: created with 1 replicas (minReplicas)")
    out = plan(job(), {"decode": dep(1, 0)}, {"decode": 1}, NOW, changes=[created])
    assert ("Normal", POOL_CREATED, created.message) in out.events


def test_last_scale_is_kept_when_nothing_changed_and_truncated_when_long() -> None:
    before = {"decode": {"lastScaleTime": EARLIER, "lastScaleReason": "decode: scale 1->2"}}
    out = plan(job(before), {"decode": dep(2, 2)}, {"decode": 2}, NOW)
    assert out.status["decode"]["lastScaleTime"] == EARLIER
    assert out.status["decode"]["lastScaleReason"] == "decode: scale 1->2"
    long = ScaleChange("decode", 2, 3, "x" * 5000)
    out = plan(job(before), {"decode": dep(3, 2)}, {"decode": 3}, NOW, changes=[long])
    assert len(out.status["decode"]["lastScaleReason"]) == 1024


@pytest.mark.parametrize(
    ("ready", "previous", "phase"),
    [
        pytest.param({"prefill": 2, "decode": 1}, None, "Ready", id="all-ready"),
        pytest.param({"prefill": 1, "decode": 1}, "Ready", "Progressing", id="scaling-up"),
        pytest.param({"prefill": 0, "decode": 1}, None, "Pending", id="starting"),
        pytest.param({"prefill": 0, "decode": 0}, "Pending", "Pending", id="still-starting"),
        pytest.param({"prefill": 0, "decode": 1}, "Ready", "Degraded", id="lost-a-pool"),
        pytest.param({"prefill": 0, "decode": 1}, "Progressing", "Degraded", id="lost-while-up"),
    ],
)
def test_phase(ready: dict[str, int], previous: str | None, phase: str) -> None:
    desired = {"prefill": 2, "decode": 1}
    deployments = {p: dep(desired[p], ready[p]) for p in desired}
    out = plan(job({"phase": previous} if previous else None), deployments, desired, NOW)
    assert out.status["phase"] == phase


def test_ready_conditions_per_pool_and_overall() -> None:
    out = plan(job(), {"prefill": dep(2, 2), "decode": dep(2, 1)}, {"prefill": 2, "decode": 2}, NOW)
    ready = cond(out.status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReplicasNotReady")
    assert ready["message"] == "prefill 2/2 ready, decode 1/2 ready"
    assert cond(out.status, "PrefillReady")["status"] == "True"
    assert cond(out.status, "DecodeReady")["message"] == "1/2 replicas ready"
    out = plan(job(), {"server": dep(1, 1)}, {"server": 1}, NOW)
    assert cond(out.status, "Ready")["reason"] == "AllPoolsReady"
    assert cond(out.status, "ServerReady")["status"] == "True"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param(
            "InsufficientFreeGpus: no node has 2 free H100-80GB", "InsufficientFreeGpus", id="core"
        ),
        pytest.param("ReplicaExceedsNode: needs 16 x H100-80GB", "ReplicaExceedsNode", id="core2"),
        pytest.param("GangNotReady: restarting", "GangNotReady", id="scheduler"),
        # The `queue` field's description: a missing queue, a queue that does not take them.
        pytest.param("QueueNotFound: queue gone does not exist", "QueueNotFound", id="no-queue"),
        pytest.param(
            "QueueNotAllowed: priority 5 is outside queue q's priority range 10-20",
            "QueueNotAllowed",
            id="queue-refuses",
        ),
        pytest.param("0/3 nodes are available", "InsufficientGPUs", id="unknown-code"),
    ],
)
def test_scheduler_reason_while_replicas_wait_for_gpus(text: str, reason: str) -> None:
    waiting = PendingNote.parse(text)
    out = plan(job(), {"server": dep(1, 0)}, {"server": 1}, NOW, waiting=waiting)
    ready = cond(out.status, "Ready")
    assert ready["reason"] == reason and text in ready["message"]


def test_transition_time_moves_only_with_the_status() -> None:
    before = {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "ReplicasNotReady",
                "message": "old",
                "lastTransitionTime": EARLIER,
            }
        ]
    }
    still = plan(job(before), {"server": dep(2, 1)}, {"server": 2}, NOW)
    assert cond(still.status, "Ready")["lastTransitionTime"] == EARLIER
    flipped = plan(job(before), {"server": dep(2, 2)}, {"server": 2}, NOW)
    assert cond(flipped.status, "Ready")["lastTransitionTime"] == "2026-12-02T15:00:00Z"


def test_autoscaling_disabled() -> None:
    out = plan(job(), {"server": dep(1, 1)}, {"server": 1}, NOW, metrics=None)
    scaling = cond(out.status, "ScalingActive")
    assert (scaling["status"], scaling["reason"]) == ("False", "AutoscalingDisabled")
    assert all(c["type"] != METRICS_AVAILABLE for c in out.status["conditions"])


@pytest.mark.parametrize(
    ("health", "status", "reason"),
    [
        pytest.param(
            MetricsHealth(True, message="metrics are fresh"), "True", "MetricsFresh", id="ok"
        ),
        pytest.param(
            MetricsHealth(False, message="cannot connect"), "False", "MetricsMissing", id="down"
        ),
        pytest.param(MetricsHealth(False, True, "old sample"), "False", "MetricsStale", id="stale"),
    ],
)
def test_metrics_conditions(health: MetricsHealth, status: str, reason: str) -> None:
    out = plan(job(), {"server": dep(1, 1)}, {"server": 1}, NOW, metrics=health)
    for kind in (METRICS_AVAILABLE, "ScalingActive"):
        c = cond(out.status, kind)
        assert (c["status"], c["reason"], c["message"]) == (status, reason, health.message)
    ServingJobStatus.model_validate(out.status)


def test_before_the_first_tick_scaling_is_unknown() -> None:
    out = plan(job(), {"server": dep(1, 1)}, {"server": 1}, NOW, metrics=MetricsHealth(None))
    assert cond(out.status, "ScalingActive")["status"] == "Unknown"
    assert all(c["type"] != METRICS_AVAILABLE for c in out.status["conditions"])


def test_events_for_transitions_once() -> None:
    down = MetricsHealth(False, message="Prometheus at http://x: cannot connect")
    first = plan(job(), {"server": dep(1, 0)}, {"server": 1}, NOW, metrics=down)
    assert ("Warning", "MetricsUnavailable", down.message) in first.events
    assert ("Normal", "Pending", "waiting for replicas (server 0/1 ready)") in first.events
    # A second pass reading the same stale body: nothing new to say.
    again = plan(
        job(), {"server": dep(1, 0)}, {"server": 1}, NOW, metrics=down, posted=first.posted
    )
    assert again.events == []
    up = MetricsHealth(True, message="metrics are fresh")
    back = plan(job(), {"server": dep(1, 1)}, {"server": 1}, NOW, metrics=up, posted=again.posted)
    assert ("Normal", METRICS_AVAILABLE, "metrics are fresh again") in back.events
    assert ("Normal", "Ready", "all pools ready (server 1/1 ready)") in back.events
    assert back.posted == Posted(phase="Ready", metrics="True")


def test_rejected_deployment_fails_the_job() -> None:
    error = "Deployment llm-server: spec.template.spec.containers[0].image: Required value"
    out = plan(job(), {}, {"server": 0}, NOW, create_error=error)
    assert out.status["phase"] == "Failed"
    ready = cond(out.status, "Ready")
    assert (ready["reason"], ready["message"]) == ("DeploymentRejected", error)
    assert ("Warning", "Failed", error) in out.events
