"""The chaos and soak harnesses' job stream (bench/chaos.py `Load`): it finishes, as a container
exiting would, only pods that run, and a preempted job's next run gets its whole time again.

The soak once marked Succeeded pods of a job whose phase still said Running after a preemption:
its new pods, unbound or bound but not yet started by kwok. kwok then set the bound ones Running
again after the scheduler had given their GPUs to another job (the soak's double booking)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract import names
from tests.benchscripts import bench_module


def _chaos() -> ModuleType:
    return bench_module("chaos")


def _unwatched() -> Any:
    raise AssertionError("the harness reads jobs and pods from its watches (FakeWatched here)")


class FakeCore:
    def __init__(self, cluster: FakeKube) -> None:
        self.cluster = cluster

    list_namespaced_pod = staticmethod(lambda *a, **kw: _unwatched())

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any) -> None:
        self.cluster.patched.append(name)
        for pod in self.cluster.pod_list:
            if pod["metadata"]["name"] == name:
                pod["status"]["phase"] = body["status"]["phase"]


class FakeWatched:
    """What the harness's watch of jobs or pods holds: here, one of the fake's lists."""

    def __init__(self, items: Callable[[], list[dict[str, Any]]]) -> None:
        self.items = items
        self.stop = threading.Event()
        synced = threading.Event()
        synced.set()
        self.informer = SimpleNamespace(start=lambda: None, synced=synced)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.items()}


class FakeKube:
    """The jobs and pods the harness watches and the status patch it writes."""

    def __init__(self) -> None:
        self.job_list: list[dict[str, Any]] = []
        self.pod_list: list[dict[str, Any]] = []
        self.patched: list[str] = []
        self.core = FakeCore(self)
        self.custom = SimpleNamespace(list_namespaced_custom_object=lambda *a, **kw: _unwatched())

    def load(self, chaos: ModuleType, **kwargs: Any) -> Any:
        """A `Load` over this fake, its watches reading the fake's lists."""
        load = chaos.Load(self, chaos.Record(), **kwargs)
        load.watched_jobs = FakeWatched(lambda: self.job_list)
        load.watched_pods = FakeWatched(lambda: self.pod_list)
        return load

    def set(self, phase: str, pods: list[tuple[str, str | None, str]]) -> None:
        """The job's phase and its pods as (name, node, phase)."""
        self.job_list = [{"metadata": {"name": "j"}, "status": {"phase": phase}}]
        self.pod_list = [
            {
                "metadata": {"name": name, "labels": {names.TRAININGJOB_LABEL: "j"}},
                "spec": {"nodeName": node} if node else {},
                "status": {"phase": pod_phase},
            }
            for name, node, pod_phase in pods
        ]


def test_only_pods_that_run_are_finished_and_a_preempted_job_runs_its_time_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chaos, kube, clock = _chaos(), FakeKube(), [100.0]
    monkeypatch.setattr(chaos, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    load = kube.load(chaos, interval=1.0, seed=1)
    load.jobs["j"] = chaos.Job("j", created=0.0, runs_for=10.0, replicas=2)

    def at(t: float, phase: str, pods: list[tuple[str, str | None, str]]) -> None:
        clock[0] = t
        kube.set(phase, pods)
        load.follow()

    at(100, "Running", [("j-0", "n0", "Running"), ("j-1", "n0", "Running")])  # its 10 s start
    at(106, "Preempted", [("j-0", None, "Pending"), ("j-1", None, "Pending")])
    # 12 s after it first ran; the job's status says Running (written before the preemption)
    # while its new pods are one bound and not started, one unbound: nothing may finish them.
    at(112, "Running", [("j-0", "n1", "Pending"), ("j-1", None, "Pending")])
    assert kube.patched == []
    at(123, "Running", [("j-0", "n1", "Running"), ("j-1", None, "Pending")])
    at(124, "Running", [("j-0", "n1", "Running"), ("j-1", "n1", "Pending")])
    assert kube.patched == []
    at(125, "Running", [("j-0", "n1", "Running"), ("j-1", "n1", "Running")])
    assert sorted(kube.patched) == ["j-0", "j-1"]
    assert all(p["status"]["phase"] == "Succeeded" for p in kube.pod_list)


class CreatingKube(FakeKube):
    """Records created manifests; `fail` maps a job name to the errors its next creations
    raise, in order."""

    def __init__(self, fail: dict[str, list[int]]) -> None:
        super().__init__()
        self.created: dict[str, dict[str, Any]] = {}
        self.fail = fail

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        errors = self.fail.get(name, [])
        if errors:
            status = errors.pop(0)
            if status == 409:  # the earlier, failed-looking attempt was stored
                self.created[name] = manifest
            raise ApiException(status=status)
        self.created[name] = manifest


def _create_all(chaos: ModuleType, kube: CreatingKube, creators: int) -> Any:
    load = kube.load(chaos, interval=0.01, seed=3, limit=6, creators=creators)
    load.start()
    deadline = time.monotonic() + 30
    while (load.creating.is_set() or len(load.snapshot()) < 6) and time.monotonic() < deadline:
        time.sleep(0.01)
    load.stop.set()
    load.join(5)
    return load


def test_creators_make_every_job_once_with_the_same_manifests_and_retry_refusals() -> None:
    chaos = _chaos()
    one = CreatingKube({})
    _create_all(chaos, one, creators=1)
    four = CreatingKube({"j00001": [500, 503], "j00004": [409]})
    load = _create_all(chaos, four, creators=4)
    names_made = [f"j{i:05d}" for i in range(6)]
    assert sorted(load.jobs) == names_made
    assert four.created == one.created  # the seeded stream does not depend on the threads
    assert load.record.refused_creates == 2  # the two refusals; the 409 is a creation
    assert not load.creating.is_set()


def test_the_fault_plan_holds_the_kinds_asked_for_within_the_run() -> None:
    chaos = _chaos()
    args = SimpleNamespace(seed=3, kills=4, duration=200, faults=("kill", "etcd"))
    plan = chaos.schedule(args)
    assert sorted(kind for _, kind in plan) == ["etcd", "kill", "kill", "kill", "kill"]
    assert all(20.0 <= at <= 180.0 for at, _ in plan)
    assert [at for at, _ in plan] == sorted(at for at, _ in plan)
    every = chaos.schedule(SimpleNamespace(seed=3, kills=1, duration=200, faults=chaos.FAULTS))
    assert sorted(kind for _, kind in every) == sorted(chaos.FAULTS)


def test_serving_recovery_counts_from_the_last_fault_to_its_last_return_to_ready() -> None:
    chaos = _chaos()
    watch = chaos.ServingWatch(FakeKube(), chaos.Record(), started=0.0)  # never started

    def state(phase: str) -> dict[str, Any]:
        return {"job": {"phase": phase, "prefill": 1, "decode": 1}}

    watch.timeline = [(2.0, state("Ready")), (30.0, state("Degraded")), (52.5, state("Ready"))]
    watch.timeline.append((58.0, {"job": {"phase": "Ready", "prefill": 2, "decode": 1}}))
    assert watch.recovery(since=40.0, bound=60) == 12.5  # Ready again 12.5 s after the fault
    assert watch.recovery(since=60.0, bound=60) == 0.0  # Ready all along after the fault
    watch.timeline.append((70.0, state("Degraded")))
    assert watch.recovery(since=60.0, bound=60) is None  # not Ready, and nothing will tell
