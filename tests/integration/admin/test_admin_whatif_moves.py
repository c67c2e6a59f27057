"""The what-if names the move the scheduler makes to clear a node for a gang owed its queue's
nominal quota (core/evacuation.py, reclaim with moves), against the sandbox with `gpufleet
operator` running (moves priced with a 1 s restart) and serving the admin API beside its
scheduler.

The scene of `gpufleet.testing.move_scene`, after tests/unit/core/test_queue_reclaim_relocation.py:
t4-0 holds two one-GPU jobs of `ones` (nominal 0, borrowed) and two of `keeper` (nominal 1: it
borrows one GPU), which checkpoint on a signal; t4-1 a 4-GPU job of `full`, t4-2 and t4-3 a
3-GPU job of `full` each (nominal 11), and one free GPU each. A 4-GPU job of `lender` (nominal
4) is owed its quota, but a reclaim alone could free at most 3 GPUs of any node: in one
decision the core reclaims the `ones` jobs and one `keeper` job, moves the other `keeper` job to
a free GPU of t4-2 or t4-3, and places the lender on t4-0.

- the what-if names that move beside the evictions: the moved gang, from t4-0 to another T4
  node, the price (the 1 s restart and the 1 s checkpoint grace) and the message of the
  scheduler's event; a job that fits on a free GPU moves no one (`moves` empty);
- given the lender, the scheduler moves the very gang: its pod is deleted with that message on
  its DisruptionTarget condition (no other gang is moved) and made again on the node and GPUs
  the what-if named; the lender, bound once the moved and evicted pods are gone, runs on t4-0.
"""

from __future__ import annotations

import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from admin_helpers import ADMIN_RULES, accounts, operator_serving_admin, wait_settled
from kubernetes import watch

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.move_scene import GRACE, RESTART, SETTINGS, T4, MoveScene
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for

SUFFIX = uuid.uuid4().hex[:6]
SCENE = MoveScene(f"{SUFFIX}-")


@pytest.fixture(scope="module")
def served(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorProcess, str, Path]]:
    """The operator (moves priced with a 1 s restart) serving the admin API; the queues."""
    folder = tmp_path_factory.mktemp("operator")
    with (
        SCENE.queues(sandbox, kube),
        operator_serving_admin(sandbox, kube, folder, SETTINGS) as process,
    ):
        yield process


@pytest.fixture(scope="module")
def operator(served: tuple[OperatorProcess, str, Path]) -> OperatorProcess:
    """This module's operator is the one serving the admin API (the `ns` fixture uses it)."""
    return served[0]


@pytest.fixture(scope="module")
def http(kube: Kube, served: tuple[OperatorProcess, str, Path]) -> Iterator[httpx.Client]:
    _, url, cert = served
    with accounts(kube, "default") as made:
        token = made.create(f"moves-{SUFFIX}", ADMIN_RULES)
        wait_settled(1.0)
        verify = ssl.create_default_context(cafile=str(cert))
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, verify=verify, headers=headers, timeout=60) as client:
            wait_for(lambda: _ready(client), "the admin API ready", 90)
            yield client


def _ready(client: httpx.Client) -> bool:
    try:
        return client.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


class PodWatch:
    """Every watch event of the namespace's pods, collected on a thread until closed."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.objects: list[dict[str, Any]] = []
        self.error: Exception | None = None
        self._stopped = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(kube, ns), daemon=True)
        self._thread.start()

    def _run(self, kube: Kube, ns: str) -> None:
        try:
            for event in self._watch.stream(kube.core.list_namespaced_pod, ns, timeout_seconds=120):
                self.objects.append(event["raw_object"])
        except Exception as exc:  # the connection closing after `close` is no error
            if not self._stopped.is_set():
                self.error = exc

    def moved(self) -> dict[str, str]:
        """Job -> the message of the DisruptionTarget condition of its pods deleted to move."""
        out = {}
        for pod in self.objects:
            annotations = pod["metadata"].get("annotations") or {}
            if annotations.get(names.DISRUPTED_BY) != names.MOVED_REASON:
                continue
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c["type"] == names.DISRUPTION_TARGET and c.get("message"):
                    out[pod["metadata"]["labels"][names.TRAININGJOB_LABEL]] = c["message"]
        return out

    def close(self) -> None:
        self._stopped.set()
        self._watch.stop()
        self._thread.join(timeout=10)
        assert self.error is None, f"watching pods failed: {self.error}"


def test_whatif_names_the_move_the_scheduler_makes(kube: Kube, ns: str, http: httpx.Client) -> None:
    started = SCENE.set_up(kube, ns)

    lender = SCENE.job("lender", "lender", 4)
    lender["metadata"]["namespace"] = ns
    response = http.post("/api/v1/whatif", json=lender)
    assert response.status_code == 200, response.text
    (gang,) = response.json()["gangs"]
    print(f"[what-if moves] {gang}")
    assert gang["placed"] and {r["node"] for r in gang["replicas"]} == {"t4-0"}, gang
    (move,) = gang["moves"]
    moved = move["job"]["name"]
    assert moved in {"keep-0", "keep-1"} and move["gang"] == f"{ns}/{moved}", move
    kept = "keep-1" if moved == "keep-0" else "keep-0"
    victims = {v["job"]["name"] for v in gang["preempts"]}
    assert victims == {"ones-0", "ones-1", kept}, gang
    assert move["fromNodes"] == ["t4-0"] and move["toNodes"][0] in {"t4-2", "t4-3"}, move
    assert (move["fromGpuType"], move["gpuType"]) == (T4, T4)
    assert move["delayS"] == pytest.approx(RESTART + GRACE)
    assert move["reason"] == (
        f"moved to {T4} (from {T4}) to empty a node for waiting gang {ns}/lender: "
        f"expected to finish {RESTART + GRACE:.0f}s later"
    )
    # A job that fits on a free GPU moves no one.
    fits = SCENE.job("fits", "full", 1)
    fits["metadata"]["namespace"] = ns
    (other,) = http.post("/api/v1/whatif", json=fits).json()["gangs"]
    assert other["placed"] and other["moves"] == [], other

    # The scheduler, given the lender, moves that very gang with that message.
    pods = PodWatch(kube, ns)
    try:
        kube.create_job(ns, lender)
        done = wait_for(lambda: pods.moved(), "a gang moved for the lender", 60)
    finally:
        pods.close()
    assert done == {moved: move["reason"]}, done
    # ... to where the what-if said: its pod is made again on the GPUs reserved for it.
    old = started[moved]["metadata"]["uid"]

    def again() -> dict[str, Any] | None:
        pods = [p for p in kube.bound(ns, moved, started=True) if p["metadata"]["uid"] != old]
        return pods[0] if pods else None

    pod = wait_for(again, f"{moved} running again", 60)
    (replica,) = move["replicas"]
    assert pod["spec"]["nodeName"] == replica["node"], pod["spec"]["nodeName"]
    assigned = pod["metadata"]["annotations"][names.ASSIGNED_GPUS]
    assert assigned == ",".join(map(str, replica["gpus"])), assigned
    # The lender runs on the node the what-if named.
    (runs,) = wait_for(lambda: kube.bound(ns, "lender", started=True), "the lender running", 90)
    assert runs["spec"]["nodeName"] == "t4-0", runs["spec"]["nodeName"]
