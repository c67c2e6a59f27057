"""ServingJob end to end on the sandbox with `gpufleet operator` as a real process.

Aspects: a disaggregated ServingJob becomes one Deployment per pool (owner reference, pool
labels, gpufleet's scheduler) whose pods the gpufleet scheduler binds to the acceptable GPU type
and kwok runs; the status per pool (replicas, ready, desired, last scale) and the phase follow
the Deployments; printer columns show in `kubectl get sj`; with autoscaling off every pool is
pinned at minReplicas and changing minReplicas rescales (with a Scaled event); deleting the
ServingJob removes its Deployments and pods (garbage collection through owner references); a
ServingJob whose Prometheus is unreachable gets MetricsAvailable=False with the reason and
holds its replicas (no scale-down on missing data); an operator killed and restarted adopts the
Deployments and the replica counts it finds; a Deployment of the same name that the job does not
own is left alone and the job says so; replicas the scheduler cannot place carry its reason on
the Ready condition; a ServingJob deleted while a periodic pass over it is running is gone
seconds after that pass ends (kopf releases its finalizer once it sees the timer stopped).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract import names
from gpufleet.model.contract.names import POOL_LABEL, SERVINGJOB_LABEL
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.processes import free_port
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for

GROUP, VERSION, PLURAL = "gpufleet.io", "v1alpha1", "servingjobs"
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "registry.example/vllm:1"}]}}


class Serving:
    """ServingJob and Deployment helpers for one namespace."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.apps = client.AppsV1Api(kube.core.api_client)

    def create(self, name: str, **spec: Any) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ServingJob",
            "metadata": {"name": name},
        }
        self.kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, {**body, "spec": spec}
        )

    def get(self, name: str) -> dict[str, Any]:
        obj: Any = self.kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, name
        )
        return dict(obj)

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        for c in self.status(name).get("conditions") or []:
            if c["type"] == kind:
                return dict(c)
        return None

    def patch(self, name: str, patch: dict[str, Any]) -> None:
        self.kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, name, patch
        )

    def delete(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def names(self) -> list[str]:
        out: Any = self.kube.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)
        return [item["metadata"]["name"] for item in out["items"]]

    def deployments(self, job: str | None = None) -> dict[str, dict[str, Any]]:
        selector = f"{SERVINGJOB_LABEL}={job}" if job else SERVINGJOB_LABEL
        raw: Any = self.apps.list_namespaced_deployment(
            self.ns, label_selector=selector, _preload_content=False
        )
        return {d["metadata"]["name"]: d for d in json.loads(raw.data)["items"]}

    def pods(self, job: str, pool: str) -> list[dict[str, Any]]:
        return self.kube.pods(self.ns, f"{SERVINGJOB_LABEL}={job},{POOL_LABEL}={pool}")

    def running(self, job: str, pool: str, count: int) -> list[dict[str, Any]] | None:
        """The pool's live pods when exactly `count` run bound by gpufleet, else None."""
        pods = [p for p in self.pods(job, pool) if not p["metadata"].get("deletionTimestamp")]
        ok = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return ok if len(ok) == count == len(pods) else None

    def pool_is(self, job: str, pool: str, **want: int) -> dict[str, Any] | None:
        entry = self.status(job).get(pool) or {}
        return entry if all(entry.get(k) == v for k, v in want.items()) else None

    def events(self, job: str, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.kube.events(self.ns, job) if e.get("reason") == reason]


@pytest.fixture
def serving(kube: Kube, ns: str) -> Iterator[Serving]:
    """The namespace's ServingJobs are deleted, and their pods gone, before `ns` cleans up."""
    helper = Serving(kube, ns)
    yield helper
    for name in helper.names():
        helper.delete(name)
    wait_for(lambda: not helper.names(), "ServingJobs deleted", 30)
    wait_for(lambda: not helper.deployments(), "Deployments collected", 60)
    wait_for(lambda: not kube.pods(ns, SERVINGJOB_LABEL), "serving pods gone", 60)


def stays(check: Callable[[], object], seconds: float) -> bool:
    """Whether `check` holds at every poll for `seconds` (five autoscaler intervals here)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not check():
            return False
        time.sleep(0.2)
    return True


def service(kube: Kube, ns: str, name: str) -> Any:
    try:
        return kube.core.read_namespaced_service(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


class HeldPrometheus:
    """A Prometheus stand-in that answers every query with no samples; once `armed`, it holds
    the next query for `hold_s` seconds (under the operator's 5 s query timeout), setting
    `holding` when it starts: an autoscaler tick, and so the pass running it, that lasts."""

    def __init__(self, hold_s: float) -> None:
        self.armed = threading.Event()
        self.holding = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer.armed.is_set() and not outer.holding.is_set():
                    outer.holding.set()
                    time.sleep(hold_s)
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": []}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def disaggregated(**extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "prefill": {
            "minReplicas": 1,
            "maxReplicas": 3,
            "gpusPerReplica": 2,
            "gpuTypes": [{"name": "H100-80GB"}],
            "template": TEMPLATE,
        },
        "decode": {
            "minReplicas": 2,
            "maxReplicas": 4,
            "gpusPerReplica": 1,
            "gpuTypes": [{"name": "A100-80GB"}],
            "template": TEMPLATE,
        },
        "priority": 500,
    }
    spec.update(extra)
    return spec


def test_servingjob_becomes_deployments_whose_pods_gpufleet_places(
    serving: Serving, sandbox: Sandbox, kube: Kube
) -> None:
    serving.create("chat", **disaggregated())
    deployments = wait_for(
        lambda: (d := serving.deployments("chat")) and len(d) == 2 and d, "two Deployments"
    )
    assert set(deployments) == {"chat-prefill", "chat-decode"}
    uid = serving.get("chat")["metadata"]["uid"]
    for name, d in deployments.items():
        (owner,) = d["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("ServingJob", uid, True)
        assert d["spec"]["template"]["spec"]["schedulerName"] == names.SCHEDULER_NAME
        assert d["spec"]["replicas"] == (1 if name == "chat-prefill" else 2)

    for pool in ("prefill", "decode"):
        svc = wait_for(lambda p=pool: service(kube, serving.ns, f"chat-{p}"), f"{pool} Service")
        assert svc.spec.selector == {SERVINGJOB_LABEL: "chat", POOL_LABEL: pool}
        assert svc.metadata.owner_references[0].uid == uid

    prefill = wait_for(lambda: serving.running("chat", "prefill", 1), "prefill running", 60)
    decode = wait_for(lambda: serving.running("chat", "decode", 2), "decode running", 60)
    for pods, gpu_type, gpus in ((prefill, "H100-80GB", 2), (decode, "A100-80GB", 1)):
        for pod in pods:
            annotations = pod["metadata"]["annotations"]
            assert pod["spec"]["nodeName"]
            assert annotations[names.ASSIGNED_TYPE] == gpu_type
            assert len(annotations[names.ASSIGNED_GPUS].split(",")) == gpus
            assert annotations[names.PRIORITY] == "500"

    wait_for(
        lambda: serving.pool_is("chat", "decode", replicas=2, readyReplicas=2, desiredReplicas=2),
        "decode status",
    )
    wait_for(lambda: serving.status("chat").get("phase") == "Ready", "phase Ready")
    status = serving.status("chat")
    assert status["prefill"]["desiredReplicas"] == 1
    assert "created with 1 replicas" in status["prefill"]["lastScaleReason"]
    assert status["observedGeneration"] == 1
    scaling = serving.condition("chat", "ScalingActive")
    assert scaling is not None and scaling["reason"] == "AutoscalingDisabled"
    assert wait_for(lambda: serving.events("chat", "Ready"), "Ready event")

    table = sandbox.kubectl("get", "sj", "-n", serving.ns).stdout.split("\n")
    assert table[0].split() == ["NAME", "PHASE", "READY", "PREFILL", "DECODE", "SERVER", "AGE"]
    assert table[1].split()[:5] == ["chat", "Ready", "True", "1", "2"]
    wide = sandbox.kubectl("get", "sj", "-n", serving.ns, "-o", "wide").stdout
    assert "PREFILL DESIRED" in wide and "DECODE DESIRED" in wide


def test_pinned_pools_follow_min_replicas(serving: Serving) -> None:
    serving.create("pinned", **disaggregated(autoscaling={"enabled": False}))
    wait_for(lambda: serving.running("pinned", "decode", 2), "decode at its minimum", 60)

    serving.patch("pinned", {"spec": {"decode": {"minReplicas": 3}}})
    wait_for(lambda: serving.running("pinned", "decode", 3), "decode raised to 3", 60)
    entry = wait_for(
        lambda: serving.pool_is("pinned", "decode", readyReplicas=3, desiredReplicas=3),
        "decode status at 3",
    )
    assert "2->3" in entry["lastScaleReason"]
    assert wait_for(lambda: serving.events("pinned", "Scaled"), "Scaled event")

    serving.patch("pinned", {"spec": {"decode": {"minReplicas": 1}}})
    wait_for(lambda: serving.running("pinned", "decode", 1), "decode pinned at 1", 60)
    entry = wait_for(lambda: serving.pool_is("pinned", "decode", desiredReplicas=1), "status at 1")
    assert entry["lastScaleReason"] == "decode: 3->1 (autoscaling disabled: pinned at minReplicas)"


def test_deleting_removes_deployments_and_pods(serving: Serving, kube: Kube) -> None:
    serving.create("gone", server={"minReplicas": 2, "gpusPerReplica": 1, "template": TEMPLATE})
    wait_for(lambda: serving.running("gone", "server", 2), "server running", 60)
    serving.delete("gone")
    wait_for(lambda: not serving.deployments("gone"), "Deployments collected", 60)
    wait_for(lambda: not serving.pods("gone", "server"), "pods collected", 60)


def test_unreachable_prometheus_is_reported_and_nothing_scales(serving: Serving) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    serving.create(
        "blind",
        server={"minReplicas": 2, "maxReplicas": 4, "gpusPerReplica": 1, "template": TEMPLATE},
        slo={"ttftP90Seconds": 1.0, "itlP90Seconds": 0.05},
        autoscaling={
            "intervalSeconds": 1,
            "prometheus": {"url": url, "staleAfterSeconds": 5},
            "capacity": {"prefillTokensPerSecond": 4000, "decodeBatchSize": 32},
            "scaleDown": {"stabilizationWindowSeconds": 0, "maxStep": 2},
        },
    )
    metrics = wait_for(
        lambda: (
            (c := serving.condition("blind", "MetricsAvailable")) and c["status"] == "False" and c
        ),
        "MetricsAvailable=False",
    )
    assert metrics["reason"] == "MetricsMissing"
    assert url in metrics["message"] and "cannot connect" in metrics["message"]
    scaling = serving.condition("blind", "ScalingActive")
    assert scaling is not None and scaling["status"] == "False"
    warning = wait_for(lambda: serving.events("blind", "MetricsUnavailable"), "Warning event")
    assert warning[0]["type"] == "Warning" and url in warning[0]["message"]

    # Lowering the minimum would allow a scale-down; without data the autoscaler holds at 2.
    serving.patch("blind", {"spec": {"server": {"minReplicas": 1}}})
    wait_for(lambda: serving.running("blind", "server", 2), "server running", 60)
    generation = serving.get("blind")["metadata"]["generation"]
    wait_for(
        lambda: serving.status("blind").get("observedGeneration") == generation, "new spec seen"
    )
    held = stays(lambda: serving.running("blind", "server", 2), 5.0)
    assert held, "the autoscaler changed replicas without metrics"
    (deployment,) = serving.deployments("blind").values()
    assert deployment["spec"]["replicas"] == 2
    assert serving.status("blind")["server"]["desiredReplicas"] == 2
    assert not serving.events("blind", "Scaled")


def test_restart_rebuilds_from_the_cluster(serving: Serving, operator: OperatorProcess) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    serving.create(
        "steady",
        server={"minReplicas": 1, "maxReplicas": 4, "gpusPerReplica": 1, "template": TEMPLATE},
        slo={"ttftP90Seconds": 1.0, "itlP90Seconds": 0.05},
        autoscaling={
            "intervalSeconds": 1,
            "prometheus": {"url": url},
            "capacity": {"prefillTokensPerSecond": 4000, "decodeBatchSize": 32},
        },
    )
    wait_for(lambda: serving.running("steady", "server", 1), "server running", 60)
    # An earlier decision (here: by hand) left 3 replicas; a restarted operator keeps them.
    serving.apps.patch_namespaced_deployment_scale(
        "steady-server", serving.ns, {"spec": {"replicas": 3}}
    )
    wait_for(lambda: serving.running("steady", "server", 3), "three replicas", 60)
    (before,) = serving.deployments("steady").values()
    operator.kill()
    operator.start()
    # start() returns once the new process holds the Lease and its scheduler is ready; its kopf
    # starts after that (seconds later on a loaded machine). Everything below but a spec change
    # was already true before the kill, so only an observed spec change shows that the new
    # process handles the job (and the teardown's deletion, which needs its kopf to release the
    # finalizer, then does not wait for that start-up as well).
    serving.patch("steady", {"spec": {"server": {"maxReplicas": 5}}})
    generation = serving.get("steady")["metadata"]["generation"]
    wait_for(
        lambda: serving.status("steady").get("observedGeneration") == generation,
        "the restarted operator handling the job",
        60,
    )
    assert stays(lambda: serving.running("steady", "server", 3), 5.0)
    (after,) = serving.deployments("steady").values()
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # adopted, not recreated
    assert after["spec"]["replicas"] == 3
    wait_for(lambda: serving.pool_is("steady", "server", desiredReplicas=3), "status at 3")
    wait_for(
        lambda: (c := serving.condition("steady", "MetricsAvailable")) and c["status"] == "False",
        "metrics still reported missing",
    )


def test_a_job_deleted_during_a_pass_is_gone_soon_after(serving: Serving) -> None:
    prometheus = HeldPrometheus(hold_s=4.0)
    try:
        serving.create(
            "brief",
            server={"minReplicas": 1, "maxReplicas": 2, "gpusPerReplica": 1, "template": TEMPLATE},
            slo={"ttftP90Seconds": 1.0, "itlP90Seconds": 0.05},
            autoscaling={
                "intervalSeconds": 1,
                "prometheus": {"url": prometheus.url},
                "capacity": {"prefillTokensPerSecond": 4000, "decodeBatchSize": 32},
            },
        )
        wait_for(lambda: serving.condition("brief", "MetricsAvailable"), "a first tick")
        # From here on the ticks are the timer's: the next one stalls on its query, and the
        # job is deleted while that pass runs.
        prometheus.armed.set()
        assert prometheus.holding.wait(30), "no periodic pass queried Prometheus"
        serving.delete("brief")
        # The pass ends 4 s after the deletion; kopf used to look again only after 60 s.
        wait_for(lambda: "brief" not in serving.names(), "the job gone", 20)
    finally:
        prometheus.close()


def test_a_foreign_deployment_is_never_adopted(serving: Serving) -> None:
    foreign: Any = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "taken-server", "labels": {"app": "someone-else"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "someone-else"}},
            "template": {"metadata": {"labels": {"app": "someone-else"}}, **TEMPLATE},
        },
    }
    serving.apps.create_namespaced_deployment(serving.ns, foreign)
    serving.create("taken", server={"gpusPerReplica": 1, "template": TEMPLATE})
    wait_for(lambda: serving.status("taken").get("phase") == "Failed", "phase Failed")
    ready = serving.condition("taken", "Ready")
    assert ready is not None and ready["reason"] == "DeploymentRejected"
    assert "taken-server already exists and is not owned" in ready["message"]
    kept: Any = serving.apps.read_namespaced_deployment("taken-server", serving.ns)
    assert kept.metadata.labels == {"app": "someone-else"} and not kept.metadata.owner_references
    serving.apps.delete_namespaced_deployment("taken-server", serving.ns)


def test_replicas_waiting_for_gpus_say_why(serving: Serving) -> None:
    pool = {"gpusPerReplica": 1, "gpuTypes": [{"name": "H200-141GB"}], "template": TEMPLATE}
    serving.create("nowhere", server=pool)
    ready = wait_for(
        lambda: (
            (c := serving.condition("nowhere", "Ready")) and c["reason"] != "ReplicasNotReady" and c
        ),
        "the scheduler's reason on the Ready condition",
        30,
    )
    assert ready["status"] == "False" and ready["reason"] == "NoNodesOfAcceptableType"
    assert "server 0/1 ready; " in ready["message"] and "H200-141GB" in ready["message"]
    assert serving.status("nowhere")["phase"] == "Pending"
