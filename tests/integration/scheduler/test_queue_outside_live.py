"""Pods outside every queue on the sandbox: they only borrow, as a queue with nominal 0 would.

A queue `own` with a nominal quota of all 16 T4 GPUs of the default fleet, idle, and gangs of
bare pods (schedulerName gpufleet, no `gpufleet.io/queue` annotation: another client's pods):
- a non-preemptible gang of 2 x 4 T4 takes none of `own`'s idle quota (it could never be given
  back): it waits, its pods saying QuotaExceeded for a job in no queue, and `own`'s job of
  4 x 4 T4 then runs on all 16;
- a preemptible gang of 2 x 4 T4 borrows 8 of them and runs; `own`'s job of 4 x 4 T4 reclaims
  them by evicting that gang whole, and runs.
The queue is deleted at the end of the module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, bare_gang_pod, training_job, wait_for

pytestmark = pytest.mark.integration

OWN = f"own-{uuid.uuid4().hex[:6]}"
GROUP, VERSION = "gpufleet.io", "v1alpha1"


@pytest.fixture(scope="module")
def own(kube: Kube, sandbox: Sandbox) -> Iterator[None]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue", "metadata": {"name": OWN},
            "spec": {"quotas": [{"gpuType": "T4", "nominal": 16}]}}  # fmt: skip
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", body)
    yield
    sandbox.kubectl("delete", "gq", OWN, "--ignore-not-found", check=False)


def _bare_gang(kube: Kube, ns: str, name: str, preemptible: bool) -> None:
    for rank in range(2):
        kube.core.create_namespaced_pod(ns, bare_gang_pod(name, rank, preemptible))


def _live(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    pods = kube.pods(ns, f"{names.GANG_LABEL}={name}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _waiting(kube: Kube, ns: str, name: str) -> str | None:
    """The message of the gang's pods once both say why they wait."""
    messages = [
        c["message"]
        for p in _live(kube, ns, name)
        for c in (p.get("status") or {}).get("conditions") or []
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message")
    ]
    return messages[0] if len(messages) == 2 else None


def _own_job(kube: Kube, ns: str) -> None:
    manifest = training_job("mine", 4, gpus=4, gpu_type="T4")
    manifest["spec"]["queue"] = OWN
    kube.create_job(ns, manifest)


def test_a_non_preemptible_gang_in_no_queue_takes_no_idle_nominal_quota(
    kube: Kube, ns: str, own: None
) -> None:
    _bare_gang(kube, ns, "bare", preemptible=False)
    message = wait_for(lambda: _waiting(kube, ns, "bare"), "the bare gang says why it waits", 30)
    assert message.startswith("QuotaExceeded: a job in no queue needs 8 x T4;"), message
    assert "non-preemptible job in no queue may use only capacity no queue is promised" in message
    _own_job(kube, ns)
    wait_for(lambda: kube.phase(ns, "mine") == "Running", "own's job Running on its 16", 60)
    assert not any(p["spec"].get("nodeName") for p in _live(kube, ns, "bare"))


def test_a_preemptible_gang_in_no_queue_borrows_and_is_reclaimed(
    kube: Kube, ns: str, own: None
) -> None:
    _bare_gang(kube, ns, "bare", preemptible=True)
    wait_for(
        lambda: sum(bool(p["spec"].get("nodeName")) for p in _live(kube, ns, "bare")) == 2,
        "the preemptible bare gang bound on own's idle quota",
        60,
    )
    _own_job(kube, ns)
    wait_for(lambda: kube.phase(ns, "mine") == "Running", "own's job Running by reclaim", 90)
    assert not any(p["spec"].get("nodeName") for p in _live(kube, ns, "bare"))
