"""The ServingJob handler's autoscaling step (`servingjob_handlers._autoscale`, through the
autoscaler the process gives `State`: `gpufleet.autoscaler.service.JobAutoscalers`) without a
cluster: the metrics source is opened with the job's rate window (`rateWindowSeconds`, by default
`staleAfterSeconds`) while samples are judged stale by `staleAfterSeconds`, and the operator-wide
autoscaler settings reach the job's autoscaler; a job with standbys is decided on its awake
replicas, and its status is told the standbys asleep and the replicas serving."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from operator_fakes import IdleSource

from gpufleet.autoscaler.service import JobAutoscalers
from gpufleet.autoscaler.serving_autoscaler import MetricsSource
from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.model.contract import standby
from gpufleet.model.contract.names import POOL_LABEL
from gpufleet.operator import servingjob_handlers
from gpufleet.operator.objects import ServingJobObject

TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "x"}]}}


def job(prometheus: dict[str, Any]) -> dict[str, Any]:
    pool = {"minReplicas": 1, "maxReplicas": 3, "gpusPerReplica": 1, "template": TEMPLATE}
    return {
        "metadata": {"uid": "uid-1", "namespace": "ns", "name": "llm"},
        "spec": {
            "prefill": pool,
            "decode": pool,
            "slo": {"ttftP90Seconds": 1.0, "itlP90Seconds": 0.05},
            "autoscaling": {
                "prometheus": {"url": "http://prom:9090", **prometheus},
                "capacity": {"prefillTokensPerSecond": 10000, "decodeBatchSize": 32},
            },
        },
    }


@pytest.mark.parametrize(
    ("prometheus", "window"),
    [
        pytest.param({"staleAfterSeconds": 10}, 10, id="default-window"),
        pytest.param({"staleAfterSeconds": 10, "rateWindowSeconds": 40}, 40, id="own-window"),
    ],
)
def test_rate_window_and_staleness_reach_the_source(
    prometheus: dict[str, Any], window: int
) -> None:
    opened: list[tuple[str, int]] = []
    sources: list[IdleSource] = []

    def factory(url: str, rate_window_s: int) -> MetricsSource:
        opened.append((url, rate_window_s))
        sources.append(IdleSource())
        return sources[-1]

    base = AutoscalerSettings(window_s=42)
    autoscalers = JobAutoscalers(base, source_factory=factory)
    state = servingjob_handlers.State(client.ApiClient(), autoscalers)
    ready = {"status": {"readyReplicas": 1}}
    health, asleep, serving = servingjob_handlers._autoscale(
        state, ServingJobObject.of(job(prometheus)), lambda: [],
        {"prefill": ready, "decode": ready}, {"prefill": 1, "decode": 1}, [],
    )  # fmt: skip
    assert opened == [("http://prom:9090", window)]
    assert sources[0].stale_after == [10.0, 10.0]
    scaler = autoscalers.registry.peek("uid-1")
    assert scaler is not None and scaler.base_settings.window_s == 42
    assert health is not None and health.available is True
    assert asleep is None and serving is None  # the job keeps no standbys


def test_the_operator_wide_settings_reach_the_registry() -> None:
    autoscalers = JobAutoscalers(AutoscalerSettings(window_s=33))
    state = servingjob_handlers.State(client.ApiClient(), autoscalers)
    scaler = autoscalers.registry.get("uid-1", "http://prom:9090", 60)
    assert scaler.base_settings.window_s == 33
    state.close()


def test_a_pool_with_standbys_is_decided_and_reported_on_its_awake_replicas() -> None:
    body = job({"staleAfterSeconds": 10})
    body["spec"]["autoscaling"]["standby"] = {"prefill": {"replicas": 1}}
    autoscalers = JobAutoscalers(source_factory=lambda url, window: IdleSource())
    state = servingjob_handlers.State(client.ApiClient(), autoscalers)

    def pod(name: str, pool: str, asleep: bool = False) -> dict[str, Any]:
        annotations = standby.sleep_patch()["metadata"]["annotations"] if asleep else {}
        ready = [{"type": "Ready", "status": "True"}]
        return {
            "metadata": {"name": name, "labels": {POOL_LABEL: pool}, "annotations": annotations},
            "status": {"phase": "Running", "conditions": ready},
        }

    pods = [pod("a", "prefill"), pod("b", "prefill", asleep=True), pod("c", "decode")]
    deployments = {
        "prefill": {"status": {"readyReplicas": 2}},
        "decode": {"status": {"readyReplicas": 1}},
    }
    desired = {"prefill": 2, "decode": 1}  # the Deployments' scales: prefill holds a standby
    health, asleep, serving = servingjob_handlers._autoscale(
        state, ServingJobObject.of(body), lambda: pods, deployments, desired, []
    )
    assert asleep == {"prefill": 1, "decode": 0}
    assert serving == {"prefill": 1, "decode": 1}  # the status's readyReplicas
    assert desired == {"prefill": 1, "decode": 1}  # awake replicas, as the status shows them
    assert health is not None
    state.close()
