"""A move's target is checked against the tolerations the recreated pods will really have
(mover._recreated, runtime_class.operator_made), on the sandbox, through `gpufleet operator`
as a real process (the scheduler and the operator in one, as deployed) and the sandbox's real
API server.

`long` (4 GPUs, faster on A100 than on L4) runs on L4, its template tolerating a `maintenance`
taint that the one A100 node taking pods (a blocker on it) then gets. Its template drops the
toleration while its pod runs; the blocker goes. The old pod tolerates the taint, so the core
chooses to move long there; the pod the operator would make from the template (with its own
toleration of the GPU nodes' taint and what the API server adds) would not: the move is not
started (a MoveBlockedByNodeFilters Event naming the taint) and long keeps running. Before, the
old pod's tolerations were counted: long was moved, and its recreated pod lost the
reservation at the rebind.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.scheduler.mover import MOVE_UNFIT
from gpufleet.testing import invariants
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    configured_operator,
    training_job,
    wait_for,
)
from tests.integration.scheduler.test_move_cpu_live import (
    CORDONED,
    NODE,
    SETTINGS,
    _long,
    _past_a_moves_price,
)

pytestmark = pytest.mark.integration

TAINT = "maintenance=soon:NoSchedule"
TOLERATION = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator (moves priced with a 1 s restart); all A100 nodes but one, and
    the MIG nodes, cordoned."""
    folder = tmp_path_factory.mktemp("operator")
    with configured_operator(sandbox.kubeconfig, kube, folder, SETTINGS, CORDONED) as proc:
        yield proc


@pytest.fixture
def tainted(sandbox: Sandbox) -> Iterator[str]:
    """The A100 node that takes pods, given the `maintenance` taint (removed after)."""
    sandbox.kubectl("taint", "nodes", NODE, TAINT)
    try:
        yield NODE
    finally:
        sandbox.kubectl("taint", "nodes", NODE, f"{TAINT}-")


def _tolerations(kube: Kube, ns: str) -> list[dict[str, Any]]:
    job = kube.job(ns, "long") or {}
    return list(job["spec"]["template"]["spec"].get("tolerations") or [])


def test_a_move_is_not_started_onto_a_taint_its_template_no_longer_tolerates(
    kube: Kube, ns: str, tainted: str
) -> None:
    kube.create_job(ns, training_job("fill-h100", 3, gpus=8, gpu_type="H100-80GB", priority=100))
    fill = training_job("fill-a100", 1, gpus=8, gpu_type="A100-80GB", priority=100)
    fill["spec"]["template"]["spec"]["tolerations"] = [TOLERATION]
    kube.create_job(ns, fill)
    for name in ("fill-h100", "fill-a100"):
        wait_for(lambda j=name: kube.phase(ns, j) == "Running", f"{name} running", 60)
    job = _long()
    job["spec"]["template"]["spec"]["tolerations"] = [TOLERATION]
    kube.create_job(ns, job)
    (old,) = wait_for(lambda: kube.bound(ns, "long", started=True), "long running", 60)
    assert old["spec"]["nodeName"].startswith("l4-")
    assert TOLERATION in old["spec"]["tolerations"]
    # The template drops the toleration (a merge patch: null removes the list).
    kube.patch_job(ns, "long", {"spec": {"template": {"spec": {"tolerations": None}}}})
    wait_for(lambda: _tolerations(kube, ns) == [], "long's template changed")
    _past_a_moves_price(old)
    kube.delete_job(ns, "fill-a100")
    (event,) = wait_for(
        lambda: [e for e in kube.events(ns, "long") if e["reason"] == MOVE_UNFIT],
        "long's move not started",
        30,
    )
    assert f"could not use {tainted} (TaintToleration: {TAINT})" in event["message"]
    for _ in range(15):
        (pod,) = kube.job_pods(ns, "long")
        assert pod["metadata"]["uid"] == old["metadata"]["uid"]
        assert not pod["metadata"].get("deletionTimestamp")
        time.sleep(0.2)
    assert invariants.check(kube.core) == []
