"""GPUs held outside every queue, shown where an admin looks, against the sandbox with the
operator running: a queue's job of 1 x 4 T4 runs, then a gang of bare pods naming no queue
(another client's: 2 x 4 T4, preemptible, so it may borrow the queue's idle quota) runs beside
it. GET /fleet's capacity totals and the operator's `gpufleet_fleet_outside_queues_gpus` show
its 8 T4 outside queues, while the queue's status still counts its own 4 and the `default`
queue's figures do not change: no GPUQueue status shows those 8.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from admin_helpers import AdminApi
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.model.contract import names
from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, bare_gang_pod, training_job, wait_for

OWN = f"own-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def own(kube: Kube, sandbox: Sandbox) -> Iterator[str]:
    kube.create_queue(OWN, "T4", 8)
    yield OWN
    sandbox.kubectl("delete", "gq", OWN, "--ignore-not-found", check=False)


def _outside_in_fleet(admin: tuple[AdminApi, str]) -> int | None:
    api, token = admin
    doc = api.get("/api/v1/fleet", token).json()
    [t4] = [c for c in doc["capacity"] if c["gpuType"] == "T4" and not c.get("migProfile")]
    return t4.get("outsideQueues")


def _outside_in_metrics(operator: OperatorProcess) -> float | None:
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpufleet_fleet_outside_queues_gpus" and sample.labels == {
                "gpu_type": "T4",
                "mig_profile": "",
            }:
                return float(sample.value)
    return None


def _t4_used(kube: Kube, queue: str) -> int | None:
    obj: Any = kube.custom.get_cluster_custom_object(API_GROUP, API_VERSION, "gpuqueues", queue)
    rows = (obj.get("status") or {}).get("resources") or []
    return next((r["used"] for r in rows if r["gpuType"] == "T4" and not r.get("migProfile")), 0)


def _default_figures(kube: Kube) -> list[dict[str, Any]]:
    obj: Any = kube.custom.get_cluster_custom_object(API_GROUP, API_VERSION, "gpuqueues", "default")
    return list((obj.get("status") or {}).get("resources") or [])


def test_a_gang_in_no_queue_shows_outside_queues_and_in_no_queue(
    kube: Kube, ns: str, operator: OperatorProcess, admin: tuple[AdminApi, str], own: str
) -> None:
    job = training_job("mine", 1, gpus=4, gpu_type="T4")
    job["spec"]["queue"] = own
    kube.create_job(ns, job)
    wait_for(lambda: kube.phase(ns, "mine") == "Running", "the queue's job Running", 60)
    wait_for(lambda: _t4_used(kube, own) == 4, "the queue's status counting its 4 T4", 30)
    wait_for(lambda: _outside_in_fleet(admin) is not None, "GET /fleet showing outsideQueues", 30)
    # Another module's leftovers could hold some; this test's gang adds its 8 to what is there.
    baseline = _outside_in_fleet(admin)
    assert _outside_in_metrics(operator) == baseline
    default = _default_figures(kube)

    for rank in range(2):
        kube.core.create_namespaced_pod(ns, bare_gang_pod("bare", rank))
    bare = f"{names.GANG_LABEL}=bare"
    wait_for(
        lambda: sum(bool(p["spec"].get("nodeName")) for p in kube.pods(ns, bare)) == 2,
        "the bare gang bound",
        60,
    )

    assert baseline is not None
    wait_for(lambda: _outside_in_fleet(admin) == baseline + 8, "GET /fleet: 8 more outside", 30)
    wait_for(lambda: _outside_in_metrics(operator) == baseline + 8, "the metric: 8 more", 30)
    assert _t4_used(kube, own) == 4
    assert _default_figures(kube) == default
