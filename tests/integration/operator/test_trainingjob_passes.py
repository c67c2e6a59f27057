"""TrainingJob passes run in-process against the sandbox's API server, in the orders kopf can
produce, with no operator process acting on the same jobs.

Aspects: a pass handed a body older than the previous pass's writes (a timer's body read before
the user suspended the job, which another handler has just acted on) neither recreates the
workers nor writes the old phase back, and posts nothing; a pass handed the body of a job
deleted since creates nothing.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract.names import TRAININGJOB_LABEL as JOB_LABEL
from gpufleet.operator import trainingjob_handlers
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, training_job


class ApiPods:
    """The handlers' `PodSource` read straight from the API server (no watch needed here)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def owned_pods(self, namespace: str, owner: str) -> list[dict[str, Any]]:
        return self.kube.pods(namespace, f"{JOB_LABEL}={owner}")

    def on_pod_deleted(self, hook: Callable[[dict[str, Any]], None]) -> None:
        """No pod of these tests is disrupted."""


class Jobs:
    """TrainingJobs of one namespace, and the passes of an in-process handler state."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.ns = kube, namespace
        self.state = trainingjob_handlers.State(kube.core.api_client, ApiPods(kube))

    def create(self, name: str) -> dict[str, Any]:
        created: Any = self.kube.custom.create_namespaced_custom_object(
            "gpufleet.io", "v1alpha1", self.ns, "trainingjobs", training_job(name, replicas=2)
        )
        return dict(created)

    def get(self, name: str) -> dict[str, Any]:
        job = self.kube.job(self.ns, name)
        assert job is not None
        return job

    def run_pass(self, body: dict[str, Any]) -> list[trainingjob_handlers.Event]:
        """One pass as a kopf handler would run it with `body`; its patch stays empty."""
        patch = kopf.Patch()
        events = trainingjob_handlers.reconcile_pass(self.state, body, patch)
        assert not patch, "a valid job's pass writes its status itself, under the job's lock"
        return events

    def workers(self, name: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.kube.pods(self.ns, f"{JOB_LABEL}={name}"))


@pytest.fixture
def jobs(sandbox: Sandbox, kube: Kube) -> Iterator[Jobs]:
    namespace = f"trainingjob-passes-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(namespace)
    helper = Jobs(kube, namespace)
    yield helper
    helper.state.pool.shutdown(wait=True)
    with contextlib.suppress(ApiException):
        kube.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        kube.core.delete_namespace(namespace)


def test_a_pass_with_a_stale_body_keeps_the_previous_pass_suspension(jobs: Jobs) -> None:
    stale = jobs.create("train")  # what a timer may still hold later
    created = jobs.run_pass(stale)
    assert jobs.workers("train") == ["train-worker-0", "train-worker-1"]
    assert [e[1] for e in created if e[0] == "Normal"] == ["Queued"]

    jobs.kube.patch_job(jobs.ns, "train", {"spec": {"runPolicy": {"suspend": True}}})
    suspended = jobs.run_pass(jobs.get("train"))  # the update handler's pass
    assert [e[1] for e in suspended if e[0] == "Normal"] == ["Suspended"]
    assert jobs.workers("train") == []  # never bound: the API server removes them at once

    # The timer's pass with the body from before the suspension and before either status.
    assert jobs.run_pass(stale) == []
    assert jobs.workers("train") == []
    status = jobs.get("train")["status"]
    assert status["phase"] == "Suspended"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Suspended"] == "True"


def test_a_pass_for_a_deleted_job_creates_nothing(jobs: Jobs) -> None:
    body = jobs.create("gone")
    jobs.kube.delete_job(jobs.ns, "gone")
    assert jobs.run_pass(body) == []
    assert jobs.workers("gone") == []
