"""A ServingJob pass whose watched body, pods and Deployments call for nothing makes no API
call; a pass that would act reads the job afresh and acts on what it read (the TrainingJob's
shape, `test_trainingjob_quiet_passes.py`). The API clients are mocks; the sandbox tests run the
same passes against a real API server.

Aspects: a steady job, with autoscaling off and between autoscaler ticks; a Deployment that
changed, a spec change, usage totals due after USAGE_FLUSH, a tick that is due, the first pass
after an operator start, a body older than the previous pass's write, a job without the
watches (every pass reads afresh), a job with standbys (every pass reads afresh).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from unittest import mock

import kopf
import pytest
from kubernetes import client
from operator_fakes import VERSIONS, IdleSource, StoredJob, StoredJobHarness

from gpufleet.autoscaler.service import JobAutoscalers
from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.operator import servingjob_handlers
from gpufleet.operator.accounting import USAGE_FLUSH
from gpufleet.operator.watched import LabelledObjects

T0 = datetime(2026, 12, 3, 18, 0, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "x"}]}}


def replica(n: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"chat-server-{n}",
            "namespace": "ns",
            "resourceVersion": next(VERSIONS),
            "labels": {names.SERVINGJOB_LABEL: "chat", names.POOL_LABEL: "server"},
            "annotations": {names.ASSIGNED_GPUS: "0", names.ASSIGNED_TYPE: "L4"},
        },
        "spec": {
            "nodeName": f"node-{n}",
            "containers": [{"resources": {"limits": {names.WHOLE_GPU_RESOURCE: "1"}}}],
        },
        "status": {"phase": "Running", "startTime": format_time(T0)},
    }


class Harness(StoredJobHarness):
    """A handler state whose API clients are mocks; the job, its Deployments and pods as the
    API server has them (the watches show the same)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, watched: bool = True) -> None:
        self.pods: list[dict[str, Any]] = []
        self.deployments: list[dict[str, Any]] = []
        self.clock = [T0.timestamp()]
        self.source = IdleSource()
        autoscalers = JobAutoscalers(
            AutoscalerSettings(),
            source_factory=lambda url, window: self.source,
            clock=lambda: self.clock[0],
        )
        self.state = servingjob_handlers.State(
            client.ApiClient(client.Configuration()),
            autoscalers,
            pods=(lambda ns, job: list(self.pods)) if watched else None,
            deployments=(lambda ns, job: copy.deepcopy(self.deployments)) if watched else None,
        )
        self.api = mock.MagicMock()  # one parent: the calls of all three clients in order
        for api in ("apps", "core", "custom"):
            setattr(self.state, api, getattr(self.api, api))
        self.state.apps.list_namespaced_deployment.side_effect = self._list_deployments
        self.state.apps.create_namespaced_deployment.side_effect = self._create
        self.state.core.list_namespaced_pod.side_effect = self._list_pods
        self.now = T0
        monkeypatch.setattr(servingjob_handlers, "_now", lambda: self.now)
        self.job = StoredJob(
            {
                "metadata": {"name": "chat", "namespace": "ns", "uid": "u1", "generation": 1},
                "spec": {
                    "server": {"minReplicas": 1, "gpusPerReplica": 1, "template": TEMPLATE},
                    "autoscaling": {"enabled": False},
                },
            }
        )
        self.job.wire(self.state.custom)

    def _list_deployments(self, *_: Any, **__: Any) -> Any:
        return SimpleNamespace(data=json.dumps({"items": self.deployments}).encode())

    def _list_pods(self, *_: Any, **__: Any) -> Any:
        return SimpleNamespace(data=json.dumps({"items": self.pods}).encode())

    def _create(self, namespace: str, wanted: dict[str, Any], **_: Any) -> Any:
        made = copy.deepcopy(wanted)
        made["metadata"]["resourceVersion"] = next(VERSIONS)
        made["status"] = {}
        self.deployments.append(made)
        return mock.MagicMock()

    def serving(self) -> None:
        """The Deployment controller's part: every replica created, bound, running, ready."""
        for deployment in self.deployments:
            n = deployment["spec"]["replicas"]
            deployment["status"] = {"replicas": n, "readyReplicas": n}
            deployment["metadata"]["resourceVersion"] = next(VERSIONS)
        self.pods = [replica(i) for i in range(self.deployments[0]["spec"]["replicas"])]

    def run(self, body: dict[str, Any] | None = None) -> list[servingjob_handlers.Event]:
        self.api.reset_mock()
        patch = kopf.Patch()
        events = servingjob_handlers.reconcile_pass(self.state, body or self.watched(), patch)
        assert not patch
        return events

    def tick(self, seconds: int = 1) -> list[servingjob_handlers.Event]:
        self.now += timedelta(seconds=seconds)
        self.clock[0] += seconds
        return self.run()

    def calls(self) -> list[str]:
        """The API methods the last pass called, in order."""
        called = [c[0].split(".") for c in self.api.mock_calls]
        return [parts[1] for parts in called if len(parts) == 2]

    def ready(self) -> None:
        """Bring the job to Ready: its pool created, its replica serving."""
        self.run()  # the first pass creates the Deployment and its Service
        assert self.calls()[:3] == [
            "get_namespaced_custom_object",
            "list_namespaced_deployment",
            "create_namespaced_deployment",
        ]
        self.serving()
        self.tick()
        assert self.stored["status"]["phase"] == "Ready"


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Harness:
    return Harness(monkeypatch)


def test_a_steady_job_costs_no_api_call(harness: Harness) -> None:
    harness.ready()
    for _ in range(int(USAGE_FLUSH.total_seconds()) - 1):
        assert harness.tick() == []
        assert harness.calls() == []


def test_gpu_time_is_written_every_flush(harness: Harness) -> None:
    harness.ready()
    written = harness.stored["status"]["gpuSeconds"]
    for _ in range(int(USAGE_FLUSH.total_seconds())):
        harness.tick()
    assert harness.calls()[0] == "get_namespaced_custom_object"
    assert "patch_namespaced_custom_object_status" in harness.calls()
    grown = harness.stored["status"]["gpuSeconds"] - written
    assert grown == pytest.approx(USAGE_FLUSH.total_seconds())


def test_a_deployment_that_changed_reads_afresh_and_writes_the_status(harness: Harness) -> None:
    harness.ready()
    harness.tick()
    deployment = harness.deployments[0]
    deployment["status"] = {"replicas": 1, "readyReplicas": 0}  # its replica stopped serving
    deployment["metadata"]["resourceVersion"] = next(VERSIONS)
    events = harness.tick()
    assert harness.calls()[:2] == ["get_namespaced_custom_object", "list_namespaced_deployment"]
    assert "patch_namespaced_custom_object_status" in harness.calls()
    assert harness.stored["status"]["phase"] != "Ready"
    assert events


def test_a_spec_change_reads_afresh_and_scales(harness: Harness) -> None:
    harness.ready()
    harness.stored["spec"]["server"]["minReplicas"] = 2
    harness.stored["metadata"]["generation"] = 2
    harness.stored["metadata"]["resourceVersion"] = next(VERSIONS)
    harness.tick()
    assert "patch_namespaced_deployment_scale" in harness.calls()


def test_the_first_pass_after_a_start_reads_afresh_then_none(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.ready()
    restarted = Harness(monkeypatch)  # a new operator process: empty memories
    restarted.stored, restarted.deployments = harness.stored, harness.deployments
    restarted.pods, restarted.now = harness.pods, harness.now + timedelta(seconds=5)
    restarted.run()
    assert restarted.calls()[0] == "get_namespaced_custom_object"
    restarted.tick()
    assert restarted.calls() == []


def test_a_body_older_than_the_last_write_reads_afresh_and_writes_nothing(
    harness: Harness,
) -> None:
    harness.run()
    stale = harness.watched()  # before the Deployment served
    harness.serving()
    harness.tick()
    assert harness.stored["status"]["phase"] == "Ready"
    harness.run(stale)  # the watch has not delivered the Ready status yet
    assert "patch_namespaced_custom_object_status" not in harness.calls()
    assert harness.calls()[0] == "get_namespaced_custom_object"


def test_without_the_watches_every_pass_reads_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(monkeypatch, watched=False)
    harness.ready()
    harness.tick()
    assert harness.calls()[:2] == ["get_namespaced_custom_object", "list_namespaced_deployment"]


def autoscaled(harness: Harness, **extra: Any) -> None:
    harness.stored["spec"]["autoscaling"] = {
        "intervalSeconds": 10,
        "prometheus": {"url": "http://prom:9090"},
        "capacity": {"prefillTokensPerSecond": 10000, "decodeBatchSize": 32},
        **extra,
    }
    harness.stored["spec"]["slo"] = {"ttftP90Seconds": 1.0, "itlP90Seconds": 0.05}


def test_an_autoscaled_job_reads_afresh_only_when_a_tick_is_due(harness: Harness) -> None:
    autoscaled(harness)
    harness.ready()
    for _ in range(12):  # settle: the first ticks and the status they report
        harness.tick()
    acted, ticked, flushed = 0, 0, 0
    for _ in range(30):
        samples = len(harness.source.stale_after)
        harness.tick()
        acted += bool(harness.calls())
        ticked += len(harness.source.stale_after) > samples
        flushed += "gpuSeconds" in str(harness.api.mock_calls)
    # Ticks are due every 10 s and GPU time every USAGE_FLUSH (30 s): only those passes read
    # afresh, the others make no API call.
    assert (ticked, flushed) == (3, 1)
    assert acted == 4


def test_a_job_with_standbys_reads_afresh_every_pass(harness: Harness) -> None:
    harness.stored["spec"]["server"]["maxReplicas"] = 3
    autoscaled(harness, standby={"server": {"replicas": 1}})
    harness.run()
    harness.serving()
    for _ in range(3):
        harness.tick()
        assert harness.calls()[0] == "get_namespaced_custom_object"


def test_watched_deployments_are_found_by_namespace_and_job() -> None:
    store = LabelledObjects(names.SERVINGJOB_LABEL)

    def deployment(name: str, namespace: str, job: str) -> dict[str, Any]:
        labels = {names.SERVINGJOB_LABEL: job}
        return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}

    store.replace([deployment("b", "ns", "chat"), deployment("a", "ns", "chat")])
    store.event("ADDED", deployment("c", "other", "chat"))
    assert [d["metadata"]["name"] for d in store.labelled("ns", "chat")] == ["a", "b"]
    store.event("DELETED", deployment("a", "ns", "chat"))
    assert [d["metadata"]["name"] for d in store.labelled("ns", "chat")] == ["b"]
    assert store.labelled("ns", "other-job") == []
