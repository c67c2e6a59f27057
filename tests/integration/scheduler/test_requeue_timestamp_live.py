"""An evicted job's place in line on the sandbox (`placement.requeue_timestamp`), through
`gpufleet operator` as a real process (settings file) and the sandbox's real API server, which
stamps the jobs' and pods' creation times.

Aspects: one GPUQueue; three non-preemptible fillers and the preemptible job "first" hold the
16 T4 GPUs of the default fleet (one 4-GPU worker each); "second", like "first", is submitted
after it and waits; "urgent", of a higher priority, evicts "first" (the only preemptible job),
whose worker the operator recreates, pending, with the job's submission time on it
(`gpufleet.io/submitted-at`, its TrainingJob's creationTimestamp). Then "urgent" is deleted and
frees one node, room for one of the two: with `creation` "first" goes first (submitted before
"second"), with `eviction` (Kueue's default) "second" does (pending since before "first"'s
recreation). Both settings run, each with an operator of its own. No GPU is double-booked. The
greedy engine decides, with no service tier, and queue aging far off.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.model.contract.submitted import read_submitted
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing import invariants
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    configured_operator,
    training_job,
    wait_for,
)

pytestmark = pytest.mark.integration

GPUS = 16  # every T4 of the default fleet: 4 nodes x 4


@pytest.fixture(scope="module", params=["creation", "eviction"])
def requeue(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def queue(requeue: str) -> str:
    return f"line-{requeue}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox,
    kube: Kube,
    tmp_path_factory: pytest.TempPathFactory,
    requeue: str,
    queue: str,
) -> Iterator[OperatorProcess]:
    """An operator requeuing by `requeue`; the queue, with every T4 as its quota."""
    kube.create_queue(queue, "T4", GPUS)
    settings = f"""\
placement:
  requeue_timestamp: {requeue}
  queue_aging_s: 36000
  service_tier_gpu_s: 0
  solver:
    engine: greedy
"""
    folder = tmp_path_factory.mktemp(f"operator-{requeue}")
    try:
        with configured_operator(sandbox.kubeconfig, kube, folder, settings) as proc:
            yield proc
    finally:
        sandbox.kubectl("delete", "gq", queue, "--ignore-not-found", check=False)


def job(name: str, queue: str, *, priority: int = 0, preemptible: bool = True) -> dict[str, Any]:
    """One worker of 4 T4 (a whole node) in `queue`, stopping within a second when evicted."""
    manifest = training_job(name, replicas=1, gpus=4, gpu_type="T4", priority=priority)
    manifest["spec"]["queue"] = queue
    manifest["spec"]["preemptible"] = preemptible
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    return manifest


def pending(kube: Kube, ns: str, name: str) -> list[dict[str, Any]] | None:
    pods = kube.live_pods(ns, name)
    return pods if pods and not any(p["spec"].get("nodeName") for p in pods) else None


def test_an_evicted_jobs_place_in_line(
    kube: Kube, ns: str, requeue: str, queue: str, operator: OperatorProcess
) -> None:
    fillers = [f"fill-{i}" for i in range(3)]
    for name in fillers:
        kube.create_job(ns, job(name, queue, preemptible=False))
    kube.create_job(ns, job("first", queue))
    for name in [*fillers, "first"]:
        wait_for(lambda name=name: kube.all_bound(ns, name), f"{name} bound", 60)
    time.sleep(1.1)  # creation times are whole seconds: "second" is submitted after "first"
    kube.create_job(ns, job("second", queue))
    wait_for(lambda: pending(kube, ns, "second"), "second waits", 30)
    time.sleep(1.1)  # "first"'s recreated worker is created after "second"'s
    kube.create_job(ns, job("urgent", queue, priority=1))
    wait_for(lambda: kube.all_bound(ns, "urgent"), "urgent bound (first evicted)", 60)
    recreated = wait_for(lambda: pending(kube, ns, "first"), "first's worker recreated", 60)

    # The recreated worker says when "first" was submitted; it was created after "second"'s.
    submitted = parse_time((kube.job(ns, "first") or {})["metadata"]["creationTimestamp"])
    assert submitted is not None
    assert read_submitted(recreated[0]["metadata"]["annotations"]) == submitted
    second_pods = kube.live_pods(ns, "second")
    second_created = parse_time(second_pods[0]["metadata"]["creationTimestamp"])
    first_created = parse_time(recreated[0]["metadata"]["creationTimestamp"])
    assert second_created is not None and first_created is not None
    assert submitted < second_created < first_created

    kube.delete_job(ns, "urgent")  # frees one node: room for one of the two
    wait_for(
        lambda: kube.all_bound(ns, "first") or kube.all_bound(ns, "second"), "one of them bound", 60
    )
    winner, loser = ("first", "second") if requeue == "creation" else ("second", "first")
    assert kube.all_bound(ns, winner) and not kube.all_bound(ns, loser), requeue
    time.sleep(2.0)  # and it stays so: the other does not evict it back
    assert kube.all_bound(ns, winner) and not kube.all_bound(ns, loser), requeue
    print(f"[requeue {requeue}] {winner} placed before {loser}")
    assert invariants.check(kube.core) == []
