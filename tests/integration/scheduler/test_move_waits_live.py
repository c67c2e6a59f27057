"""A gang placed by a reclaim with moves (core/evacuation.py) waits for the moved gang's deleted
pod as well as for its victims' pods, on the sandbox, through `gpufleet operator` as a real
process (moves priced with a 1 s restart) and the sandbox's real API server.

The scene of `gpufleet.testing.move_scene` (the what-if's moves test starts from it too): the
four T4 nodes (4 GPUs each). t4-0 holds two one-GPU jobs of `ones` (nominal 0, borrowed) and
two of `keeper` (nominal 1: it borrows one GPU), which checkpoint on a signal; t4-1 a 4-GPU
job of `full`, t4-2 and t4-3 a 3-GPU job of `full` each (nominal 11), and one free GPU each. A
4-GPU job of `lender` (nominal 4) is owed its quota: in one decision the core reclaims the
`ones` jobs and one `keeper` job, moves the other `keeper` job to t4-2 or t4-3 and places the
lender on t4-0.

A finalizer keeps both keepers' pods in the API once deleted (the sandbox's kwok deletes pods at
once, which would leave no grace period to watch). Once the victims are gone and only the moved
keeper's old pod lingers, the lender is not bound, its pod says it waits for that gang (by
name), and nothing else is evicted; once that pod is gone too, the lender runs on t4-0 and the
moved keeper on the node the decision moved it to. No GPU is double-booked.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing import invariants
from gpufleet.testing.move_scene import SETTINGS, MoveScene
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    configured_operator,
    wait_for,
)

pytestmark = pytest.mark.integration

SCENE = MoveScene(f"mw-{uuid.uuid4().hex[:6]}-")


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


def _uids(pods: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {job: str(pod["metadata"]["uid"]) for job, pod in pods.items()}


def _deleting(kube: Kube, ns: str, pod: dict[str, Any]) -> dict[str, Any] | None:
    """`pod` as the API shows it now, if it is being deleted."""
    meta = pod["metadata"]
    for p in kube.pods(ns, f"{names.TRAININGJOB_LABEL}={meta['labels'][names.TRAININGJOB_LABEL]}"):
        if p["metadata"]["uid"] == meta["uid"] and p["metadata"].get("deletionTimestamp"):
            return p
    return None


def _gone(kube: Kube, ns: str, pod: dict[str, Any]) -> bool:
    job = pod["metadata"]["labels"][names.TRAININGJOB_LABEL]
    return all(p["metadata"]["uid"] != pod["metadata"]["uid"] for p in kube.job_pods(ns, job))


def test_the_gang_waits_for_the_moved_gangs_pod_then_runs_where_it_was_placed(
    kube: Kube, ns: str
) -> None:
    started = SCENE.set_up(kube, ns)
    keepers = {name: started[name] for name in ("keep-0", "keep-1")}
    others = _uids(kube.one_started_each(ns, ["full-1", "full-2", "full-3"]))
    for pod in keepers.values():
        kube.linger(ns, pod["metadata"]["name"], hold=True)
    try:
        kube.create_job(ns, SCENE.job("lender", "lender", 4))

        def both_deleted() -> dict[str, dict[str, Any]]:
            now = {name: _deleting(kube, ns, pod) for name, pod in keepers.items()}
            return {n: p for n, p in now.items() if p is not None} if all(now.values()) else {}

        deleted = wait_for(both_deleted, "both keepers' pods deleted", 60)
        moved = [
            name
            for name, pod in deleted.items()
            if (pod["metadata"].get("annotations") or {}).get(names.DISRUPTED_BY)
            == names.MOVED_REASON
        ]
        assert len(moved) == 1, deleted
        (mover,) = moved
        (victim,) = set(keepers) - {mover}
        # The victims go: the ones jobs' pods at once, the evicted keeper's once let go.
        kube.linger(ns, keepers[victim]["metadata"]["name"], hold=False)
        for name in ("ones-0", "ones-1", victim):
            wait_for(lambda n=name: _gone(kube, ns, started[n]), f"{name}'s pod gone", 30)
        # Only the moved keeper's old pod is left: the lender waits for it, by name, unbound.
        waits = f"waiting for {ns}/{mover} (moved to make room for it)"
        wait_for(lambda: waits in kube.scheduled_message(ns, "lender"), "the lender's reason", 30)
        for _ in range(25):
            assert kube.bound(ns, "lender", started=True) == []
            assert _deleting(kube, ns, keepers[mover]) is not None
            assert _uids(kube.one_started_each(ns, list(others))) == others
            time.sleep(0.2)
        assert waits in kube.scheduled_message(ns, "lender")
        assert invariants.check(kube.core) == []
    finally:
        for pod in keepers.values():
            if not _gone(kube, ns, pod):
                kube.linger(ns, pod["metadata"]["name"], hold=False)
    (runs,) = wait_for(lambda: kube.bound(ns, "lender", started=True), "the lender running", 60)
    assert runs["spec"]["nodeName"] == "t4-0", runs["spec"]["nodeName"]
    (again,) = wait_for(lambda: kube.bound(ns, mover, started=True), f"{mover} running again", 60)
    assert again["spec"]["nodeName"] in {"t4-2", "t4-3"}, again["spec"]["nodeName"]
    assert _uids(kube.one_started_each(ns, list(others))) == others
    assert invariants.check(kube.core) == []
