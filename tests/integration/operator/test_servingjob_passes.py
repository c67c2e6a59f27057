"""ServingJob passes run in-process against the sandbox's API server, in the orders kopf can
produce, with no operator process acting on the same jobs.

Aspects: a pass handed a body older than the previous pass's writes (a timer's body read before
a spec change that another handler has just acted on, whose status patch kopf has not applied
yet) keeps that pass's scale and scale reason instead of scaling back and overwriting them; a
pass handed the body of a job deleted since creates nothing.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.autoscaler.service import JobAutoscalers
from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.model.contract.names import SERVINGJOB_LABEL
from gpufleet.operator import servingjob_handlers
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube

GROUP, VERSION, PLURAL = "gpufleet.io", "v1alpha1", "servingjobs"
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "registry.example/vllm:1"}]}}


class Jobs:
    """ServingJobs of one namespace, and the passes of an in-process handler state."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.ns = kube, namespace
        self.apps = client.AppsV1Api(kube.core.api_client)
        self.state = servingjob_handlers.State(
            kube.core.api_client, JobAutoscalers(AutoscalerSettings())
        )

    def create(self, name: str, min_replicas: int) -> dict[str, Any]:
        pool = {"minReplicas": min_replicas, "gpusPerReplica": 1, "template": TEMPLATE}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ServingJob",
            "metadata": {"name": name},
            "spec": {"server": pool, "autoscaling": {"enabled": False}},
        }
        created: Any = self.kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, body
        )
        return dict(created)

    def get(self, name: str) -> dict[str, Any]:
        obj: Any = self.kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, name
        )
        return dict(obj)

    def run_pass(self, body: dict[str, Any]) -> list[servingjob_handlers.Event]:
        """One pass as a kopf handler would run it with `body`; its patch stays empty."""
        patch = kopf.Patch()
        events = servingjob_handlers.reconcile_pass(self.state, body, patch)
        assert not patch, "a valid job's pass writes its status itself, under the job's lock"
        return events

    def replicas(self, name: str) -> dict[str, int]:
        raw: Any = self.apps.list_namespaced_deployment(
            self.ns, label_selector=f"{SERVINGJOB_LABEL}={name}", _preload_content=False
        )
        return {d["metadata"]["name"]: d["spec"]["replicas"] for d in json.loads(raw.data)["items"]}


@pytest.fixture
def jobs(sandbox: Sandbox, kube: Kube) -> Iterator[Jobs]:
    namespace = f"servingjob-passes-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(namespace)
    helper = Jobs(kube, namespace)
    yield helper
    helper.state.close()
    with contextlib.suppress(ApiException):
        kube.core.delete_namespace(namespace)


def test_a_pass_with_a_stale_body_keeps_the_previous_pass_scale_and_reason(jobs: Jobs) -> None:
    stale = jobs.create("chat", min_replicas=1)  # what a timer may still hold later
    created = jobs.run_pass(stale)
    assert jobs.replicas("chat") == {"chat-server": 1}
    assert ("Normal", "PoolCreated", "server: created with 1 replicas (minReplicas)") in created

    jobs.kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, jobs.ns, PLURAL, "chat", {"spec": {"server": {"minReplicas": 2}}}
    )
    scaled = jobs.run_pass(jobs.get("chat"))  # the update handler's pass
    assert [e[1] for e in scaled if e[1] == "Scaled"] == ["Scaled"]
    assert jobs.replicas("chat") == {"chat-server": 2}

    # The timer's pass with the body from before the spec change and before either status.
    assert jobs.run_pass(stale) == []
    assert jobs.replicas("chat") == {"chat-server": 2}
    server = jobs.get("chat")["status"]["server"]
    assert server["desiredReplicas"] == 2
    assert server["lastScaleReason"] == (
        "server: 1->2 (autoscaling disabled: pinned at minReplicas)"
    )


def test_a_pass_for_a_deleted_job_creates_nothing(jobs: Jobs) -> None:
    body = jobs.create("gone", min_replicas=1)
    jobs.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, jobs.ns, PLURAL, "gone")
    assert jobs.run_pass(body) == []
    assert jobs.replicas("gone") == {}
