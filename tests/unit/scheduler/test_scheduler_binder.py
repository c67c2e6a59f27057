"""The binder against a recording fake API: bindings carry the annotations; "why pending"
writes go out in the background, once per message, and never after the pod was bound."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract import names
from gpufleet.scheduler import binder as binder_module
from gpufleet.scheduler.binder import Binder, BindRequest, JobGone
from gpufleet.testing.operator import wait_for


class Answer:
    """A raw answer the binder drops unread: it must hand the connection back."""

    released = 0

    def drain_conn(self) -> None:
        """Nothing left to read."""

    def release_conn(self) -> None:
        type(self).released += 1


class FakeCore:
    api_client = None  # what the binder hands other API groups' clients

    def __init__(self) -> None:
        self.bindings: list[dict[str, Any]] = []
        self.status_patches: list[tuple[str, str]] = []
        self.gate = threading.Event()
        self.gate.set()

    def create_namespaced_pod_binding(self, name: str, ns: str, body: Any, **_: Any) -> Answer:
        self.bindings.append(body)
        return Answer()

    def patch_namespaced_pod_status(self, name: str, ns: str, body: Any, **_: Any) -> Answer:
        self.gate.wait(5)
        self.status_patches.append((name, body["status"]["conditions"][0]["message"]))
        return Answer()


def test_binding_writes_target_and_annotations() -> None:
    core = FakeCore()
    binder = Binder(core)  # type: ignore[arg-type]
    released = Answer.released
    result = binder.bind([BindRequest("ns/p", "n1", {"gpufleet.io/gpus": "0,1"})])
    assert result == {"ns/p": None}
    assert Answer.released == released + 1  # its connection went back to the pool
    (body,) = core.bindings
    assert body["target"]["name"] == "n1"
    assert body["metadata"] == {"name": "p", "annotations": {"gpufleet.io/gpus": "0,1"}}
    binder.close()


def test_pending_reasons_are_written_once_in_the_background() -> None:
    core = FakeCore()
    core.gate.clear()  # hold the writes in flight
    binder = Binder(core, explainers=1)  # type: ignore[arg-type]
    binder.mark_pending({"ns/a": "Reason: x", "ns/b": "Reason: x"})
    binder.mark_pending({"ns/a": "Reason: x"})  # already on its way: not queued again
    binder.bind([BindRequest("ns/b", "n1", {})])  # bound meanwhile: its reason is dropped
    core.gate.set()
    wait_for(lambda: core.status_patches, "the first write")
    binder.close()
    assert core.status_patches == [("a", "Reason: x")]


class FakeCustom:
    """TrainingJobs by (namespace, name); any other raises the API's 404."""

    def __init__(self, jobs: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.jobs = jobs
        self.asked: list[tuple[str, str, str, str, str]] = []
        self.patched: list[tuple[tuple[str, str, str, str, str], Any]] = []

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any]:
        self.asked.append((group, version, namespace, plural, name))
        if (namespace, name) not in self.jobs:
            raise ApiException(status=404, reason="Not Found")
        return self.jobs[(namespace, name)]

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> dict[str, Any]:
        self.patched.append(((group, version, namespace, plural, name), body))
        return {}


def test_a_jobs_pod_template_is_read_for_a_trainingjob_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template = {"spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "6"}}}]}}
    custom = FakeCustom({("ns", "long"): {"spec": {"template": template}}})
    monkeypatch.setattr(binder_module.client, "CustomObjectsApi", lambda _api: custom)
    core = FakeCore()
    binder = Binder(core)  # type: ignore[arg-type]
    job = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "TrainingJob", "namespace": "ns"}
    assert binder.job_template({**job, "name": "long"}) == template
    assert custom.asked == [("gpufleet.io", "v1alpha1", "ns", "trainingjobs", "long")]
    with pytest.raises(JobGone, match="ns/gone is gone"):  # deleted since
        binder.job_template({**job, "name": "gone"})
    pod = {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "long-0"}
    assert binder.job_template(pod) is None  # a bare pod: nothing asked
    assert len(custom.asked) == 2
    binder.close()


class FakeNode:
    """RuntimeClasses by name, answered as raw JSON; any other raises the API's 404, and
    `broken` the API's 500."""

    def __init__(self, classes: dict[str, dict[str, Any]]) -> None:
        self.classes = classes

    def read_runtime_class(self, name: str, _preload_content: bool = True) -> Any:
        assert _preload_content is False
        if name == "broken":
            raise ApiException(status=500, reason="Internal Server Error")
        if name not in self.classes:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(data=json.dumps(self.classes[name]).encode())


def test_a_runtime_class_is_read_by_name_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    kata = {
        "handler": "kata",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "1Gi"}},
        "scheduling": {"nodeSelector": {"pool": "kata"}},
    }
    node = FakeNode({"kata": kata, "runc": {"handler": "runc"}})
    monkeypatch.setattr(binder_module.client, "NodeV1Api", lambda _api: node)
    binder = Binder(FakeCore())  # type: ignore[arg-type]
    assert binder.runtime_class("kata") == kata
    assert binder.runtime_class("runc") == {"handler": "runc"}
    assert binder.runtime_class("gone") is None
    with pytest.raises(ApiException):
        binder.runtime_class("broken")
    # Edited under the same name: the next read sees it.
    node.classes["kata"] = {"handler": "kata"}
    assert binder.runtime_class("kata") == {"handler": "kata"}
    binder.close()


def test_the_tiers_eviction_is_recorded_on_a_trainingjob_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    custom = FakeCustom({})
    monkeypatch.setattr(binder_module.client, "CustomObjectsApi", lambda _api: custom)
    binder = Binder(FakeCore())  # type: ignore[arg-type]
    job = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "TrainingJob", "namespace": "ns"}
    binder.record_tier_eviction({**job, "name": "long"}, 3)
    bare = {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "p"}
    binder.record_tier_eviction(bare, 1)  # a gang of bare pods: nothing to record on
    assert custom.patched == [
        (
            ("gpufleet.io", "v1alpha1", "ns", "trainingjobs", "long"),
            {"metadata": {"annotations": {names.TIER_EVICTIONS: "3"}}},
        )
    ]
    binder.close()
