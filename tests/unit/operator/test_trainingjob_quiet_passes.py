"""A TrainingJob pass whose watched body and pods call for nothing makes no API call; a pass
that would act reads the job afresh and acts on what it read. The API clients are mocks (the
adapter's own unit test); the sandbox tests run the same passes against a real API server.

Aspects: a steady running job, a finished job before its TTL; a pod that changed, usage totals
due after USAGE_FLUSH, a TTL that is due, a pod disruption seen between passes, a first pass
after an operator start, a body older than the previous pass's write; nothing about a job
is kept once it is deleted (the per-job memory of a long-running operator stays bounded).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from unittest import mock

import kopf
import pytest
from kubernetes import client
from operator_fakes import VERSIONS, StoredJob, StoredJobHarness

from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.operator import trainingjob_handlers
from gpufleet.operator.accounting import USAGE_FLUSH

T0 = datetime(2026, 12, 3, 18, 0, tzinfo=UTC)


class Pods:
    """The handlers' `PodSource` over a list the test edits."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []

    def owned_pods(self, namespace: str, owner: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["metadata"]["labels"][names.TRAININGJOB_LABEL] == owner]

    def on_pod_deleted(self, hook: Callable[[dict[str, Any]], None]) -> None:
        self.hook = hook


def worker(rank: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"j-worker-{rank}",
            "resourceVersion": next(VERSIONS),
            "labels": {names.RANK_LABEL: str(rank), names.TRAININGJOB_LABEL: "j"},
            "annotations": {names.ASSIGNED_GPUS: "0", names.ASSIGNED_TYPE: "L4"},
        },
        "spec": {
            "nodeName": f"node-{rank}",
            "containers": [{"resources": {"limits": {names.WHOLE_GPU_RESOURCE: "1"}}}],
        },
        "status": {"phase": phase, "startTime": format_time(T0)},
    }


class Harness(StoredJobHarness):
    """A handler state whose API clients are mocks; the job as the API server has it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pods = Pods()
        self.state = trainingjob_handlers.State(client.ApiClient(client.Configuration()), self.pods)
        self.state.core = mock.MagicMock()
        self.state.custom = mock.MagicMock()
        self.now = T0
        monkeypatch.setattr(trainingjob_handlers, "_now", lambda: self.now)
        self.job = StoredJob(
            {
                "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "generation": 1},
                "spec": {
                    "replicas": 2,
                    "gpusPerReplica": 1,
                    "runPolicy": {"ttlSecondsAfterFinished": 60},
                    "template": {"spec": {"containers": [{"name": "t", "image": "x"}]}},
                },
            }
        )
        self.job.wire(self.state.custom)

    def run(self, body: dict[str, Any] | None = None) -> list[trainingjob_handlers.Event]:
        self.state.core.reset_mock()
        self.state.custom.reset_mock()
        patch = kopf.Patch()
        events = trainingjob_handlers.reconcile_pass(self.state, body or self.watched(), patch)
        assert not patch
        return events

    def calls(self) -> list[str]:
        """The API methods the last pass called, in order."""
        made = [*self.state.custom.mock_calls, *self.state.core.mock_calls]
        return [c[0] for c in made if c[0] and "." not in c[0]]

    def running(self) -> None:
        """Bring the job to Running: its two workers are created, bound and run."""
        self.run()  # first pass: creates the workers
        self.pods.pods = [worker(0), worker(1)]
        self.now += timedelta(seconds=1)
        self.run()
        assert self.stored["status"]["phase"] == "Running"


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Harness:
    out = Harness(monkeypatch)
    yield out  # type: ignore[misc]
    out.state.pool.shutdown(wait=True)


def test_a_steady_running_job_costs_no_api_call(harness: Harness) -> None:
    harness.running()
    for _ in range(int(USAGE_FLUSH.total_seconds()) - 1):
        harness.now += timedelta(seconds=1)
        assert harness.run() == []
        assert harness.calls() == []


def test_a_changed_pod_reads_the_job_afresh_and_writes_the_status(harness: Harness) -> None:
    harness.running()
    harness.pods.pods[1] = worker(1, "Succeeded")
    harness.now += timedelta(seconds=1)
    harness.run()
    assert harness.calls() == [
        "get_namespaced_custom_object",
        "patch_namespaced_custom_object_status",
    ]
    assert harness.stored["status"]["replicas"] == 1


def test_gpu_time_is_charged_every_second_and_written_every_flush(harness: Harness) -> None:
    harness.running()
    written = harness.stored["status"]["gpuSeconds"]
    for _ in range(int(USAGE_FLUSH.total_seconds())):
        harness.now += timedelta(seconds=1)
        harness.run()
    assert harness.calls() == [
        "get_namespaced_custom_object",
        "patch_namespaced_custom_object_status",
    ]
    # Two one-GPU workers for USAGE_FLUSH seconds more, though the checks wrote nothing.
    grown = harness.stored["status"]["gpuSeconds"] - written
    assert grown == pytest.approx(2 * USAGE_FLUSH.total_seconds())
    # Workers that stop between two writes, after ten checks that saw nothing change, are
    # charged up to the check that sees them stopped (at most one tick late, as before).
    for _ in range(10):
        harness.now += timedelta(seconds=1)
        harness.run()
        assert harness.calls() == []
    harness.pods.pods = [worker(0, "Succeeded"), worker(1, "Succeeded")]
    harness.now += timedelta(seconds=1)
    harness.run()
    assert harness.stored["status"]["phase"] == "Succeeded"
    total = harness.stored["status"]["gpuSeconds"] - written
    assert total == pytest.approx(2 * (USAGE_FLUSH.total_seconds() + 11))


def test_a_finished_job_waits_for_its_ttl_without_api_calls(harness: Harness) -> None:
    harness.running()
    harness.pods.pods = [worker(0, "Succeeded"), worker(1, "Succeeded")]
    harness.now += timedelta(seconds=1)
    harness.run()
    assert harness.stored["status"]["phase"] == "Succeeded"
    for _ in range(59):
        harness.now += timedelta(seconds=1)
        harness.run()
        assert harness.calls() == []
    harness.now += timedelta(seconds=1)
    harness.run()  # the TTL is due: read afresh, then the deletion a tick later
    assert harness.calls() == ["get_namespaced_custom_object"]
    harness.state.pool.shutdown(wait=True)
    assert harness.state.custom.mock_calls[-1][0] == "delete_namespaced_custom_object"


def test_a_disruption_seen_between_passes_makes_the_pass_act(harness: Harness) -> None:
    harness.running()
    gone = worker(1)
    gone["metadata"]["ownerReferences"] = [{"uid": "u1"}]
    gone["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": names.PREEMPTED_REASON}
    ]
    harness.pods.hook(gone)
    harness.pods.pods = [worker(0)]
    harness.now += timedelta(seconds=1)
    harness.run()
    assert harness.calls()[0] == "get_namespaced_custom_object"
    assert harness.stored["status"]["phase"] == "Preempted"


def test_the_first_pass_after_a_start_writes_the_usage_it_resumes(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.running()
    restarted = Harness(monkeypatch)  # a new operator process: an empty ledger
    restarted.stored, restarted.pods.pods = harness.stored, harness.pods.pods
    restarted.now = harness.now + timedelta(seconds=5)
    restarted.run()
    assert restarted.calls() == [
        "get_namespaced_custom_object",
        "patch_namespaced_custom_object_status",
    ]
    restarted.now += timedelta(seconds=1)
    restarted.run()
    assert restarted.calls() == []
    restarted.state.pool.shutdown(wait=True)


def test_a_body_older_than_the_last_write_reads_afresh_and_writes_nothing(
    harness: Harness,
) -> None:
    harness.run()
    stale = harness.watched()  # Queued, no pods yet in the cache
    harness.pods.pods = [worker(0), worker(1)]
    harness.now += timedelta(seconds=1)
    harness.run()
    assert harness.stored["status"]["phase"] == "Running"
    harness.run(stale)  # the watch has not delivered the Running status yet
    assert harness.calls() == ["get_namespaced_custom_object"]


def test_an_invalid_spec_is_read_and_marked_failed_once(harness: Harness) -> None:
    harness.stored["spec"]["replicas"] = -1
    patch = kopf.Patch()
    trainingjob_handlers.reconcile_pass(harness.state, harness.watched(), patch)
    assert harness.state.custom.get_namespaced_custom_object.called
    assert patch == {"status": {"phase": "Failed"}}  # kopf writes it after the handler
    harness.stored["status"] = {"phase": "Failed"}
    harness.run()
    assert harness.calls() == []


def test_a_deadline_makes_a_quiet_job_act_when_it_passes(harness: Harness) -> None:
    harness.stored["spec"]["runPolicy"]["activeDeadlineSeconds"] = 20
    harness.running()  # started at T0 + 1
    for _ in range(19):
        harness.now += timedelta(seconds=1)
        harness.run()
        assert harness.calls() == []
    harness.now += timedelta(seconds=1)
    harness.run()
    assert harness.calls()[0] == "get_namespaced_custom_object"
    assert harness.stored["status"]["phase"] == "Failed"


def test_a_pod_without_the_jobs_scaling_curve_makes_the_pass_annotate_it(
    harness: Harness,
) -> None:
    spec = harness.stored["spec"]
    spec["elastic"] = {"minReplicas": 1, "maxReplicas": 2, "scaling": [1, 1.5]}
    harness.running()
    assert harness.stored["status"]["scaling"] == [1, 1.5]
    # The workers (made by the test, without the annotation): the pass patches them.
    harness.now += timedelta(seconds=1)
    harness.run()
    assert [c for c in harness.calls() if c == "patch_namespaced_pod"] == [
        "patch_namespaced_pod"
    ] * 2
    for pod in harness.pods.pods:
        pod["metadata"]["annotations"][names.SCALING] = "1,1.5"
    harness.now += timedelta(seconds=1)
    harness.run()
    assert harness.calls() == []


def kept(state: trainingjob_handlers.State, uid: str) -> list[str]:
    """The per-job structures of the handler state that still hold job `uid`."""
    held = {
        "services": uid in state.services,
        "quiet": uid in state.quiet._quiet,
        "locks": uid in state.locks._locks,
        "usage": uid in state.usage._jobs,
        "disruptions": uid in state.disruptions,
        "moves": uid in state.moves,
        "tier_runs": uid in state.tier_runs,
    }
    return [name for name, there in held.items() if there]


def delete(harness: Harness) -> None:
    """The finalizer's handler, as kopf calls it once the job is being deleted."""
    meta = harness.stored["metadata"]
    trainingjob_handlers.delete_children(
        namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
        memo=SimpleNamespace(state=harness.state),
    )  # fmt: skip


def test_a_job_deleted_after_its_ttl_leaves_nothing_behind(harness: Harness) -> None:
    harness.running()
    harness.pods.pods = [worker(0, "Succeeded"), worker(1, "Succeeded")]
    for _ in range(61):  # finished, then its TTL
        harness.now += timedelta(seconds=1)
        harness.run()
    harness.state.pool.shutdown(wait=True)
    assert harness.state.custom.mock_calls[-1][0] == "delete_namespaced_custom_object"
    assert kept(harness.state, "u1") == ["services", "locks", "usage"]
    delete(harness)
    assert kept(harness.state, "u1") == []


def test_a_job_deleted_after_a_move_before_its_next_pass_leaves_nothing_behind(
    harness: Harness,
) -> None:
    harness.running()
    moved = worker(1)
    moved["metadata"]["ownerReferences"] = [{"uid": "u1"}]
    moved["metadata"]["annotations"] |= {
        names.DISRUPTED_BY: names.MOVED_REASON,
        names.MOVED_AT: format_time(harness.now),
    }
    harness.pods.hook(moved)  # the move deleted a worker; the job is deleted before a pass
    assert "disruptions" in kept(harness.state, "u1")
    assert "moves" in kept(harness.state, "u1")
    delete(harness)
    assert kept(harness.state, "u1") == []


def test_a_job_deleted_after_a_tier_eviction_before_its_next_pass_leaves_nothing_behind(
    harness: Harness,
) -> None:
    harness.running()
    evicted = worker(0)
    evicted["metadata"]["ownerReferences"] = [{"uid": "u1"}]
    evicted["metadata"]["annotations"][names.DISRUPTED_BY] = names.SERVICE_PREEMPTED_REASON
    harness.pods.hook(evicted)  # the tier evicted a worker; the job is deleted before a pass
    assert "tier_runs" in kept(harness.state, "u1")
    delete(harness)
    assert kept(harness.state, "u1") == []
