"""A lender whose quota cannot be reclaimed yet says so, live: `WaitingForReclaim`.

Team B's two non-preemptible jobs run within B's nominal of 16 T4 (the whole default fleet);
the admin then moves 8 of that nominal to team A. B now borrows A's 8 with gangs nothing may
evict, so A's job, within its nominal, waits: its TrainingJob's Admitted condition and its
pods' PodScheduled condition say `WaitingForReclaim`, naming A's nominal and B as the borrower.
When one of B's jobs ends, A's job runs on the GPUs it gave back.

The core's unit test of the reason turns preemption off; live, preemption is always on, and a
reclaim of preemptible borrowers takes one cycle (the reason is never seen), so the borrowers
here are non-preemptible: a queue's quota lowered under its running jobs is how they come to
borrow (the scheduler never lets a non-preemptible gang borrow).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration

SUFFIX = uuid.uuid4().hex[:6]
TEAM_A, TEAM_B = f"lender-{SUFFIX}", f"holder-{SUFFIX}"
GROUP, VERSION = "gpufleet.io", "v1alpha1"


def _queue(name: str, t4: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {"quotas": [{"gpuType": "T4", "nominal": t4}]},
    }


def _job(name: str, queue: str, preemptible: bool = True) -> dict[str, Any]:
    manifest = training_job(name, 2, gpus=4, gpu_type="T4")
    manifest["spec"]["queue"] = queue
    manifest["spec"]["preemptible"] = preemptible
    return manifest


@pytest.fixture
def teams(kube: Kube, sandbox: Sandbox) -> Iterator[None]:
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", _queue(TEAM_A, 0))
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", _queue(TEAM_B, 16))
    yield
    sandbox.kubectl("delete", "gq", TEAM_A, TEAM_B, "--ignore-not-found", check=False)


def _set_nominal(kube: Kube, name: str, t4: int) -> None:
    patch = {"spec": {"quotas": [{"gpuType": "T4", "nominal": t4}]}}
    kube.custom.patch_cluster_custom_object(GROUP, VERSION, "gpuqueues", name, patch)


def _admitted(kube: Kube, ns: str, job: str) -> tuple[str, str] | None:
    condition = kube.condition(ns, job, "Admitted")
    if condition is None or condition["status"] != "False":
        return None
    return str(condition["reason"]), str(condition["message"])


def _pod_messages(kube: Kube, ns: str, job: str) -> list[str]:
    """Each pod's PodScheduled=False message, as `kubectl describe pod` shows it."""
    out = []
    for pod in kube.pods(ns, f"gpufleet.io/trainingjob={job}"):
        conditions = (pod.get("status") or {}).get("conditions") or []
        scheduled = next((c for c in conditions if c["type"] == "PodScheduled"), None)
        if scheduled is not None and scheduled["status"] == "False":
            out.append(str(scheduled.get("message", "")))
    return out


def test_a_lender_waits_for_reclaim_while_its_borrowers_cannot_be_evicted(
    kube: Kube, ns: str, teams: None
) -> None:
    for job in ("b1", "b2"):
        kube.create_job(ns, _job(job, TEAM_B, preemptible=False))
    for job in ("b1", "b2"):
        wait_for(lambda j=job: kube.phase(ns, j) == "Running", f"{job} Running", 60)
    # The admin gives A half of B's nominal: B's running jobs now borrow 8 from A.
    _set_nominal(kube, TEAM_A, 8)
    _set_nominal(kube, TEAM_B, 8)
    kube.create_job(ns, _job("a1", TEAM_A))
    reason = wait_for(
        lambda: (r := _admitted(kube, ns, "a1")) and r[0] == "WaitingForReclaim" and r,
        "a1 waiting for reclaim",
        30,
    )
    assert f"within queue {TEAM_A}'s nominal quota" in reason[1], reason
    assert f"{TEAM_B} borrows 8 x T4" in reason[1], reason
    messages = wait_for(
        lambda: (m := _pod_messages(kube, ns, "a1")) and len(m) == 2 and m,
        "a1's two pods saying why they wait",
        30,
    )
    assert all(m.startswith("WaitingForReclaim: ") for m in messages), messages
    assert all(TEAM_B in m for m in messages), messages
    # Nothing of B was evicted for it.
    assert all(kube.phase(ns, j) == "Running" for j in ("b1", "b2"))
    # One of B's jobs ends: A's job runs on what it gave back.
    kube.delete_job(ns, "b2")
    wait_for(lambda: kube.phase(ns, "a1") == "Running", "a1 Running once b2 is gone", 60)
    assert kube.phase(ns, "b1") == "Running"
