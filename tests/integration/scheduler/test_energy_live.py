"""Energy on the sandbox: `gpufleet operator` with the energy preset and idle-node power-down
on (settings file), and `gpufleet node-agent --limiter record` as a real process.

Aspects: the node agent records on its node the power cap the scheduler wrote on the pod, for
the pod's GPUs, and removes it when the pod is gone; empty nodes beyond the warm ones of each
GPU type are cordoned and labelled `off`; a gang that fits on a powered node is bound there, not
on a switched-off one; a gang that fits only on switched-off nodes wakes one (label `waking`,
its pods say why they wait) and is bound to it only after the boot time, once it is uncordoned.
The module gives the fleet back as it found it (no mark, no cordon, no recorded cap).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.model.contract.power import PowerMark, PowerState, applied_caps, mark_patch
from gpufleet.model.contract.reasons import PendingNote, SchedulerReason
from gpufleet.model.gpus import load_catalog
from gpufleet.model.power import choose_power_cap
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.node_manifests import POOL_LABEL
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    configured_operator,
    training_job,
    wait_for,
)

BOOT_S = 6.0
WARM = 2
SETTINGS = f"""\
placement:
  preset: energy
  power_down:
    enabled: true
    idle_s: 0
    warm_nodes_per_type: {WARM}
    boot_s: {BOOT_S}
"""


def restore_fleet(kube: Kube) -> None:
    """Every node as the fleet had it: unmarked, uncordoned, no recorded caps."""
    for node in kube.core.list_node().items:
        meta = node.metadata
        labels, annotations = meta.labels or {}, meta.annotations or {}
        if names.POWER_STATE_LABEL in labels:
            kube.core.patch_node(meta.name, mark_patch(PowerMark()))
        if names.APPLIED_POWER_CAPS in annotations:
            patch = {"metadata": {"annotations": {names.APPLIED_POWER_CAPS: None}}}
            kube.core.patch_node(meta.name, patch)


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator: energy preset, power-down after no idle time, short boots."""
    folder = tmp_path_factory.mktemp("operator")
    try:
        with configured_operator(sandbox.kubeconfig, kube, folder, SETTINGS) as proc:
            yield proc
    finally:
        restore_fleet(kube)  # the operator is stopped: nothing marks nodes again


def node(kube: Kube, name: str) -> Any:
    return kube.core.read_node(name)


def mark_of(kube: Kube, name: str) -> PowerMark:
    meta = node(kube, name).metadata
    return PowerMark.read(meta.labels or {}, meta.annotations or {})


def pool_nodes(kube: Kube, pool: str) -> list[str]:
    nodes = kube.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items
    return sorted(n.metadata.name for n in nodes)


def job_pods(kube: Kube, ns: str, job: str) -> list[dict[str, Any]]:
    return kube.pods(ns, f"gpufleet.io/trainingjob={job}")


def bound_nodes(kube: Kube, ns: str, job: str, replicas: int) -> list[str] | None:
    pods = job_pods(kube, ns, job)
    nodes = [p["spec"].get("nodeName") for p in pods]
    return nodes if len(nodes) == replicas and all(nodes) else None  # type: ignore[return-value]


def pinned_job(name: str, replicas: int, gpus: int, gpu_type: str, pool: str) -> dict[str, Any]:
    manifest = training_job(name, replicas, gpus=gpus, gpu_type=gpu_type)
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {POOL_LABEL: pool}
    return manifest


def start_agent(sandbox: Sandbox, node_name: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "gpufleet.cli", "node-agent", "--node-name", node_name,
             "--limiter", "record", "--kubeconfig", str(sandbox.kubeconfig), "--relist", "5"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def stop_agent(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=15)


def test_node_agent_records_the_cap_the_scheduler_decided(
    sandbox: Sandbox, kube: Kube, ns: str, tmp_path: Path
) -> None:
    kube.create_job(ns, pinned_job("capped", 1, 2, "H100-80GB", "h100"))
    (where,) = wait_for(lambda: bound_nodes(kube, ns, "capped", 1), "the job bound", 60)
    pod = job_pods(kube, ns, "capped")[0]
    annotations = pod["metadata"]["annotations"]
    expected = choose_power_cap(load_catalog()["H100-80GB"], 0.05)
    assert expected is not None
    assert annotations[names.POWER_CAP] == f"{expected.cap_w:.0f}"
    gpus = [int(g) for g in annotations[names.ASSIGNED_GPUS].split(",")]
    agent = start_agent(sandbox, where, tmp_path / "agent.log")
    try:
        # A generous wait: the agent is a fresh Python process on a shared, loaded machine.
        recorded = wait_for(
            lambda: applied_caps(node(kube, where).metadata.annotations or {}),
            "the agent's record on the node",
            180,
        )
        assert recorded == dict.fromkeys(gpus, round(expected.cap_w))
        kube.delete_job(ns, "capped")
        wait_for(
            lambda: names.APPLIED_POWER_CAPS not in (node(kube, where).metadata.annotations or {}),
            "the cap removed once the pod is gone",
            60,
        )
    finally:
        code = stop_agent(agent)
    assert code == 0, (tmp_path / "agent.log").read_text()


def test_switched_off_nodes_are_used_only_when_nothing_powered_fits(kube: Kube, ns: str) -> None:
    # The a100 pool's three whole-GPU nodes and the MIG node a100-mig-0 are one GPU type:
    # with two kept warm, two of the empty nodes are switched off at once.
    pool = pool_nodes(kube, "a100")
    assert len(pool) == 3

    def off_nodes() -> list[str] | None:
        off = [n for n in pool if mark_of(kube, n).state is PowerState.OFF]
        return off if len(off) == 2 else None

    off = wait_for(off_nodes, "two a100 nodes switched off", 30)
    for name in off:
        assert node(kube, name).spec.unschedulable
    (powered,) = set(pool) - set(off)

    # A gang that fits on the powered node is bound there.
    kube.create_job(ns, pinned_job("fits", 1, 8, "A100-80GB", "a100"))
    assert wait_for(lambda: bound_nodes(kube, ns, "fits", 1), "fits bound", 60) == [powered]
    assert all(mark_of(kube, n).state is PowerState.OFF for n in off)

    # The next fits only on a switched-off node: one is woken and the gang waits for its boot.
    kube.create_job(ns, pinned_job("wakes", 1, 8, "A100-80GB", "a100"))

    def woken() -> tuple[str, float] | None:
        for name in off:
            mark = mark_of(kube, name)
            if mark.state is PowerState.WAKING and mark.since is not None:
                return name, mark.since
        return None

    name, since = wait_for(woken, "a switched-off node woken", 30)
    assert node(kube, name).spec.unschedulable

    def waiting_reason() -> PendingNote | None:
        pods = job_pods(kube, ns, "wakes")
        for condition in (pods[0]["status"].get("conditions") or []) if pods else []:
            if condition["type"] == "PodScheduled" and condition["status"] == "False":
                return PendingNote.parse(condition["message"])
        return None

    note = wait_for(waiting_reason, "the waiting pod's reason", 30)
    assert note.reason is SchedulerReason.BOOTING and name in note.detail
    assert bound_nodes(kube, ns, "wakes", 1) is None
    assert wait_for(lambda: bound_nodes(kube, ns, "wakes", 1), "wakes bound", 60) == [name]
    # Bound only once booted: the boot counts from the wake. Both times are whole seconds.
    pod = job_pods(kube, ns, "wakes")[0]
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "True"
    bound_at = datetime.fromisoformat(scheduled["lastTransitionTime"]).timestamp()
    assert bound_at >= since + BOOT_S - 1.0
    assert mark_of(kube, name) == PowerMark()
    assert not node(kube, name).spec.unschedulable
