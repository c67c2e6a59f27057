"""The what-if names the move the scheduler makes to clear a node for a gang owed its queue's
nominal quota (core/evacuation.py, reclaim with moves), against the sandbox with `gpufleet
operator` running (moves priced with a 1 s restart) and serving the admin API beside its
scheduler.

The four T4 nodes (4 GPUs each), after tests/unit/core/test_queue_reclaim_relocation.py:
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from admin_helpers import ADMIN_RULES, accounts, operator_serving_admin, wait_settled
from kubernetes import watch

from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

T4 = "T4"
GRACE = 1  # seconds the keeper jobs take to save on SIGTERM
RESTART = 1.0  # scheduler.move_restart_s of this module's operator
SUFFIX = uuid.uuid4().hex[:6]
QUEUES = {"lender": 4, "ones": 0, "keeper": 1, "full": 11}  # nominal T4 GPUs


def queue(name: str) -> str:
    return f"{name}-{SUFFIX}"


@pytest.fixture(scope="module")
def served(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorProcess, str, Path]]:
    """The operator (moves priced with a 1 s restart) serving the admin API; the queues."""
    for name, nominal in QUEUES.items():
        kube.create_queue(queue(name), T4, nominal)
    folder = tmp_path_factory.mktemp("operator")
    try:
        settings = f"scheduler:\n  move_restart_s: {RESTART}\n"
        with operator_serving_admin(sandbox, kube, folder, settings) as process:
            yield process
    finally:
        for name in QUEUES:
            sandbox.kubectl("delete", "gq", queue(name), "--ignore-not-found", check=False)


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


def _job(name: str, of: str, gpus: int, node: str | None = None) -> dict[str, Any]:
    """One worker of `gpus` T4 in queue `of`, on `node` when given; keeper jobs checkpoint."""
    job = training_job(name, replicas=1, gpus=gpus, gpu_type=T4)
    spec = job["spec"]
    spec["queue"] = queue(of)
    spec["template"]["spec"]["terminationGracePeriodSeconds"] = GRACE
    if node is not None:
        spec["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    if of == "keeper":
        spec["checkpoint"] = {"onSignal": True, "gracePeriodSeconds": GRACE}
    return job


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
    # The fixed jobs, and fillers of the lender's queue on the GPUs that must end up free, so
    # that the ones and keeper jobs can only start on t4-0.
    fixed = {"full-1": ("full", 4, "t4-1"), "full-2": ("full", 3, "t4-2"),
             "full-3": ("full", 3, "t4-3"), "fill-2": ("lender", 1, "t4-2"),
             "fill-3": ("lender", 1, "t4-3")}  # fmt: skip
    for name, (of, gpus, node) in fixed.items():
        kube.create_job(ns, _job(name, of, gpus, node))
    wait_for(lambda: kube.one_started_each(ns, list(fixed)), "the fixed jobs running", 60)
    small = {"ones-0": "ones", "ones-1": "ones", "keep-0": "keeper", "keep-1": "keeper"}
    for name, of in small.items():
        kube.create_job(ns, _job(name, of, 1))
    started = wait_for(lambda: kube.one_started_each(ns, list(small)), "the small jobs running", 60)
    assert {p["spec"]["nodeName"] for p in started.values()} == {"t4-0"}, started
    for name in ("fill-2", "fill-3"):
        kube.delete_job(ns, name)
    wait_for(
        lambda: (
            not any(kube.pods(ns, f"{names.TRAININGJOB_LABEL}={n}") for n in ("fill-2", "fill-3"))
        ),
        "the fillers gone",
        30,
    )
    # The keepers have run longer than a move costs them (restart and grace): worth moving.
    latest = max(parse_time(p["status"]["startTime"]) for p in started.values())
    assert latest is not None
    wait_for(
        lambda: (datetime.now(UTC) - latest).total_seconds() > 3 * (RESTART + GRACE),
        "the keepers past a move's price",
        30,
    )

    lender = _job("lender", "lender", 4)
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
    fits = _job("fits", "full", 1)
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
