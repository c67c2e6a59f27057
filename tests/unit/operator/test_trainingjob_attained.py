"""The service a TrainingJob's ended runs received, recorded by the operator for the scheduler's
service tier (`status.attainedGpuSeconds`, copied on the pods it creates).

Aspects: a new run starts when workers are created while none holds a node (`starts_run`),
not when an elastic job grows or a member is replaced beside running ones; the pass that starts
a run records the GPU time used so far (every ended run, nothing of the future) and the new
workers carry it; a fresh job records nothing; an operator restarted between two runs records
the same service from the status it resumes; a preemption for the service tier says so in the
Preempted condition, and an elastic job's growth given away that way is still no preemption.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from operator_fakes import VERSIONS
from test_operator_reconcile import NOW, cond, given_away, job, plan, pod
from test_trainingjob_quiet_passes import T0, Harness, harness, worker

from gpufleet.model.contract import names
from gpufleet.model.contract.service import read_attained, tier_evictions_annotations
from gpufleet.model.contract.timestamps import format_time
from gpufleet.operator import reconcile

__all__ = ["harness"]  # the fixture, shared with the quiet-pass tests


def created(h: Harness) -> list[dict[str, Any]]:
    """The pods the last pass created."""
    return [c.args[1] for c in h.state.core.create_namespaced_pod.call_args_list]


def evicted(
    rank: int | dict[str, Any], reason: str = names.SERVICE_PREEMPTED_REASON
) -> dict[str, Any]:
    """Worker `rank` (or this worker) being evicted by a gpufleet preemption for `reason`."""
    p = worker(rank) if isinstance(rank, int) else copy.deepcopy(rank)
    p["metadata"]["resourceVersion"] = next(VERSIONS)  # a changed pod, as the API server has it
    p["metadata"]["annotations"][names.DISRUPTED_BY] = reason
    p["metadata"]["deletionTimestamp"] = format_time(T0)
    p["metadata"]["ownerReferences"] = [{"uid": "u1"}]  # the harness's job
    return p


@pytest.mark.parametrize(
    ("pods", "starts"),
    [
        pytest.param([], True, id="fresh-job"),
        pytest.param([pod(0, "Running", "n0")], False, id="member-replaced-beside-a-running-one"),
        pytest.param([pod(0, "Succeeded", "n0")], True, id="finished-member-holds-nothing"),
        pytest.param([{**pod(0, "Running", "n0"), "metadata": {
            "name": "j-worker-0", "labels": {names.RANK_LABEL: "0"},
            "deletionTimestamp": "2026-01-01T11:59:59Z"}}], True, id="member-being-deleted"),
    ],
)  # fmt: skip
def test_a_run_starts_when_workers_are_created_while_none_holds_a_node(
    pods: list[dict[str, Any]], starts: bool
) -> None:
    out = reconcile.Plan(create=[1])
    assert reconcile.starts_run(pods, out) is starts
    assert reconcile.starts_run(pods, reconcile.Plan()) is False  # nothing created


def test_an_elastic_jobs_growth_joins_the_current_run() -> None:
    spec = {"elastic": {"minReplicas": 1, "maxReplicas": 2}, "replicas": 1}
    running = [pod(0, "Running", "n0")]
    out = plan(job(status={"phase": "Running"}, **spec), running, NOW)
    assert out.create == [1]
    assert reconcile.starts_run(running, out) is False


def test_a_service_tier_preemption_says_so() -> None:
    pods = [given_away(0), given_away(1)]
    for p in pods:
        p["metadata"]["annotations"][names.DISRUPTED_BY] = names.SERVICE_PREEMPTED_REASON
    out = plan(job(status={"phase": "Running"}), pods, NOW)
    assert out.status["phase"] == "Preempted"
    preempted = cond(out.status, "Preempted")
    assert preempted["reason"] == "PreemptedForLessServedJob"
    assert "less service" in preempted["message"]
    # The same mark on an elastic job's replica beyond its minimum: given away, no preemption.
    assert reconcile.job_disruption(given_away(2)) is None
    beyond = given_away(2)
    beyond["metadata"]["annotations"][names.DISRUPTED_BY] = names.SERVICE_PREEMPTED_REASON
    assert reconcile.job_disruption(beyond) is None


def run_for(h: Harness, seconds: int) -> None:
    for _ in range(seconds):
        h.now += timedelta(seconds=1)
        h.run()


def test_the_pass_that_starts_a_run_records_the_ended_runs_service(harness: Harness) -> None:
    harness.run()
    assert "attainedGpuSeconds" not in harness.stored["status"]  # a fresh job: none
    assert all(names.ATTAINED not in p["metadata"]["annotations"] for p in created(harness))
    harness.pods.pods = [worker(0), worker(1)]  # two 1-GPU workers, started at T0
    harness.now += timedelta(seconds=1)
    harness.run()
    run_for(harness, 99)  # 100 s of 2 GPUs
    # Evicted for the service tier: the workers go, the job is Preempted.
    harness.pods.pods = [evicted(0), evicted(1)]
    harness.now += timedelta(seconds=1)
    harness.run()
    assert cond(harness.stored["status"], "Preempted")["reason"] == "PreemptedForLessServedJob"
    assert "attainedGpuSeconds" not in harness.stored["status"]  # the run has not ended yet
    harness.pods.pods = []  # gone
    run_for(harness, 30)  # time between runs is no service
    recorded = harness.stored["status"]["attainedGpuSeconds"]
    assert recorded == pytest.approx(2 * 100, abs=2 * 1)  # at most one tick per run lost
    assert recorded == harness.stored["status"]["gpuSeconds"]
    new = created(harness)
    assert len(new) == 2
    assert [read_attained(p["metadata"]["annotations"]) for p in new] == [recorded] * 2


def test_a_restarted_operator_records_the_same_service(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.running()
    run_for(harness, 50)
    harness.pods.pods = [evicted(0), evicted(1)]
    run_for(harness, 1)
    harness.pods.pods = []
    # A new operator process (an empty ledger) takes over before the workers are recreated.
    restarted = Harness(monkeypatch)
    restarted.stored = harness.stored
    restarted.now = harness.now + timedelta(seconds=5)
    restarted.run()
    kept = restarted.stored["status"]["attainedGpuSeconds"]
    assert kept == restarted.stored["status"]["gpuSeconds"] > 0
    assert [read_attained(p["metadata"]["annotations"]) for p in created(restarted)] == [kept] * 2
    # Its second run adds to the first; the next run start records both.
    restarted.pods.pods = [worker(0), worker(1)]
    restarted.now += timedelta(seconds=60)
    for p in restarted.pods.pods:
        p["status"]["startTime"] = format_time(restarted.now)
    run_for(restarted, 20)
    restarted.pods.pods = [evicted(0, names.PREEMPTED_REASON)]
    run_for(restarted, 1)
    restarted.pods.pods = []
    run_for(restarted, 1)
    assert restarted.stored["status"]["attainedGpuSeconds"] == pytest.approx(kept + 2 * 20, abs=2)
    restarted.state.pool.shutdown(wait=True)


def of_this_run(h: Harness, p: dict[str, Any]) -> dict[str, Any]:
    """Worker `p` as the operator creates it now: with the job's tier count on it."""
    status = h.stored["status"]
    p["metadata"]["annotations"] |= tier_evictions_annotations(status.get("tierEvictions", 0))
    return p


def end_run(h: Harness, seconds: int, reason: str) -> None:
    """The job runs `seconds` on its two workers (started now), then is preempted for
    `reason`, its workers go, and the next pass recreates them."""
    h.pods.pods = [of_this_run(h, worker(0)), of_this_run(h, worker(1))]
    for p in h.pods.pods:
        p["status"]["startTime"] = format_time(h.now)
    run_for(h, seconds)
    h.pods.pods = [evicted(p, reason) for p in h.pods.pods]
    run_for(h, 1)
    h.pods.pods = []
    run_for(h, 1)


def test_the_runs_the_tier_ended_are_counted_once_each(harness: Harness) -> None:
    harness.run()
    assert "tierEvictions" not in harness.stored["status"]
    end_run(harness, 50, names.SERVICE_PREEMPTED_REASON)
    assert harness.stored["status"]["tierEvictions"] == 1
    assert [p["metadata"]["annotations"][names.TIER_EVICTIONS] for p in created(harness)] == [
        "1"
    ] * 2
    # Passes that start the same run again (the workers were not created: none is listed)
    # count nothing more.
    run_for(harness, 10)
    assert harness.stored["status"]["tierEvictions"] == 1
    # A run ended by a higher priority is not the tier's; the next one the tier ends is.
    end_run(harness, 50, names.PREEMPTED_REASON)
    assert harness.stored["status"]["tierEvictions"] == 1
    end_run(harness, 50, names.SERVICE_PREEMPTED_REASON)
    assert harness.stored["status"]["tierEvictions"] == 2
    assert {p["metadata"]["annotations"][names.TIER_EVICTIONS] for p in created(harness)} >= {"2"}


def test_a_job_the_tier_never_ended_carries_no_count(harness: Harness) -> None:
    harness.run()
    end_run(harness, 50, names.PREEMPTED_REASON)
    assert "tierEvictions" not in harness.stored["status"]
    assert all(names.TIER_EVICTIONS not in p["metadata"]["annotations"] for p in created(harness))


def never_started(h: Harness) -> list[dict[str, Any]]:
    """The job's two workers as the operator creates them now, bound but not started yet."""
    pods = [of_this_run(h, worker(0, "Pending")), of_this_run(h, worker(1, "Pending"))]
    for p in pods:
        del p["status"]["startTime"]
    return pods


def test_a_run_the_tier_ended_before_its_pods_started_is_counted(harness: Harness) -> None:
    harness.run()
    for count in (1, 2):
        # Bound, not started: no service, so the ended run adds none; still the tier's eviction.
        harness.pods.pods = never_started(harness)
        run_for(harness, 5)
        harness.pods.pods = [evicted(p) for p in harness.pods.pods]
        run_for(harness, 1)
        assert harness.stored["status"]["tierEvictions"] == count
        assert "attainedGpuSeconds" not in harness.stored["status"]
        harness.pods.pods = []
        run_for(harness, 1)
        new = created(harness)
        assert [p["metadata"]["annotations"][names.TIER_EVICTIONS] for p in new] == [str(count)] * 2


def test_a_run_the_tier_ended_is_counted_once_while_its_pods_exit_or_vanish(
    harness: Harness,
) -> None:
    harness.running()
    # Its workers exit over several passes, then one vanishes between two passes.
    harness.pods.pods = [evicted(0), evicted(1)]
    run_for(harness, 5)
    assert harness.stored["status"]["tierEvictions"] == 1
    harness.pods.hook(harness.pods.pods[0])
    harness.pods.pods = [harness.pods.pods[1]]
    run_for(harness, 1)
    harness.pods.hook(harness.pods.pods[0])
    harness.pods.pods = []
    run_for(harness, 3)
    assert harness.stored["status"]["tierEvictions"] == 1
    # The next run's pods carry 1; its pods, evicted by the tier, vanish before any pass sees
    # them: the operator's memory of the vanished pod counts it, once.
    harness.pods.pods = [of_this_run(harness, worker(0)), of_this_run(harness, worker(1))]
    run_for(harness, 10)
    for p in harness.pods.pods:
        harness.pods.hook(evicted(p))
    harness.pods.pods = []
    run_for(harness, 3)
    assert harness.stored["status"]["tierEvictions"] == 2
    assert {p["metadata"]["annotations"][names.TIER_EVICTIONS] for p in created(harness)} <= {"2"}


def test_a_run_the_tier_ended_unseen_is_counted_from_the_schedulers_record(
    harness: Harness,
) -> None:
    harness.running()
    # The tier evicted the run and its pods vanished before any pass saw them (no operator ran
    # meanwhile): only what the scheduler wrote on the job as it evicted says so.
    harness.stored["metadata"].setdefault("annotations", {})[names.TIER_EVICTIONS] = "1"
    harness.pods.pods = []
    run_for(harness, 3)
    assert harness.stored["status"]["tierEvictions"] == 1
    new = created(harness)
    assert new and {p["metadata"]["annotations"][names.TIER_EVICTIONS] for p in new} == {"1"}
    # The next run evicted the same way, seen by the operator this time and recorded by the
    # scheduler: counted once.
    harness.pods.pods = [of_this_run(harness, worker(0)), of_this_run(harness, worker(1))]
    run_for(harness, 10)
    harness.stored["metadata"]["annotations"][names.TIER_EVICTIONS] = "2"
    harness.pods.pods = [evicted(p) for p in harness.pods.pods]
    run_for(harness, 3)
    assert harness.stored["status"]["tierEvictions"] == 2
