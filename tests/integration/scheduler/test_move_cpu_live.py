"""The CPU a moved job will ask of its new node is kept for it while its old pod exits
(mover.held, eligibility.reserve), and its rebind leaves a waiting preemptor's CPU alone, on
the sandbox, through `gpufleet operator` as a real process (moves priced with a 1 s restart,
no scarcity reserve) and the sandbox's real API server.

Only one plain A100 node takes pods (the others and the MIG nodes are cordoned while the
module's operator runs); a blocker fills it and another the H100 nodes. `long` (4 GPUs and 100
of a node's 128 CPUs, faster on A100 than on L4, checkpointing on a signal) starts on L4; once
the A100 blocker is gone it is moved there. A finalizer keeps its deleted pod shown. `late`
(4 A100 GPUs and 100 CPUs, pinned to that node) fits the node's 4 other GPUs, but not beside
long's CPUs: it is not bound while long's old pod exits (before, it was, and long, short of
CPU at its rebind, lost its reservation), and long is bound on the node once its old pod is
gone. No GPU is double-booked. And a moved gang's rebind is checked against the node's CPU
less what a waiting preemptor it may not take from is promised there (the second test); a
nominated gang whose wait ends while a move waits for its old pod is not bound on the CPU the
move needs, and its reason says its hold was given up for that move (the third:
nominated.refit); and what a move keeps is what its job's current pod template asks, a
template changed since the old pod was made included (the fourth), and the pod overhead of
the RuntimeClass it now names (the fifth), read again when it is the old pod's own, edited
since (the sixth); a move is not started onto a node that the pods it would recreate could
not use, their RuntimeClass given a node selector since (the seventh).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.node_manifests import POOL_LABEL
from gpufleet.scheduler.mover import MOVE_UNFIT
from gpufleet.testing import invariants
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    configured_operator,
    training_job,
    wait_for,
)

pytestmark = pytest.mark.integration

NODE = "a100-0"
CORDONED = ("h100-mig-0", "a100-mig-0", "a100-1", "a100-2")
# Moves priced with a 1 s restart; no reserve keeps the one free A100 node for an 8-GPU gang
# confined to A100 (the blocker's shape, seen once).
SETTINGS = """\
scheduler:
  move_restart_s: 1
placement:
  weights:
    scarcity: 0
"""


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator (`SETTINGS`); all A100 nodes but one, and the MIG nodes,
    cordoned."""
    folder = tmp_path_factory.mktemp("operator")
    with configured_operator(sandbox.kubeconfig, kube, folder, SETTINGS, CORDONED) as proc:
        yield proc


def _cpu(job: dict[str, Any], cpu: str) -> dict[str, Any]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"requests": {"cpu": cpu}}
    return job


def _long() -> dict[str, Any]:
    job = _cpu(training_job("long", 1, gpus=4), "100")
    job["spec"]["gpuTypes"] = [
        {"name": "A100-80GB", "throughput": 1.0},
        {"name": "L4", "throughput": 0.1},
    ]
    job["spec"]["checkpoint"] = {"onSignal": True, "gracePeriodSeconds": 1}
    return job


def _late() -> dict[str, Any]:
    job = _cpu(training_job("late", 1, gpus=4, gpu_type="A100-80GB"), "100")
    job["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return job


def _moving(kube: Kube, ns: str, uid: str) -> bool:
    for p in kube.job_pods(ns, "long"):
        meta = p["metadata"]
        if meta["uid"] == uid and meta.get("deletionTimestamp"):
            return (meta.get("annotations") or {}).get(names.DISRUPTED_BY) == names.MOVED_REASON
    return False


def _gone(kube: Kube, ns: str, uid: str) -> bool:
    return all(p["metadata"]["uid"] != uid for p in kube.job_pods(ns, "long"))


def test_a_gang_is_not_bound_on_the_cpu_a_moved_gang_will_need(kube: Kube, ns: str) -> None:
    old = _long_on_l4(kube, ns)
    kube.linger(ns, old["metadata"]["name"], hold=True)
    _past_a_moves_price(old)
    _move_with_one_kept_off(kube, ns, old, _late())
    assert kube.bound(ns, "late") == []  # 28 CPUs left beside long's 100
    assert invariants.check(kube.core) == []


def test_a_move_keeps_the_cpu_of_its_jobs_current_template(kube: Kube, ns: str) -> None:
    # As above, but long's template is changed to 120 CPUs while its pod (100) runs: the pod
    # the operator recreates after the move asks 120. `small` (4 A100 GPUs, 20 CPUs, pinned)
    # fits the node's 128 CPUs beside the old pod's 100, not beside the new one's 120: it is
    # not bound while long's old pod exits (before, it was: the reservation kept the old
    # pod's 100, and long, short of CPU at its rebind, lost it), and long is bound there.
    old = _long_on_l4(kube, ns)
    kube.patch_job(ns, "long", {"spec": {"template": _cpu(_long(), "120")["spec"]["template"]}})
    wait_for(
        lambda: (
            (kube.job(ns, "long") or {})["spec"]["template"]["spec"]["containers"][0]["resources"][
                "requests"
            ]["cpu"]
            == "120"
        ),
        "long's template changed",
    )
    kube.linger(ns, old["metadata"]["name"], hold=True)
    _past_a_moves_price(old)
    small = _cpu(training_job("small", 1, gpus=4, gpu_type="A100-80GB"), "20")
    new = _move_with_one_kept_off(kube, ns, old, _pinned(small))
    (container,) = new["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"] == "120"
    assert kube.bound(ns, "small") == []  # 8 CPUs left beside long's 120
    assert invariants.check(kube.core) == []


def test_a_move_keeps_the_overhead_of_the_runtime_class_its_template_names(
    kube: Kube, ns: str
) -> None:
    # As above, but long's template is changed to name RuntimeClass `heavy` (20 CPUs of pod
    # overhead) while its pod (100 CPUs, no RuntimeClass) runs: the API server sets that
    # overhead on the pod the operator recreates, which asks 120 in all. `small` (20 CPUs,
    # pinned) is not bound while long's old pod exits (before, it was: the reservation kept
    # the old pod's overhead, none) and long is bound there.
    with _runtime_class(kube, "heavy", {"cpu": "20"}) as heavy:
        old = _long_on_l4(kube, ns)
        template = _long()["spec"]["template"]
        template["spec"]["runtimeClassName"] = heavy
        kube.patch_job(ns, "long", {"spec": {"template": template}})
        wait_for(
            lambda: (
                (kube.job(ns, "long") or {})["spec"]["template"]["spec"].get("runtimeClassName")
                == heavy
            ),
            "long's template changed",
        )
        kube.linger(ns, old["metadata"]["name"], hold=True)
        _past_a_moves_price(old)
        small = _cpu(training_job("small", 1, gpus=4, gpu_type="A100-80GB"), "20")
        new = _move_with_one_kept_off(kube, ns, old, _pinned(small))
        assert new["spec"]["overhead"] == {"cpu": "20"}
        assert kube.bound(ns, "small") == []  # 8 CPUs left beside long's 100 and 20
        assert invariants.check(kube.core) == []


def test_a_move_reads_again_the_runtime_class_edited_under_its_old_pods_name(
    kube: Kube, ns: str
) -> None:
    # As above, but long's pod already runs under RuntimeClass `edited`, made without
    # overhead; `edited` is then given 20 CPUs of pod overhead under the same name. The pod
    # the operator recreates gets the 20: `small` is not bound beside the reservation (before,
    # it was: for the RuntimeClass the old pod names, the old pod's overhead, none, was kept).
    with _runtime_class(kube, "edited", None) as edited:
        old = _long_on_l4(kube, ns, runtime_class=edited)
        assert old["spec"].get("overhead") is None
        nodes = client.NodeV1Api(kube.core.api_client)
        nodes.patch_runtime_class(edited, {"overhead": {"podFixed": {"cpu": "20"}}})
        kube.linger(ns, old["metadata"]["name"], hold=True)
        _past_a_moves_price(old)
        small = _cpu(training_job("small", 1, gpus=4, gpu_type="A100-80GB"), "20")
        new = _move_with_one_kept_off(kube, ns, old, _pinned(small))
        assert new["spec"]["runtimeClassName"] == edited
        assert new["spec"]["overhead"] == {"cpu": "20"}
        assert kube.bound(ns, "small") == []  # 8 CPUs left beside long's 100 and 20
        assert invariants.check(kube.core) == []


def test_a_move_is_not_started_onto_a_node_its_runtime_class_now_keeps_its_pods_off(
    kube: Kube, ns: str
) -> None:
    # long's pod runs on L4 under RuntimeClass `pinned`, made without scheduling; `pinned` is
    # then given a node selector of the L4 pool under the same name. The pod the operator
    # would recreate after a move gets that selector from the API server, and the A100 node
    # does not match it: once that node frees, long is not moved there (before, it was: its
    # pod was deleted and its new one could not be bound on the reservation), the job gets a
    # MoveBlockedByNodeFilters Event, and long keeps running where it is.
    with _runtime_class(kube, "pinned", None) as pinned:
        old = _long_on_l4(kube, ns, runtime_class=pinned)
        node = kube.core.read_node(old["spec"]["nodeName"])
        pool = {POOL_LABEL: node.metadata.labels[POOL_LABEL]}
        nodes = client.NodeV1Api(kube.core.api_client)
        nodes.patch_runtime_class(pinned, {"scheduling": {"nodeSelector": pool}})
        _past_a_moves_price(old)
        kube.delete_job(ns, "fill-a100")
        (event,) = wait_for(
            lambda: [e for e in kube.events(ns, "long") if e["reason"] == MOVE_UNFIT],
            "long's move not started",
            30,
        )
        assert f"could not use {NODE} (NodeAffinity: nodeSelector)" in event["message"]
        for _ in range(15):
            (pod,) = kube.job_pods(ns, "long")
            assert pod["metadata"]["uid"] == old["metadata"]["uid"]
            assert not pod["metadata"].get("deletionTimestamp")
            time.sleep(0.2)
        assert invariants.check(kube.core) == []


@contextmanager
def _runtime_class(
    kube: Kube, prefix: str, overhead: dict[str, str] | None, **fields: Any
) -> Iterator[str]:
    """A RuntimeClass named `prefix` and a random suffix, with `overhead` as its pod overhead
    and `fields` (`scheduling`, say), deleted after: its name."""
    nodes = client.NodeV1Api(kube.core.api_client)
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    body: dict[str, Any] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": prefix,
        **fields,
    }
    if overhead is not None:
        body["overhead"] = {"podFixed": overhead}
    nodes.create_runtime_class(body)
    try:
        yield name
    finally:
        nodes.delete_runtime_class(name)


def _long_on_l4(kube: Kube, ns: str, runtime_class: str | None = None) -> dict[str, Any]:
    """The H100 nodes and the A100 node full (priority 100); `long` (its template naming
    `runtime_class`, if any) running on an L4 node: its pod."""
    kube.create_job(ns, training_job("fill-h100", 3, gpus=8, gpu_type="H100-80GB", priority=100))
    kube.create_job(ns, training_job("fill-a100", 1, gpus=8, gpu_type="A100-80GB", priority=100))
    for job in ("fill-h100", "fill-a100"):
        wait_for(lambda j=job: kube.phase(ns, j) == "Running", f"{job} running", 60)
    job = _long()
    if runtime_class is not None:
        job["spec"]["template"]["spec"]["runtimeClassName"] = runtime_class
    kube.create_job(ns, job)
    (old,) = wait_for(lambda: kube.bound(ns, "long", started=True), "long running", 60)
    assert old["spec"]["nodeName"].startswith("l4-")
    return dict(old)


def _past_a_moves_price(old: dict[str, Any]) -> None:
    """Cycles follow events: wait until long has run longer than a move costs it (restart and
    grace), so that moving it is worth it once the A100 node frees."""
    started = parse_time(old["status"]["startTime"])
    assert started is not None
    wait_for(lambda: (datetime.now(UTC) - started).total_seconds() > 6, "long past a move's price")


def _move_with_one_kept_off(
    kube: Kube, ns: str, old: dict[str, Any], other: dict[str, Any]
) -> dict[str, Any]:
    """Free the A100 node so that long (its pod `old`, kept shown as it exits) moves there;
    then create `other`, which must not be bound while long's old pod exits (NodeResourcesFit);
    let the old pod go and return long's new pod, on the A100 node."""
    uid, pod, name = old["metadata"]["uid"], old["metadata"]["name"], other["metadata"]["name"]
    try:
        kube.delete_job(ns, "fill-a100")
        wait_for(lambda: _moving(kube, ns, uid), "long's pod deleted for a move", 60)
        kube.create_job(ns, other)
        wait_for(
            lambda: "NodeResourcesFit" in kube.scheduled_message(ns, name), f"{name}'s reason", 30
        )
        for _ in range(15):
            assert kube.bound(ns, name) == []
            time.sleep(0.2)
        assert not _gone(kube, ns, uid)  # its old pod still exits
        assert invariants.check(kube.core) == []
    finally:
        if not _gone(kube, ns, uid):
            kube.linger(ns, pod, hold=False)
    (new,) = wait_for(lambda: kube.bound(ns, "long", started=True), "long running again", 60)
    assert new["spec"]["nodeName"] == NODE
    return dict(new)


def _pinned(job: dict[str, Any]) -> dict[str, Any]:
    job["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return job


def _fill_a100_beside_v(kube: Kube, ns: str) -> None:
    """The H100 nodes full; on the A100 node `fill-a100` (4 GPUs, priority 100) and `v` (4
    GPUs, priority 1), running."""
    kube.create_job(ns, training_job("fill-h100", 3, gpus=8, gpu_type="H100-80GB", priority=100))
    fill = training_job("fill-a100", 1, gpus=4, gpu_type="A100-80GB", priority=100)
    kube.create_job(ns, _pinned(fill))
    kube.create_job(ns, _pinned(training_job("v", 1, gpus=4, gpu_type="A100-80GB", priority=1)))
    for job in ("fill-h100", "fill-a100", "v"):
        wait_for(lambda j=job: kube.phase(ns, j) == "Running", f"{job} running", 60)


def _hi_waits_for_v(kube: Kube, ns: str) -> None:
    """`hi` (4 A100 GPUs, 70 CPUs, priority 10, pinned to the A100 node) evicts v and waits."""
    hi = training_job("hi", 1, gpus=4, gpu_type="A100-80GB", priority=10)
    kube.create_job(ns, _pinned(_cpu(hi, "70")))
    wait_for(lambda: "WaitingForPreemption" in kube.scheduled_message(ns, "hi"), "hi waiting", 30)


def _free_a100_while_hi_waits(kube: Kube, ns: str, kept: list[str]) -> None:
    """Keep the `kept` pods in the API once deleted, let `hi` wait for v, then free
    fill-a100's GPUs, so that the gang on L4 is moved onto them."""
    for name in kept:
        kube.linger(ns, name, hold=True)
    _hi_waits_for_v(kube, ns)
    time.sleep(6)  # the gang on L4 past a move's price (cycles follow events)
    kube.delete_job(ns, "fill-a100")


def _pods_of(kube: Kube, ns: str, job: str) -> dict[str, str]:
    """Name -> uid of `job`'s pods now."""
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.job_pods(ns, job)}


def test_a_moved_gang_is_not_bound_on_the_cpu_a_waiting_preemptor_will_need(
    kube: Kube, ns: str
) -> None:
    # The A100 node: `fill-a100` (4 GPUs, priority 100) and `v` (4 GPUs, priority 1). `pair`
    # (2 pods of 2 GPUs and 40 CPUs each, faster on A100) runs on L4. `hi` (4 A100 GPUs, 70
    # CPUs, priority 10, pinned there) evicts v, whose pod a finalizer keeps: hi waits with 70
    # of the node's 128 CPUs kept for it. Then fill-a100 goes and pair is moved onto its GPUs.
    # Each of pair's pods fits beside hi's CPUs, both together (80) do not: once pair's old
    # pods are gone it is not bound there (before, it was, and hi, short of CPU once v was
    # gone, was decided afresh and stayed pending); hi is bound there once v's pod is gone.
    _fill_a100_beside_v(kube, ns)
    pair = _cpu(training_job("pair", 2, gpus=2), "40")
    pair["spec"]["gpuTypes"] = _long()["spec"]["gpuTypes"]
    pair["spec"]["checkpoint"] = {"onSignal": True, "gracePeriodSeconds": 1}
    kube.create_job(ns, pair)
    wait_for(lambda: kube.phase(ns, "pair") == "Running", "pair running", 60)
    old = _pods_of(kube, ns, "pair")
    (v,) = kube.bound(ns, "v")
    held = [(name, "pair") for name in old] + [(v["metadata"]["name"], "v")]
    try:
        _free_a100_while_hi_waits(kube, ns, [name for name, _ in held])

        def moving() -> bool:
            pods = [p for p in kube.job_pods(ns, "pair") if p["metadata"]["uid"] in old.values()]
            return len(pods) == 2 and all(
                (p["metadata"].get("annotations") or {}).get(names.DISRUPTED_BY)
                == names.MOVED_REASON
                for p in pods
            )

        wait_for(moving, "pair's pods deleted for a move", 60)
        for name in old:  # pair's old pods go; v's stays
            kube.linger(ns, name, hold=False)
        wait_for(
            lambda: (
                not set(old.values()) & set(_pods_of(kube, ns, "pair").values())
                and len(_pods_of(kube, ns, "pair")) == 2
            ),
            "pair's pods recreated",
            30,
        )
        for _ in range(15):
            assert all(p["spec"]["nodeName"] != NODE for p in kube.bound(ns, "pair"))
            assert kube.bound(ns, "hi") == []
            time.sleep(0.2)
        assert invariants.check(kube.core) == []
    finally:
        for name, job in held:
            if name in _pods_of(kube, ns, job):
                kube.linger(ns, name, hold=False)
    (placed,) = wait_for(lambda: kube.bound(ns, "hi"), "hi bound", 60)
    assert placed["spec"]["nodeName"] == NODE
    assert all(p["spec"]["nodeName"] != NODE for p in kube.bound(ns, "pair"))
    assert invariants.check(kube.core) == []


def test_a_nominated_gang_is_not_bound_at_the_end_of_its_wait_on_the_cpu_a_move_needs(
    kube: Kube, ns: str
) -> None:
    # The A100 node: `fill-a100` (4 GPUs, priority 100) and `v` (4 GPUs, priority 1). `long`
    # (100 CPUs, priority 20) runs on L4. `hi` (4 A100 GPUs, 70 CPUs, priority 10, pinned
    # there) evicts v, whose pod a finalizer keeps: hi waits. Then fill-a100 goes and long is
    # moved onto its GPUs (hi's CPUs, of a lower priority, do not stop it); a finalizer keeps
    # long's old pod. v's pod goes: hi's wait has ended, but its 70 CPUs do not fit beside the
    # 100 long will ask: it is not bound (before, it was, and long, short of CPU at its rebind,
    # lost its reservation); long is bound on the node once its old pod is gone.
    _fill_a100_beside_v(kube, ns)
    long = _long()
    long["spec"]["priority"] = 20
    kube.create_job(ns, long)
    (old,) = wait_for(lambda: kube.bound(ns, "long", started=True), "long running", 60)
    assert old["spec"]["nodeName"].startswith("l4-")
    uid = old["metadata"]["uid"]
    (v,) = kube.bound(ns, "v")
    held = [(old["metadata"]["name"], "long"), (v["metadata"]["name"], "v")]
    try:
        _free_a100_while_hi_waits(kube, ns, [name for name, _ in held])
        wait_for(lambda: _moving(kube, ns, uid), "long's pod deleted for a move", 60)
        kube.linger(ns, v["metadata"]["name"], hold=False)  # hi's wait ends
        wait_for(
            lambda: v["metadata"]["uid"] not in _pods_of(kube, ns, "v").values(), "v's pod gone"
        )
        wait_for(
            lambda: kube.bound(ns, "hi") or "NodeResourcesFit" in kube.scheduled_message(ns, "hi"),
            "hi bound or its reason",
            30,
        )
        # Its reason says its hold was given up for long's move (before: the core's
        # NodeResourcesFit alone, as for a gang that never had a placement).
        given_up = (
            f"its hold on {NODE} was given up at the end of its wait: its pods together need "
            f"more cpu than {NODE} has to spare beside what moved gang {ns}/long is promised"
        )
        wait_for(lambda: given_up in kube.scheduled_message(ns, "hi"), "hi's reason", 30)
        for _ in range(15):
            assert kube.bound(ns, "hi") == []
            time.sleep(0.2)
        assert not _gone(kube, ns, uid)  # long's old pod still exits
        assert invariants.check(kube.core) == []
    finally:
        for name, job in held:
            if name in _pods_of(kube, ns, job):
                kube.linger(ns, name, hold=False)
    (new,) = wait_for(lambda: kube.bound(ns, "long", started=True), "long running again", 60)
    assert new["spec"]["nodeName"] == NODE
    assert kube.bound(ns, "hi") == []  # 28 CPUs left beside long's 100
    assert invariants.check(kube.core) == []
