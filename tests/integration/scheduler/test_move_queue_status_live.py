"""A moved gang is counted once in its GPUQueue's status (queue_objects.py): its old pods, while
they exit, as `used`; its reserved new placement as `held`. On the sandbox, through `gpufleet
operator` as a real process (moves priced with a 1 s restart) and the sandbox's real API server.

The scene of `gpufleet.testing.move_scene`: the lender's reclaim evicts one `keeper` job and
moves the other to t4-2 or t4-3 (the keeper queue's nominal quota is 1 GPU). A finalizer keeps
the moved keeper's deleted pod shown; once the evicted keeper's pod is gone, the keeper queue
uses 1 GPU (the moved pod, still exiting) and holds 1 (its reservation), borrowing nothing
(before, the reservation was counted as used too: 2 GPUs, 1 borrowed, 2 running jobs). Once
the old pod is gone and the keeper runs again, nothing is held.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.move_scene import SETTINGS, T4, MoveScene
from gpufleet.testing.operator import Kube, OperatorProcess, configured_operator, wait_for

pytestmark = pytest.mark.integration

SCENE = MoveScene(f"mq-{uuid.uuid4().hex[:6]}-")


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator (moves priced with a 1 s restart); the queues."""
    folder = tmp_path_factory.mktemp("operator")
    with (
        SCENE.queues(sandbox, kube),
        configured_operator(sandbox.kubeconfig, kube, folder, SETTINGS) as proc,
    ):
        yield proc


def _status(kube: Kube) -> dict[str, Any]:
    name = SCENE.queue("keeper")
    obj: Any = kube.custom.get_cluster_custom_object("gpufleet.io", "v1alpha1", "gpuqueues", name)
    return dict(obj.get("status") or {})


def _t4(kube: Kube) -> dict[str, Any]:
    rows = _status(kube).get("resources") or []
    return next((r for r in rows if r["gpuType"] == T4 and "migProfile" not in r), {})


def _deleting(kube: Kube, ns: str, job: str, uid: str) -> bool:
    return any(
        p["metadata"]["uid"] == uid and p["metadata"].get("deletionTimestamp")
        for p in kube.job_pods(ns, job)
    )


def _gone(kube: Kube, ns: str, job: str, uid: str) -> bool:
    return all(p["metadata"]["uid"] != uid for p in kube.job_pods(ns, job))


def _moved(kube: Kube, ns: str, job: str, uid: str) -> bool:
    for p in kube.job_pods(ns, job):
        if p["metadata"]["uid"] == uid:
            marker = (p["metadata"].get("annotations") or {}).get(names.DISRUPTED_BY)
            return bool(marker == names.MOVED_REASON)
    return False


def test_a_moved_gang_is_used_once_and_its_reservation_held(kube: Kube, ns: str) -> None:
    started = SCENE.set_up(kube, ns)
    uids = {name: str(started[name]["metadata"]["uid"]) for name in ("keep-0", "keep-1")}
    pods = {name: str(started[name]["metadata"]["name"]) for name in uids}
    wait_for(lambda: _t4(kube).get("used") == 2, "the keeper queue using 2 GPUs", 30)
    for pod in pods.values():
        kube.linger(ns, pod, hold=True)
    try:
        kube.create_job(ns, SCENE.job("lender", "lender", 4))
        wait_for(
            lambda: all(_deleting(kube, ns, n, u) for n, u in uids.items()),
            "both keepers' pods deleted",
            60,
        )
        (mover,) = [n for n, u in uids.items() if _moved(kube, ns, n, u)]
        (victim,) = set(uids) - {mover}
        kube.linger(ns, pods[victim], hold=False)
        wait_for(lambda: _gone(kube, ns, victim, uids[victim]), f"{victim}'s pod gone", 30)
        # Before: used stayed 2 (the old pod and the reservation), borrowed 1, held 0.
        row = wait_for(lambda: (r := _t4(kube)).get("used") == 1 and r, "the queue using 1", 30)
        assert _deleting(kube, ns, mover, uids[mover])  # its old pod still exits
        assert (row["borrowed"], row["held"]) == (0, 1), row
        assert _status(kube)["runningJobs"] == 1
    finally:
        for name, pod in pods.items():
            if not _gone(kube, ns, name, uids[name]):
                kube.linger(ns, pod, hold=False)
    wait_for(lambda: kube.bound(ns, mover, started=True), f"{mover} running again", 60)
    wait_for(lambda: (r := _t4(kube)).get("held") == 0 and r.get("used") == 1, "nothing held", 30)
