"""A gang a reclaim moves onto GPUs of a victim evicted in the same decision keeps its
reservation there while the victim exits (mover.py, `Reservation.waits`), unless a gang that
could preempt the moved gang is given those GPUs, on the sandbox, through `gpufleet operator` as
a real process (moves priced with a 1 s restart) and the sandbox's real API server.

The scene of `gpufleet.testing.move_scene`, except that the one-GPU fillers on t4-2 and t4-3
stay, in the `ones` queue (nominal 0: borrowed): no T4 GPU is free. The lender's 4-GPU job is
owed its quota; the core reclaims the `ones` jobs on t4-0 and one `keeper` job, moves the other
keeper onto a filler's GPU and reclaims that filler too. A finalizer keeps both fillers' pods
shown once deleted (and the keepers' until the move is seen). While the evicted filler's pod
exits, the moved keeper waits for it, its move's reservation kept, and no gang that could not
preempt the keeper is given that GPU (before the last stop, the reservation was dropped as
"GPUs taken" and the keeper decided afresh: its pods said so, and a job of a queue owed its
quota, pinned to that node, reclaimed the GPU); once that pod is gone, the keeper runs on the
filler's node and the lender on t4-0 (the first test). A job of the keeper's queue and a higher
priority, pinned there, evicts the exiting filler again and is given its GPU: the keeper's
reservation is dropped at once (its pods say why while the reason of its next decision holds:
the fourth test); once the filler's pod is gone, that job runs there (before, the filler was
shown not preemptible: the job stayed pending and the keeper was bound there; the second
test). While the moved keeper's old pod exits too, the keeper queue is charged once for it
(its old pod stands for the lender, charged to the lender's queue): the job of the queue owed
its quota, pinned to the filler's node, does not reclaim the filler (before, the keeper queue
looked borrowing, charged for both; the third test). The
keeper's pods say why its reservation was dropped only while the reason the next decision gave
holds: with its queue's quota cut to 0 it waits for free GPUs and says so; its quota back, it
reclaims the other filler and says that alone (before, the text stayed; the fourth test). No
GPU is double-booked.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing import invariants
from gpufleet.testing.move_scene import GRACE, RESTART, SETTINGS, T4, MoveScene
from gpufleet.testing.operator import Kube, OperatorProcess, configured_operator, wait_for

pytestmark = pytest.mark.integration

SCENE = MoveScene(f"mv-{uuid.uuid4().hex[:6]}-")
FIXED = {"full-1": ("full", 4, "t4-1"), "full-2": ("full", 3, "t4-2"),
         "full-3": ("full", 3, "t4-3"), "fill-2": ("ones", 1, "t4-2"),
         "fill-3": ("ones", 1, "t4-3")}  # fmt: skip
SMALL = {"ones-0": "ones", "ones-1": "ones", "keep-0": "keeper", "keep-1": "keeper"}
FILLERS = ("fill-2", "fill-3")


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator (moves priced with a 1 s restart); the scene's queues."""
    folder = tmp_path_factory.mktemp("operator")
    kube.create_queue(SCENE.queue("rival"), T4, 1)
    try:
        with (
            SCENE.queues(sandbox, kube),
            configured_operator(sandbox.kubeconfig, kube, folder, SETTINGS) as proc,
        ):
            yield proc
    finally:
        sandbox.kubectl("delete", "gq", SCENE.queue("rival"), "--ignore-not-found", check=False)


def _set_up(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    """The fixed jobs (fillers kept), then the small ones on t4-0, run past a move's price."""
    for name, (of, gpus, node) in FIXED.items():
        kube.create_job(ns, SCENE.job(name, of, gpus, node))
    wait_for(lambda: kube.one_started_each(ns, list(FIXED)), "the fixed jobs running", 60)
    for name, of in SMALL.items():
        kube.create_job(ns, SCENE.job(name, of, 1))
    started = wait_for(lambda: kube.one_started_each(ns, list(SMALL)), "the small jobs", 60)
    assert {p["spec"]["nodeName"] for p in started.values()} == {"t4-0"}, started
    stamps = [parse_time(p["status"]["startTime"]) for p in started.values()]
    latest = max(t for t in stamps if t is not None)
    wait_for(
        lambda: (datetime.now(UTC) - latest).total_seconds() > 3 * (RESTART + GRACE),
        "the keepers past a move's price",
        30,
    )
    return {**started, **kube.one_started_each(ns, list(FILLERS))}


@contextmanager
def _held_scene(kube: Kube, ns: str) -> Iterator[tuple[dict[str, dict[str, Any]], dict[str, str]]]:
    """The scene (`_set_up`) with its pods and their uids, the fillers' and the keepers' pods
    kept shown once deleted (the keepers' only until the move is seen); those still shown are
    let go at the end."""
    started = _set_up(kube, ns)
    uids = {job: str(pod["metadata"]["uid"]) for job, pod in started.items()}
    held = (*FILLERS, "keep-0", "keep-1")
    for job in held:
        kube.linger(ns, started[job]["metadata"]["name"], hold=True)
    try:
        yield started, uids
    finally:
        for job in held:
            if _now(kube, ns, job, uids[job]) is not None:
                kube.linger(ns, started[job]["metadata"]["name"], hold=False)


def _now(kube: Kube, ns: str, job: str, uid: str) -> dict[str, Any] | None:
    """The pod of `job` with `uid`, as the API shows it now (None: gone)."""
    return next((p for p in kube.job_pods(ns, job) if p["metadata"]["uid"] == uid), None)


def _deleted_by(kube: Kube, ns: str, job: str, uid: str) -> str | None:
    """Why the pod was deleted (its disrupted-by mark), once it is; None before."""
    pod = _now(kube, ns, job, uid)
    if pod is None or not pod["metadata"].get("deletionTimestamp"):
        return None
    return str((pod["metadata"].get("annotations") or {}).get(names.DISRUPTED_BY, "deleted"))


def _pinned(name: str, of: str, node: str, priority: int = 0) -> dict[str, Any]:
    """A one-GPU job of queue `of` at `priority`, pinned to `node`."""
    job = SCENE.job(name, of, 1, node)
    job["spec"]["priority"] = priority
    return job


def _moved_onto_a_filler(
    kube: Kube,
    ns: str,
    started: dict[str, dict[str, Any]],
    uids: dict[str, str],
    old_gone: bool = True,
) -> tuple[str, str, str]:
    """Once the lender comes: the keeper moved, the filler evicted for it (its pod kept) and
    that filler's node, once the keeper's old pod is gone (`old_gone`), else once the
    reclaimed keeper's pod is gone, the moved keeper's old pod kept."""
    kube.create_job(ns, SCENE.job("lender", "lender", 4))

    def decided() -> tuple[str, str] | None:
        moved = [k for k in ("keep-0", "keep-1") if _deleted_by(kube, ns, k, uids[k])]
        evicted = [f for f in FILLERS if _deleted_by(kube, ns, f, uids[f])]
        marks = {k: _deleted_by(kube, ns, k, uids[k]) for k in moved}
        movers = [k for k, m in marks.items() if m == names.MOVED_REASON]
        return (movers[0], evicted[0]) if len(movers) == 1 and len(evicted) == 1 else None

    mover, filler = wait_for(decided, "a keeper moved and a filler evicted", 60)
    gone = mover if old_gone else next(k for k in ("keep-0", "keep-1") if k != mover)
    for job in ("keep-0", "keep-1") if old_gone else (gone,):
        kube.linger(ns, started[job]["metadata"]["name"], hold=False)
    wait_for(lambda: _now(kube, ns, gone, uids[gone]) is None, f"{gone}'s old pod gone", 30)
    return mover, filler, str(started[filler]["spec"]["nodeName"])


def test_a_gang_moved_onto_a_victims_gpus_waits_for_it_with_its_reservation(
    kube: Kube, ns: str
) -> None:
    with _held_scene(kube, ns) as (started, uids):
        mover, filler, node = _moved_onto_a_filler(kube, ns, started, uids)
        # A job of a queue owed its nominal quota, pinned to the filler's node, may reclaim
        # the GPU of the filler (borrowed) but not a move's reservation, nor the filler that
        # stands for it (charged to the keeper's queue, within its nominal quota).
        kube.create_job(ns, _pinned("rival", "rival", node))
        wait_for(lambda: kube.scheduled_message(ns, "rival"), "the rival's reason", 30)
        for _ in range(25):  # the keeper waits for the filler's pod, its reservation kept
            assert "was dropped" not in kube.scheduled_message(ns, mover)
            assert kube.bound(ns, mover) == [] and kube.bound(ns, "rival") == []
            assert _now(kube, ns, filler, uids[filler]) is not None
            time.sleep(0.2)
        assert invariants.check(kube.core) == []
    (again,) = wait_for(lambda: kube.bound(ns, mover, started=True), f"{mover} running again", 120)
    assert again["spec"]["nodeName"] == node
    assert kube.bound(ns, "rival") == []
    (runs,) = wait_for(lambda: kube.bound(ns, "lender", started=True), "the lender running", 60)
    assert runs["spec"]["nodeName"] == "t4-0"
    assert "was dropped" not in kube.scheduled_message(ns, mover)
    assert invariants.check(kube.core) == []


def test_a_higher_priority_gang_is_given_the_gpu_a_moves_victim_frees(kube: Kube, ns: str) -> None:
    with _held_scene(kube, ns) as (started, uids):
        mover, _, node = _moved_onto_a_filler(kube, ns, started, uids)
        # Of the keeper's queue and a higher priority: it could preempt the keeper, so it may
        # evict the exiting filler again and is given its GPU; the reservation goes at once.
        kube.create_job(ns, _pinned("hi", "keeper", node, 10))
        # The keeper's pods say why only while the reason its next decision gives holds: it
        # reclaims the other filler a cycle later, so the text may never reach them here (the
        # fourth test holds that reason and checks the text).
        wait_for(
            lambda: "WaitingForPreemption" in kube.scheduled_message(ns, "hi"), "hi waiting", 30
        )
        assert kube.bound(ns, "hi") == []
        assert all(p["spec"]["nodeName"] != node for p in kube.bound(ns, mover))
        assert invariants.check(kube.core) == []
    # Before: the filler was not preemptible; hi stayed pending and the keeper was bound there.
    (runs,) = wait_for(lambda: kube.bound(ns, "hi", started=True), "hi running", 60)
    assert runs["spec"]["nodeName"] == node
    (lender,) = wait_for(lambda: kube.bound(ns, "lender", started=True), "the lender running", 60)
    assert lender["spec"]["nodeName"] == "t4-0"
    assert all(p["spec"]["nodeName"] != node for p in kube.bound(ns, mover))
    assert invariants.check(kube.core) == []


def test_the_moved_keepers_queue_is_charged_once_while_its_old_pod_exits(
    kube: Kube, ns: str
) -> None:
    with _held_scene(kube, ns) as (started, uids):
        mover, filler, node = _moved_onto_a_filler(kube, ns, started, uids, old_gone=False)
        # The moved keeper's old pod (on t4-0, standing for the lender, which waits for it) and
        # the filler (standing for the keeper on its new GPU) both exit: the keeper queue is
        # charged once, within its nominal quota, so the rival may not reclaim the filler.
        # Before, it was charged for both (2 of 1): the rival reclaimed the filler, the
        # keeper's reservation was dropped and the rival was bound there.
        kube.create_job(ns, _pinned("rival", "rival", node))
        wait_for(lambda: kube.scheduled_message(ns, "rival"), "the rival's reason", 30)
        for _ in range(25):
            assert "WaitingForPreemption" not in kube.scheduled_message(ns, "rival")
            assert _now(kube, ns, mover, uids[mover]) is not None
            assert _now(kube, ns, filler, uids[filler]) is not None
            time.sleep(0.2)
        assert invariants.check(kube.core) == []
    (again,) = wait_for(lambda: kube.bound(ns, mover, started=True), f"{mover} running again", 120)
    assert again["spec"]["nodeName"] == node
    assert "was dropped" not in kube.scheduled_message(ns, mover)
    assert kube.bound(ns, "rival") == []
    assert invariants.check(kube.core) == []


def _says(kube: Kube, ns: str, job: str, text: str) -> str | None:
    """`job`'s pending message once it has `text`; None before."""
    message = kube.scheduled_message(ns, job)
    return message if text in message else None


def _keeper_nominal(kube: Kube, gpus: int) -> None:
    """Set the keeper queue's nominal quota of T4 GPUs."""
    body = {"spec": {"quotas": [{"gpuType": T4, "nominal": gpus}]}}
    kube.custom.patch_cluster_custom_object(
        "gpufleet.io", "v1alpha1", "gpuqueues", SCENE.queue("keeper"), body
    )


def test_a_dropped_reservations_text_goes_once_the_gang_waits_for_another_reason(
    kube: Kube, ns: str
) -> None:
    with _held_scene(kube, ns) as (started, uids):
        try:
            mover, _, node = _moved_onto_a_filler(kube, ns, started, uids)
            # With no quota left to the keeper queue, the keeper, its reservation given to hi,
            # may reclaim nothing: it waits for free GPUs and says why its reservation went.
            _keeper_nominal(kube, 0)
            kube.create_job(ns, _pinned("hi", "keeper", node, 10))
            dropped = f"its move's reservation on {node} was dropped: gang {ns}/hi preempted"
            first = wait_for(lambda: _says(kube, ns, mover, dropped), f"{mover}'s reason", 30)
            assert not first.startswith("WaitingForPreemption"), first
            # Its quota back, it reclaims the other filler: its message says that alone (before,
            # the dropped reservation's text stayed while it waited).
            _keeper_nominal(kube, 1)
            waits = "WaitingForPreemption"
            then = wait_for(lambda: _says(kube, ns, mover, waits), f"{mover} reclaiming", 30)
            assert "was dropped" not in then, then
        finally:
            _keeper_nominal(kube, 1)
    (runs,) = wait_for(lambda: kube.bound(ns, mover, started=True), f"{mover} running again", 120)
    assert runs["spec"]["nodeName"] != node
    assert invariants.check(kube.core) == []
