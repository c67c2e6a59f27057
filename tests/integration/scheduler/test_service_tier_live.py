"""The service tier on the sandbox: inside one GPUQueue, a long-running job past the threshold
gives way to a fresh job of its own queue and priority, through `gpufleet operator` as a real
process (settings file `placement.service_tier_gpu_s`) and the sandbox's real API server.

Aspects: with theta at 8 GPU-seconds (half a second of the 16 T4 GPUs) and no spare GPU (the
long job's 4 x 4 workers hold every T4 of the fleet, within its queue's quota), a fresh job of
the same queue and priority preempts the long one whole and starts; the long job says why
(Preempted, `PreemptedForLessServedJob`); the service its run received is kept on its status
(`status.attainedGpuSeconds`: at least theta, at most its GPUs times the time it was up) and
copied onto its recreated pods, which the scheduler reads; the long job then waits with the
scheduler's reason and does not evict the fresh job back; no GPU is double-booked; `kubectl get
tj -o wide` shows the GPU-seconds received. A run the tier ends before any of its pods started
(bound on nodes whose kubelet does not start them) is counted in `status.tierEvictions` all the
same, once, and the next run's pods carry the count; so is a run the tier ends while no
operator runs, its pods gone before one starts again (the scheduler's record on the job).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gpufleet.model.contract.service import read_attained, read_tier_evictions
from gpufleet.operator.children import worker_pod
from gpufleet.operator.objects import TrainingJobObject
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.node_manifests import KWOK_ANNOTATION
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.runtime import SchedulerRuntime, api_client
from gpufleet.settings import PlacementSettings
from gpufleet.testing import invariants
from gpufleet.testing.node_faults import restore_nodes
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for
from gpufleet.testing.tier_scene import GPUS, job_status, live_pods, tier_operator, whole_fleet_job

pytestmark = pytest.mark.integration

THETA = 8.0  # GPU-seconds: half a second of the long job's 16 GPUs
QUEUE = f"tier-{uuid.uuid4().hex[:6]}"
SETTINGS = f"""\
placement:
  service_tier_gpu_s: {THETA}
"""


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator, with a small service tier threshold; the module's queue."""
    folder = tmp_path_factory.mktemp("operator")
    with tier_operator(sandbox, kube, folder, QUEUE, SETTINGS) as proc:
        yield proc


def job(name: str) -> dict[str, Any]:
    return whole_fleet_job(name, QUEUE)


def bound(kube: Kube, ns: str, name: str) -> int:
    return sum(1 for p in live_pods(kube, ns, name) if p["spec"].get("nodeName"))


def test_a_fresh_job_preempts_a_long_one_of_its_queue(
    kube: Kube, ns: str, sandbox: Sandbox
) -> None:
    created = time.monotonic()  # the long job cannot receive more than GPUS a second since
    kube.create_job(ns, job("long"))
    wait_for(lambda: job_status(kube, ns, "long").get("phase") == "Running", "long Running", 60)
    # Well past theta (the scheduler counts from the pods' start times; the operator's record
    # may miss one tick of the run): then a fresh job comes.
    time.sleep(THETA / GPUS + 1.0)
    started = time.monotonic()
    kube.create_job(ns, job("fresh"))
    wait_for(lambda: job_status(kube, ns, "fresh").get("phase") == "Running", "fresh Running", 60)
    print(f"[service tier] fresh job running {time.monotonic() - started:.1f}s after creation")

    preempted = wait_for(
        lambda: (c := kube.condition(ns, "long", "Preempted")) and c["status"] == "True" and c,
        "long says it was preempted",
        30,
    )
    assert preempted["reason"] == "PreemptedForLessServedJob", preempted
    # Its run's service is kept on its status and on its recreated (pending) pods.
    kept = wait_for(
        lambda: job_status(kube, ns, "long").get("attainedGpuSeconds"),
        "long's attained service",
        30,
    )
    assert THETA <= kept <= GPUS * (time.monotonic() - created), kept
    recreated = wait_for(
        lambda: len(p := live_pods(kube, ns, "long")) == 4 and p, "long's workers recreated", 30
    )
    assert {read_attained(p["metadata"]["annotations"]) for p in recreated} == {kept}
    # It waits with the scheduler's reason (not the operator's GangRestart, shown while the
    # preempted pods take their grace period to go: the first reason read could be that one);
    # the fresh job keeps every GPU (past theta itself by then: long cannot evict it back).
    waiting = wait_for(lambda: kube.waiting_reason(ns, "long"), "long says why it waits", 30)
    print(f"[service tier] long kept {kept} GPU-s; waits: {waiting[0]}: {waiting[1]}")
    time.sleep(THETA / GPUS + 0.5)
    assert bound(kube, ns, "fresh") == 4 and bound(kube, ns, "long") == 0, waiting
    assert job_status(kube, ns, "fresh").get("phase") == "Running"
    assert invariants.check(kube.core) == []
    # `kubectl get tj -o wide` shows the GPU-seconds each job has received.
    wide = sandbox.kubectl("get", "tj", "long", "-n", ns, "-o", "wide").stdout.splitlines()
    at = wide[0].index("GPU-SECONDS")  # columns are left-aligned; empty cells print blank
    assert float(wide[1][at:].split()[0]) >= kept


def started(kube: Kube, ns: str, name: str) -> int:
    return len(kube.bound(ns, name, started=True))


def test_a_run_the_tier_ends_before_its_pods_start_is_counted(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("long"))
    wait_for(lambda: started(kube, ns, "long") == 4, "long runs", 60)
    time.sleep(THETA / GPUS + 1.0)  # past theta
    kube.create_job(ns, job("first"))
    wait_for(lambda: started(kube, ns, "first") == 4, "first runs", 60)
    wait_for(lambda: job_status(kube, ns, "long").get("tierEvictions") == 1, "long's count", 30)
    attained = job_status(kube, ns, "long")["attainedGpuSeconds"]
    # The kubelet of first's nodes (kwok) stops starting pods there; the nodes stay Ready for
    # the node-lifecycle controller's grace (40 s), enough for what follows.
    nodes = sorted({p["spec"]["nodeName"] for p in kube.bound(ns, "first")})
    for node in nodes:
        kube.core.patch_node(node, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}})
    try:
        # first goes (no kubelet confirms its pods' deletion: they are removed at once), and
        # long's waiting workers are bound there but never start.
        kube.delete_job(ns, "first")
        wait_for(lambda: kube.job(ns, "first") is None, "first deleted", 20)
        for p in kube.job_pods(ns, "first"):
            kube.core.delete_namespaced_pod(p["metadata"]["name"], ns, grace_period_seconds=0)
        wait_for(lambda: len(kube.bound(ns, "long")) == 4, "long bound again", 20)
        # A fresh job comes: the tier evicts long (served by its first run) before it starts.
        kube.create_job(ns, job("second"))
        wait_for(
            lambda: job_status(kube, ns, "long").get("tierEvictions") == 2,
            "long's count 2 for the run that never started",
            20,
        )
        assert started(kube, ns, "long") == 0
        assert job_status(kube, ns, "long")["attainedGpuSeconds"] == attained  # no service
    finally:
        restore_nodes(kube.core, nodes, report_ready=True)
    wait_for(lambda: started(kube, ns, "second") == 4, "second runs", 60)
    recreated = wait_for(
        lambda: len(p := live_pods(kube, ns, "long")) == 4 and p, "long's workers recreated", 30
    )
    assert {read_tier_evictions(p["metadata"]["annotations"]) for p in recreated} == {2}
    assert job_status(kube, ns, "long")["tierEvictions"] == 2  # once
    assert invariants.check(kube.core) == []


@contextmanager
def scheduler_alone(sandbox: Sandbox) -> Iterator[None]:
    """The gpufleet scheduler alone (no operator), in this process, with the module's tier."""
    runtime = SchedulerRuntime(
        api_client(str(sandbox.kubeconfig)),
        PlacementSettings(service_tier_gpu_s=THETA).policy(),
        SchedulerSettings(),
    )
    runtime.start()
    try:
        yield
    finally:
        runtime.stop()


def test_a_run_the_tier_ends_while_no_operator_runs_is_counted(
    kube: Kube, ns: str, sandbox: Sandbox, operator: OperatorProcess
) -> None:
    # long runs past theta; the operator (and its scheduler) stops. A fresh job's workers come
    # (made as the operator makes them) and the scheduler, running alone, evicts long for
    # them; long's pods are gone before any operator sees them. Started again, the operator
    # counts the run all the same, from what the scheduler wrote on the job as it evicted
    # (before, nothing said the run was the tier's: the count stayed 0), and long's recreated
    # workers carry it.
    kube.create_job(ns, job("long"))
    wait_for(lambda: started(kube, ns, "long") == 4, "long runs", 60)
    time.sleep(THETA / GPUS + 1.0)  # past theta
    operator.stop()
    try:
        kube.create_job(ns, job("fresh"))
        fresh = TrainingJobObject.of(wait_for(lambda: kube.job(ns, "fresh"), "fresh made"))
        for index in range(4):
            kube.core.create_namespaced_pod(ns, worker_pod(fresh, index))
        with scheduler_alone(sandbox):
            wait_for(lambda: started(kube, ns, "fresh") == 4, "fresh runs", 60)
            wait_for(lambda: not kube.job_pods(ns, "long"), "long's pods gone", 30)
        assert "tierEvictions" not in job_status(kube, ns, "long")  # no operator saw it
    finally:
        operator.start()
    wait_for(lambda: job_status(kube, ns, "long").get("tierEvictions") == 1, "long's count", 30)
    recreated = wait_for(
        lambda: len(p := live_pods(kube, ns, "long")) == 4 and p, "long's workers recreated", 30
    )
    assert {read_tier_evictions(p["metadata"]["annotations"]) for p in recreated} == {1}
    assert invariants.check(kube.core) == []
