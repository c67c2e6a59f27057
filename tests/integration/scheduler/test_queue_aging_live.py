"""Queue aging on the sandbox: a job pending past `placement.queue_aging_s` goes before the
queues' fair-share order, through `gpufleet operator` as a real process (settings file) and the
sandbox's real API server, which stamps the pods' creation times the scheduler counts from.

Aspects: two queues without nominal quota share the 16 T4 GPUs of the default fleet; queue
"busy" holds every one of them (four jobs of one 4-GPU worker), so its next job ("old") waits;
once it has waited past the aging threshold (7 s here), a job of the idle queue ("young")
arrives and waits too; then one of busy's jobs ends, freeing one node. By fair share the idle
queue's job would go first (busy holds 12 GPUs, idle none); aged, "old" goes first and takes
the node, and "young" keeps waiting. (Before the scheduler counted waits, every gang's wait
was 0 and "young" took the node.) No GPU is double-booked. Both engines decide it, each with
its own operator: CP-SAT, the default, weighs two such gangs of different queues alike and took
either, whatever their order, until it kept the queues' order across queues (cpsat.py
`_build_queue_order`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.model.contract.timestamps import parse_time
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing import invariants
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    configured_operator,
    training_job,
    wait_for,
)

pytestmark = pytest.mark.integration

# Twice the longest "young" waited before "old" was placed (3.5 s, loaded machine; printed),
# so young is not aged when the node frees.
AGING_S = 7.0
SUFFIX = uuid.uuid4().hex[:6]


@dataclass(frozen=True)
class Queues:
    engine: str
    busy: str
    idle: str


@pytest.fixture(scope="module", params=["greedy", "cpsat"])
def queues(request: pytest.FixtureRequest) -> Queues:
    """The engine that decides, and its two queues (named after it: fresh for each operator)."""
    engine = request.param
    return Queues(engine, f"busy-{engine}-{SUFFIX}", f"idle-{engine}-{SUFFIX}")


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox,
    kube: Kube,
    tmp_path_factory: pytest.TempPathFactory,
    queues: Queues,
) -> Iterator[OperatorProcess]:
    """This module's operator for one engine, with a short queue aging; its two queues, no
    quota."""
    kube.create_queue(queues.busy, "T4", 0)
    kube.create_queue(queues.idle, "T4", 0)
    settings = f"""\
placement:
  queue_aging_s: {AGING_S}
  service_tier_gpu_s: 0
  solver:
    engine: {queues.engine}
"""
    folder = tmp_path_factory.mktemp("operator")
    try:
        with configured_operator(sandbox.kubeconfig, kube, folder, settings) as proc:
            yield proc
    finally:
        sandbox.kubectl("delete", "gq", queues.busy, queues.idle, "--ignore-not-found", check=False)


def job(name: str, queue: str) -> dict[str, Any]:
    """One worker of 4 T4 (a whole node) in `queue`, stopping within a second when deleted."""
    manifest = training_job(name, replicas=1, gpus=4, gpu_type="T4")
    manifest["spec"]["queue"] = queue
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    return manifest


def says_why_it_waits(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    c = kube.condition(ns, name, "Admitted")
    if c and c["status"] == "False" and c["reason"] != "WaitingForScheduler":
        return c
    return None


def test_an_aged_job_goes_before_the_fair_share_order(
    kube: Kube, ns: str, sandbox: Sandbox, operator: OperatorProcess, queues: Queues
) -> None:
    fillers = [f"fill-{i}" for i in range(4)]
    for name in fillers:
        kube.create_job(ns, job(name, queues.busy))
    for name in fillers:
        wait_for(lambda name=name: kube.all_bound(ns, name), f"{name} bound", 60)
    kube.create_job(ns, job("old", queues.busy))
    wait_for(lambda: says_why_it_waits(kube, ns, "old"), "old waits with a reason", 30)
    # Past the aging threshold, counted from old's pod's creation (the sandbox's API server
    # shares this machine's clock; its stamps are whole seconds).
    created = parse_time(kube.live_pods(ns, "old")[0]["metadata"]["creationTimestamp"])
    assert created is not None
    time.sleep(max(0.0, AGING_S + 2 - (datetime.now(UTC) - created).total_seconds()))
    kube.create_job(ns, job("young", queues.idle))
    wait_for(lambda: says_why_it_waits(kube, ns, "young"), "young waits with a reason", 30)
    assert not kube.all_bound(ns, "old")
    kube.delete_job(ns, fillers[0])  # frees one node: room for one of the two
    wait_for(
        lambda: kube.all_bound(ns, "old") or kube.all_bound(ns, "young"), "one of them bound", 60
    )
    born = parse_time(kube.live_pods(ns, "young")[0]["metadata"]["creationTimestamp"])
    assert born is not None
    young_waited = (datetime.now(UTC) - born).total_seconds()
    assert kube.all_bound(ns, "old") and not kube.all_bound(ns, "young")
    waiting = wait_for(lambda: says_why_it_waits(kube, ns, "young"), "young still waits", 30)
    print(
        f"[queue aging] old placed first ({young_waited:.1f}s after young came, aging at"
        f" {AGING_S:g}s); young waits: {waiting['reason']}: {waiting['message']}"
    )
    assert invariants.check(kube.core) == []
