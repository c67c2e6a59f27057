"""A queue's quota for one MIG profile, live: a nominal of one 1g.10gb slice of an A100-80GB
and no borrowing. The first one-slice job runs and the queue's status row for the profile
counts its slice; the second waits with QuotaExceeded naming the profile, the type and the
numbers, though the sandbox's A100-MIG node has free slices of that profile (so the quota, not
capacity, holds it back). It runs once the first is gone.
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

QUEUE = f"slices-{uuid.uuid4().hex[:6]}"
GROUP, VERSION = "gpufleet.io", "v1alpha1"
TYPE, PROFILE = "A100-80GB", "1g.10gb"  # the default fleet's a100-mig node is cut in these


@pytest.fixture
def queue(kube: Kube, sandbox: Sandbox) -> Iterator[str]:
    quota = {"gpuType": TYPE, "migProfile": PROFILE, "nominal": 1, "borrowingLimit": 0}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUQueue",
        "metadata": {"name": QUEUE},
        "spec": {"quotas": [quota]},
    }
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", body)
    yield QUEUE
    sandbox.kubectl("delete", "gq", QUEUE, "--ignore-not-found", check=False)


def _job(name: str) -> dict[str, Any]:
    manifest = training_job(name, 1, gpu_type=TYPE, mig_profile=PROFILE)
    manifest["spec"]["queue"] = QUEUE
    return manifest


def _profile_row(kube: Kube) -> dict[str, Any] | None:
    obj: Any = kube.custom.get_cluster_custom_object(GROUP, VERSION, "gpuqueues", QUEUE)
    rows = (obj.get("status") or {}).get("resources") or []
    return next((r for r in rows if r["gpuType"] == TYPE and r.get("migProfile") == PROFILE), None)


def test_a_mig_profile_quota_holds_the_second_slice_back(kube: Kube, ns: str, queue: str) -> None:
    kube.create_job(ns, _job("first"))
    wait_for(lambda: kube.phase(ns, "first") == "Running", "first Running", 90)
    (pod,) = kube.pods(ns, "gpufleet.io/trainingjob=first")
    assert pod["metadata"]["annotations"][names.ASSIGNED_MIG].startswith(f"{PROFILE}@")
    row = wait_for(
        lambda: (r := _profile_row(kube)) and r.get("used") == 1 and r,
        "the queue's 1g.10gb row counting the slice",
        30,
    )
    assert (row["nominal"], row["borrowed"]) == (1, 0), row

    kube.create_job(ns, _job("second"))
    reason = wait_for(lambda: kube.waiting_reason(ns, "second"), "second says why it waits", 30)
    assert reason[0] == "QuotaExceeded", reason
    assert f"queue {queue} would exceed its quota for 1 x {PROFILE} on {TYPE}" in reason[1], reason
    assert "uses 1 of nominal 1 + borrowing limit 0" in reason[1], reason
    kube.delete_job(ns, "first")
    wait_for(lambda: kube.phase(ns, "second") == "Running", "second Running once first is gone", 90)
