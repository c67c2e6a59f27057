"""The Grafana dashboard shipped with gpufleet, against a real Prometheus scraping the operator.

The sandbox's Prometheus scrapes `gpufleet operator`'s metrics endpoint (and the simulated vLLM
servers of a ServingJob, which the operator's autoscaler reads back from it) while a TrainingJob
runs, one cannot fit and a ServingJob autoscales; then every PromQL expression of every panel
of the dashboard is evaluated by that Prometheus, and each must return data: the dashboard uses
only series gpufleet exports, under the names and labels it exports them with.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from gpufleet.sandbox.prometheus_server import PrometheusServer
from gpufleet.sandbox.serving_stand_in import kube_pods
from gpufleet.sim.serving.live import LiveServingSim
from gpufleet.sim.serving.model import ServingConfig
from gpufleet.sim.serving.profiles import replica_profile
from gpufleet.sim.serving.trace import poisson_requests
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

DASHBOARD = (
    Path(__file__).resolve().parents[3] / "helm" / "gpufleet" / "dashboards" / "gpufleet.json"
)
PROFILE = replica_profile("H100-SXM-80GB")


def expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of the dashboard."""
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in doc["panels"] for t in p["targets"]]


def servingjob(url: str) -> dict[str, Any]:
    pool = {
        "minReplicas": 1,
        "maxReplicas": 2,
        "gpusPerReplica": 1,
        "gpuTypes": [{"name": "H100-80GB"}],
        "template": {"spec": {"containers": [{"name": "vllm", "image": "registry.example/v:1"}]}},
    }
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ServingJob",
        "metadata": {"name": "chat"},
        "spec": {
            "prefill": pool,
            "decode": pool,
            "slo": {"ttftP90Seconds": 0.5, "itlP90Seconds": 0.05},
            "autoscaling": {
                "intervalSeconds": 2,
                "prometheus": {"url": url, "staleAfterSeconds": 10},
                "capacity": {"prefillTokensPerSecond": 8000, "decodeBatchSize": 16},
            },
        },
    }


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusServer]:
    with PrometheusServer(tmp_path / "prometheus", scrape_interval_s=1.0) as server:
        yield server


def _query(prometheus: PrometheusServer, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": expr}, timeout=10)
    response.raise_for_status()
    doc = response.json()
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def test_every_dashboard_expression_returns_data(
    kube: Kube, ns: str, operator: OperatorProcess, prometheus: PrometheusServer
) -> None:
    assert len(expressions()) >= 15
    operator_target = (f"127.0.0.1:{operator.metrics_port}", {"job": "gpufleet"})
    kube.create_job(ns, training_job("running", 1, 1, "A100-80GB"))
    kube.create_job(ns, training_job("too-big", 1, 16, "H100-80GB"))
    kube.custom.create_namespaced_custom_object(
        "gpufleet.io", "v1alpha1", ns, "servingjobs", servingjob(prometheus.url)
    )
    requests = poisson_requests(2.0, 600, prompt_tokens=400, output_tokens=40)  # a light load
    sim = LiveServingSim(
        kube_pods(client.CoreV1Api(kube.core.api_client), ns),
        ns,
        "chat",
        ServingConfig.of(PROFILE),
        requests,
        poll_s=0.5,
    )
    try:
        _scrape_and_check(prometheus, sim, operator_target, ns)
    finally:  # the namespace's clean-up deletes TrainingJobs; the ServingJob goes here
        kube.custom.delete_namespaced_custom_object(
            "gpufleet.io", "v1alpha1", ns, "servingjobs", "chat"
        )


def _scrape_and_check(
    prometheus: PrometheusServer,
    sim: LiveServingSim,
    operator_target: tuple[str, dict[str, str]],
    ns: str,
) -> None:
    with sim:
        wait_for(lambda: sim.scrape_targets(), "the simulated servers up", 90)
        prometheus.reload([operator_target, *sim.scrape_targets()])
        prometheus.wait_scraped(timeout_s=30)
        missing: list[str] = []

        def all_answer() -> bool:
            missing.clear()
            missing.extend(f"{title}: {expr}" for title, expr in expressions()
                           if not _query(prometheus, expr))  # fmt: skip
            return not missing

        try:
            wait_for(all_answer, "every dashboard expression to return data", 150)
        except AssertionError:
            raise AssertionError("no data for:\n" + "\n".join(missing)) from None
        # The values are gpufleet's, not just present: the fleet's allocatable GPUs are the
        # sandbox's (96 whole GPUs or MIG slices of GPUs), and the job's energy grows.
        allocatable = _query(prometheus, "sum(gpufleet_fleet_allocatable_gpus)")
        assert float(allocatable[0]["value"][1]) > 0
        energy = f'gpufleet_job_energy_joules_total{{namespace="{ns}",name="running"}}'
        wait_for(
            lambda: any(float(s["value"][1]) > 0 for s in _query(prometheus, energy)),
            "the running job's energy counted",
            60,
        )
