"""The service tier's limit on re-evictions on the sandbox, through `gpufleet operator` as a real
process (settings `placement.service_tier_gpu_s` and `placement.service_tier_rerun_s`) and the
sandbox's real API server.

Aspects: a long job past the threshold is preempted by the tier for a fresh job of its queue
and priority; the operator counts that run in the long job's `status.tierEvictions` and writes
the count on its recreated pods; once the fresh job is gone the long job runs again, and a
second fresh job that comes at once waits until the long job's new run has lasted the limit
(the scheduler reads the count from the pods after the real preemption, and the run from their
start times) before the tier preempts it again, which the operator counts as the second; no GPU
is double-booked.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from gpufleet.model.contract.service import read_tier_evictions
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for
from gpufleet.testing.tier_scene import GPUS, job_status, live_pods, tier_operator, whole_fleet_job

pytestmark = pytest.mark.integration

THETA = 8.0  # GPU-seconds: half a second of the long job's 16 GPUs
# Seconds a job the tier evicted runs before the tier may evict it again. Without the limit
# (service_tier_rerun_s 0) "second" ran 0 s after long's new run began (whole-second
# stamps); 6 s keeps a wide margin over that.
RERUN = 6.0
QUEUE = f"rerun-{uuid.uuid4().hex[:6]}"
SETTINGS = f"""\
placement:
  service_tier_gpu_s: {THETA}
  service_tier_rerun_s: {RERUN}
"""


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator, with a small threshold and the limit; the module's queue."""
    folder = tmp_path_factory.mktemp("operator")
    with tier_operator(sandbox, kube, folder, QUEUE, SETTINGS) as proc:
        yield proc


def job(name: str) -> dict[str, Any]:
    return whole_fleet_job(name, QUEUE)


def running_since(kube: Kube, ns: str, name: str) -> datetime | None:
    """When the job's whole gang of 4 runs since (its latest worker's start), or None."""
    pods = live_pods(kube, ns, name)
    starts = [
        parse_time((p.get("status") or {}).get("startTime"))
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
    ]
    if len(starts) < 4 or None in starts:
        return None
    return max(s for s in starts if s is not None)


def preempted_by_tier(kube: Kube, ns: str, name: str) -> bool:
    c = kube.condition(ns, name, "Preempted")
    return bool(c and c["status"] == "True" and c["reason"] == "PreemptedForLessServedJob")


def test_the_tier_evicts_a_job_it_evicted_before_only_after_the_limit(kube: Kube, ns: str) -> None:
    kube.create_job(ns, job("long"))
    wait_for(lambda: job_status(kube, ns, "long").get("phase") == "Running", "long Running", 60)
    time.sleep(THETA / GPUS + 1.0)  # past theta
    kube.create_job(ns, job("first"))
    wait_for(lambda: preempted_by_tier(kube, ns, "long"), "the tier preempts long", 60)
    # The operator counts the run the tier ended and writes the count on the new workers.
    wait_for(lambda: job_status(kube, ns, "long").get("tierEvictions") == 1, "long's count", 30)
    recreated = wait_for(
        lambda: len(p := live_pods(kube, ns, "long")) == 4 and p, "long's workers recreated", 30
    )
    assert {read_tier_evictions(p["metadata"]["annotations"]) for p in recreated} == {1}
    wait_for(lambda: running_since(kube, ns, "first"), "first runs", 60)

    # The fresh job goes; long runs again, and a second fresh job comes at once.
    kube.delete_job(ns, "first")
    again = wait_for(lambda: running_since(kube, ns, "long"), "long runs again", 60)
    kube.create_job(ns, job("second"))
    # The tier may not evict long before its new run has lasted RERUN seconds.
    second = wait_for(lambda: running_since(kube, ns, "second"), "second runs", 60 + RERUN)
    waited = (second - again).total_seconds()
    print(f"[tier rerun] second ran {waited:.1f}s after long's new run began (limit {RERUN}s)")
    assert waited >= RERUN - 1.0, waited  # start times are whole seconds
    # The operator sees the second preemption a moment later.
    wait_for(lambda: preempted_by_tier(kube, ns, "long"), "the tier preempts long again", 30)
    wait_for(lambda: job_status(kube, ns, "long").get("tierEvictions") == 2, "long's count 2", 30)
    assert invariants.check(kube.core) == []
