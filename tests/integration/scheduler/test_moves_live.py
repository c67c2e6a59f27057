"""Moves on the sandbox: the scheduler restarts a long job whole on faster GPUs once they free,
through `gpufleet operator` as a real process and the sandbox's real API server.

Aspects: a preemptible TrainingJob with `spec.checkpoint` (on signal, 2 s grace) starts on L4
because the A100 and H100 nodes are busy; when the A100s free, its pod is deleted with the
checkpoint grace (SIGTERM first: the deletion carries gracePeriodSeconds 2) and recreated on an
A100 node, `status.moves` and `status.moveTimes` count the move once and an Event says so; no
GPU is ever double-booked nor a gang partly bound; when the H100s free within the hour, the
policy's limit (one move per job per hour) keeps it where it is.
The module gives back what it changed: the MIG nodes it cordoned are uncordoned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import watch

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    SettledInvariants,
    configured_operator,
    training_job,
    wait_for,
)

pytestmark = pytest.mark.integration

GRACE_S = 2
# The MIG-layout nodes of the fast types: gpufleet may repartition an empty one to whole GPUs,
# which would give the job a fast node before the test frees one.
CORDONED = ("h100-mig-0", "a100-mig-0")
SETTINGS = """\
scheduler:
  move_restart_s: 1
"""


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator (moves priced with a 1 s restart); the MIG nodes cordoned."""
    folder = tmp_path_factory.mktemp("operator")
    with configured_operator(sandbox.kubeconfig, kube, folder, SETTINGS, CORDONED) as proc:
        yield proc


def blocker(name: str, gpu_type: str) -> dict[str, Any]:
    """Three 8-GPU workers: every whole GPU of the type's plain nodes, at a priority the
    movable job cannot preempt (preemptible, so that GPUQueues other modules left behind let
    them borrow capacity)."""
    return training_job(name, replicas=3, gpus=8, gpu_type=gpu_type, priority=100)


def movable(name: str) -> dict[str, Any]:
    """One 4-GPU worker that runs fastest on H100, half as fast on A100, slowly on L4."""
    job = training_job(name, replicas=1, gpus=4)
    job["spec"]["gpuTypes"] = [
        {"name": "H100-80GB", "throughput": 1.0},
        {"name": "A100-80GB", "throughput": 0.5},
        {"name": "L4", "throughput": 0.1},
    ]
    job["spec"]["checkpoint"] = {"onSignal": True, "gracePeriodSeconds": GRACE_S}
    return job


def status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict((kube.job(ns, name) or {}).get("status") or {})


def wait_running(kube: Kube, ns: str, name: str, gpu_type: str | None = None) -> None:
    """Wait until the job runs (on `gpu_type`, when given); the status read last otherwise."""

    def check() -> bool:
        st = status(kube, ns, name)
        return st.get("phase") == "Running" and gpu_type in (None, st.get("gpuType"))

    try:
        wait_for(check, f"{name} running on {gpu_type or 'any type'}", timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; status: {status(kube, ns, name)}") from None


class PodEvents:
    """Every watch event of the namespace's pods, collected on a thread until closed."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.error: Exception | None = None
        self._stopped = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(kube, ns), daemon=True)
        self._thread.start()

    def _run(self, kube: Kube, ns: str) -> None:
        try:
            for event in self._watch.stream(kube.core.list_namespaced_pod, ns, timeout_seconds=300):
                self.events.append((event["type"], event["raw_object"]))
        except Exception as exc:  # the connection closing after `close` is no error
            if not self._stopped.is_set():
                self.error = exc

    def close(self) -> None:
        self._stopped.set()
        self._watch.stop()
        self._thread.join(timeout=10)
        assert self.error is None, f"watching pods failed: {self.error}"


def settled_invariants(kube: Kube) -> Callable[[], bool]:
    """A check that fails on any settled-invariant problem (True otherwise)."""
    checker = SettledInvariants(kube.core)

    def clean() -> bool:
        problems = checker.check()
        assert not problems, problems
        return True

    return clean


def fill_fast_gpus(kube: Kube, ns: str) -> None:
    """Blockers `fill-h100` and `fill-a100` on every whole GPU of those types' plain nodes."""
    kube.create_job(ns, blocker("fill-h100", "H100-80GB"))
    kube.create_job(ns, blocker("fill-a100", "A100-80GB"))
    wait_running(kube, ns, "fill-h100")
    wait_running(kube, ns, "fill-a100")


def test_a_long_job_moves_once_to_faster_gpus(kube: Kube, ns: str) -> None:
    clean = settled_invariants(kube)
    fill_fast_gpus(kube, ns)
    kube.create_job(ns, movable("long"))
    wait_running(kube, ns, "long", "L4")
    first = kube.bound(ns, "long")
    assert len(first) == 1
    assert first[0]["spec"]["terminationGracePeriodSeconds"] == GRACE_S
    assert first[0]["metadata"]["annotations"][names.CHECKPOINT] == f"signal={GRACE_S}"
    old_uid = first[0]["metadata"]["uid"]
    assert clean()

    events = PodEvents(kube, ns)
    try:
        time.sleep(1.0)  # the watch is open before anything moves
        kube.delete_job(ns, "fill-a100")

        def moved() -> bool:
            clean()
            st = status(kube, ns, "long")
            pods_now = kube.bound(ns, "long")
            return (
                st.get("moves") == 1
                and st.get("phase") == "Running"
                and st.get("gpuType") == "A100-80GB"
                and len(pods_now) == 1
                and pods_now[0]["metadata"]["uid"] != old_uid
            )

        wait_for(moved, "the long job moved to A100", timeout=90)
    finally:
        events.close()
    st = status(kube, ns, "long")
    assert len(st["moveTimes"]) == 1
    new = kube.bound(ns, "long")[0]
    assert new["spec"]["nodeName"].startswith("a100-")
    assert new["metadata"]["annotations"][names.MOVE_TIMES] == st["moveTimes"][0]
    # The old pod was deleted gracefully, marked as moved, with the checkpoint grace.
    old_seen = [obj for _, obj in events.events if obj["metadata"]["uid"] == old_uid]
    deleting = [o for o in old_seen if o["metadata"].get("deletionTimestamp")]
    assert deleting, [t for t, _ in events.events]
    assert deleting[0]["metadata"]["deletionGracePeriodSeconds"] == GRACE_S
    assert deleting[0]["metadata"]["annotations"][names.DISRUPTED_BY] == names.MOVED_REASON
    reasons = [e.get("reason") for e in kube.events(ns, "long")]
    assert reasons.count("Moved") == 1, reasons

    # The H100s free within the hour: faster still, but the job has had its move this hour.
    kube.delete_job(ns, "fill-h100")
    wait_for(lambda: kube.job(ns, "fill-h100") is None, "H100 blocker gone", timeout=30)
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        clean()
        pods_now = kube.bound(ns, "long")
        assert [p["metadata"]["uid"] for p in pods_now] == [new["metadata"]["uid"]]
        time.sleep(0.5)
    assert status(kube, ns, "long").get("moves") == 1
