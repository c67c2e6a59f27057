"""Running `gpufleet operator` as a real child process, for integration tests and benchmarks.

In the spirit of kopf's KopfRunner, but a separate process, so tests can `kill -9` it at any
moment and start it again. It is stopped by PID only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.lifecycle import StartStop
from gpufleet.model.contract import names
from gpufleet.operator.podtemplate import GPU_TOLERATIONS
from gpufleet.operator.reconcile import GANG_RESTART, WAITING_FOR_SCHEDULER
from gpufleet.sandbox.processes import free_port
from gpufleet.scheduler.lease import DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE
from gpufleet.testing import invariants

T = TypeVar("T")


class OperatorProcess(StartStop):
    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        coordination: client.CoordinationV1Api,
        *extra_args: str,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.coordination = coordination
        self.metrics_port = free_port()
        self.args = [
            f"--metrics-port={self.metrics_port}",
            "--lease-duration=3",
            "--node-failure-grace=2",
            "--log-level=INFO",
            *extra_args,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0, lead: bool = True) -> None:
        """Start and wait until this process holds the Lease (it then schedules at once), or
        with `lead` False only until its probe endpoint answers (a standby, while another
        replica leads)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpufleet.app",
                 f"--kubeconfig={self.kubeconfig}", *self.args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}; see {self.log}")
            if (self.holds_lease() and self.ready()) if lead else self.alive():
                return
            time.sleep(0.1)
        what = "take the lease" if lead else "answer /healthz"
        raise TimeoutError(f"operator did not {what} in {timeout}s; see {self.log}")

    def alive(self) -> bool:
        """Whether its liveness probe (/healthz) answers 200."""
        url = f"http://127.0.0.1:{self.metrics_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def ready(self) -> bool:
        """The scheduler's readiness gauge on the metrics endpoint."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                text = response.read().decode()
        except OSError:
            return False
        return "gpufleet_scheduler_ready 1.0" in text

    def adopt(self, standby: OperatorProcess) -> bool:
        """Carry on as `standby` (its process, port and log) if it leads, with the same
        arguments, and this process is gone; then `standby` no longer owns that process.
        A fixture's operator whose test had a standby take over keeps that one rather than
        stopping it and starting its own again (a graceful stop and a fresh start take seconds)."""
        if self.proc is not None and self.proc.poll() is None:
            return False
        if standby.proc is None or standby.proc.poll() is not None:
            return False
        ours, theirs = (
            [a for a in p.args if not a.startswith("--metrics-port=")] for p in (self, standby)
        )
        if (standby.kubeconfig, theirs) != (self.kubeconfig, ours) or not standby.holds_lease():
            return False
        self.proc, self.metrics_port, self.log, self.args = (
            standby.proc, standby.metrics_port, standby.log, standby.args
        )  # fmt: skip
        standby.proc = None
        return True

    def holds_lease(self) -> bool:
        try:
            raw: Any = self.coordination.read_namespaced_lease(
                DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE, _preload_content=False
            )
        except ApiException:
            return False
        holder = (json.loads(raw.data).get("spec") or {}).get("holderIdentity") or ""
        return f"-{self.pid}-" in holder

    def kill(self) -> None:
        """SIGKILL: no clean-up, no Lease release."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@contextlib.contextmanager
def configured_operator(
    kubeconfig: Path,
    kube: Kube,
    folder: Path,
    settings: str,
    cordoned: Sequence[str] = (),
) -> Iterator[OperatorProcess]:
    """A leading operator that reads `settings` (a settings file's YAML, written into `folder`),
    with the `cordoned` nodes unschedulable while it runs (and schedulable again after)."""
    config = folder / "settings.yaml"
    config.write_text(settings)
    for name in cordoned:
        kube.core.patch_node(name, {"spec": {"unschedulable": True}})
    try:
        with OperatorProcess(
            kubeconfig, folder / "operator.log", kube.coordination, f"--config={config}"
        ) as proc:
            yield proc
    finally:
        for name in cordoned:
            kube.core.patch_node(name, {"spec": {"unschedulable": None}})


def training_job(
    name: str,
    replicas: int,
    gpus: int = 1,
    gpu_type: str = "T4",
    priority: int = 0,
    mig_profile: str | None = None,
) -> dict[str, Any]:
    """A TrainingJob manifest: `replicas` workers of `gpus` whole GPUs of `gpu_type` each, or
    of one `mig_profile` slice each when given."""
    size: dict[str, Any] = {"migProfile": mig_profile} if mig_profile else {"gpusPerReplica": gpus}
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            **size,
            "gpuTypes": [{"name": gpu_type}],
            "priority": priority,
            "template": {"spec": {"containers": [{"name": "m", "image": "registry.example/x:1"}]}},
        },
    }


def bare_gang_pod(name: str, rank: int, preemptible: bool = True) -> dict[str, Any]:
    """One of a gang of 2 pods of 4 T4 each made without the operator, naming no queue."""
    annotations = {
        names.GANG_SIZE: "2",
        names.GPU_TYPES: "T4",
        names.PREEMPTIBLE: str(preemptible).lower(),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{rank}",
            "labels": {names.GANG_LABEL: name, names.RANK_LABEL: str(rank)},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            "tolerations": list(GPU_TOLERATIONS),  # the sandbox's GPU nodes are tainted
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/x:1",
                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                }
            ],
        },
    }


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
    """Poll `check` until it returns a truthy value; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


# A finalizer tests put on a pod to keep it in the API once deleted: kwok deletes evicted and
# deleted pods at once, which would leave no grace period to watch.
LINGER = "gpufleet.io/test-linger"


# Pending reasons the operator writes before the scheduler has had its say.
_OPERATOR_REASONS = frozenset({WAITING_FOR_SCHEDULER, GANG_RESTART})


class Kube:
    """Small typed helpers over the API for tests: jobs, pods, namespaces, as JSON dicts."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)

    def create_namespace(self, name: str) -> None:
        body: Any = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.core.create_namespace(body)

    def create_queue(
        self, name: str, gpu_type: str, nominal: int, borrowing_limit: int | None = None
    ) -> None:
        """A GPUQueue with a nominal quota of `nominal` GPUs of `gpu_type` (and a borrowing
        limit when given)."""
        quota: dict[str, Any] = {"gpuType": gpu_type, "nominal": nominal}
        if borrowing_limit is not None:
            quota["borrowingLimit"] = borrowing_limit
        body: Any = {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "GPUQueue",
            "metadata": {"name": name},
            "spec": {"quotas": [quota]},
        }
        self.custom.create_cluster_custom_object("gpufleet.io", "v1alpha1", "gpuqueues", body)

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(
            "gpufleet.io", "v1alpha1", namespace, "trainingjobs", manifest
        )

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: Any = self.custom.get_namespaced_custom_object(
                "gpufleet.io", "v1alpha1", namespace, "trainingjobs", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj)

    def jobs(self, namespace: str) -> list[dict[str, Any]]:
        out: Any = self.custom.list_namespaced_custom_object(
            "gpufleet.io", "v1alpha1", namespace, "trainingjobs"
        )
        return list(out["items"])

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            "gpufleet.io", "v1alpha1", namespace, "trainingjobs", name, patch
        )

    def delete_job(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(
                "gpufleet.io", "v1alpha1", namespace, "trainingjobs", name
            )

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        raw: Any = self.core.list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(raw.data)["items"]
        return items

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The TrainingJob `job`'s pods, as the API shows them (those being deleted too)."""
        return self.pods(namespace, f"{names.TRAININGJOB_LABEL}={job}")

    def live_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """`job`'s pods not being deleted (an evicted job's recreated workers, say)."""
        return [
            p for p in self.job_pods(namespace, job) if not p["metadata"].get("deletionTimestamp")
        ]

    def all_bound(self, namespace: str, job: str) -> bool:
        """Whether `job` has pods not being deleted and every one of them is bound."""
        pods = self.live_pods(namespace, job)
        return bool(pods) and all(p["spec"].get("nodeName") for p in pods)

    def bound(self, namespace: str, job: str, started: bool = False) -> list[dict[str, Any]]:
        """`job`'s pods bound to a node and not being deleted (`started`: and started)."""
        return [
            p
            for p in self.job_pods(namespace, job)
            if p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and (not started or (p.get("status") or {}).get("startTime"))
        ]

    def one_started_each(self, namespace: str, jobs: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Each one-pod job's started pod, once every one of `jobs` has exactly one (empty
        before)."""
        out = {}
        for job in jobs:
            pods = self.bound(namespace, job, started=True)
            if len(pods) != 1:
                return {}
            out[job] = pods[0]
        return out

    def linger(self, namespace: str, pod: str, hold: bool) -> None:
        """Keep the pod in the API after its deletion (`LINGER`), or let it go."""
        body = {"metadata": {"finalizers": [LINGER] if hold else None}}
        self.core.patch_namespaced_pod(pod, namespace, body)

    def scheduled_message(self, namespace: str, job: str) -> str:
        """The message of the PodScheduled condition of `job`'s pods: why the scheduler left
        it pending (the first pod with one; empty without one)."""
        for pod in self.job_pods(namespace, job):
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c["type"] == "PodScheduled" and c.get("message"):
                    return str(c["message"])
        return ""

    def phase(self, namespace: str, name: str) -> str | None:
        job = self.job(namespace, name)
        return None if job is None else (job.get("status") or {}).get("phase")

    def condition(self, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
        job = self.job(namespace, name) or {}
        for c in (job.get("status") or {}).get("conditions") or []:
            if c["type"] == kind:
                return dict(c)
        return None

    def waiting_reason(self, namespace: str, name: str) -> tuple[str, str] | None:
        """The job's pending reason and message once the scheduler has given one (its
        `Admitted` condition False for a reason other than the two the operator gives before
        the scheduler can: `WaitingForScheduler`, which pods carry until a cycle has seen them,
        and `GangRestart`, while a preempted gang's old pods take their grace period to go);
        None before or once admitted."""
        found = self.condition(namespace, name, "Admitted")
        if found is None or found["status"] != "False" or found["reason"] in _OPERATOR_REASONS:
            return None
        return str(found["reason"]), str(found["message"])

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        raw: Any = self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}", _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(raw.data)["items"]
        return items

    def clean_namespace(self, namespace: str, timeout: float = 30.0) -> None:
        """Delete the namespace's jobs, wait until their pods are gone, delete the namespace."""
        for job in self.jobs(namespace):
            self.delete_job(namespace, job["metadata"]["name"])
        wait_for(lambda: not self.jobs(namespace), f"jobs of {namespace} deleted", timeout)
        deadline = time.monotonic() + timeout
        while True:
            # One call deletes pods one by one on the API server, which stops when the call
            # times out (5,000 pods on a loaded machine): asked again for what is left.
            with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
                self.core.delete_collection_namespaced_pod(
                    namespace, grace_period_seconds=0, _request_timeout=60
                )
            left = max(1.0, min(30.0, deadline - time.monotonic()))
            try:
                wait_for(lambda: not self.pods(namespace), f"pods of {namespace} gone", left)
                break
            except AssertionError:
                if time.monotonic() >= deadline:
                    raise
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(namespace)


class SettledInvariants(invariants.SettledChecker):
    """The cluster invariants for polling loops (`invariants.SettledChecker`): a gang partly
    bound while its bindings are in flight is a violation only after `grace` seconds; with
    `coordination`, a gang a killed leader left partly bound is judged against the next holder
    of the operators' Lease (`invariants.PartialGangClock`). Everything else must hold at
    once."""

    def __init__(
        self,
        core: client.CoreV1Api,
        grace: float = 3.0,
        coordination: client.CoordinationV1Api | None = None,
        takeover: float = invariants.TAKEOVER_S,
    ) -> None:
        lease = coordination
        term = None if lease is None else (lambda: invariants.read_term(lease))
        super().__init__(core, grace, takeover, term)
