"""`gpufleet operator` started with a settings file on the sandbox: the file's placement preset
drives the live scheduler (the energy preset power-caps every gang that does not ask for
performance, a job's own maxSlowdownPercent bounds its cap instead), the operator's pods name
the scheduler name of the file and that scheduler binds them, the file's pod tolerations are
what the operator adds to its pods (a job whose template tolerates nothing runs on a pool tainted
with a key other than the GPU Operator's), its log format is what the process writes, and a bad
setting stops the process with status 2 before it takes the Lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.model.gpus import load_catalog
from gpufleet.model.power import choose_power_cap
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

H100 = "H100-80GB"
SCHEDULER = "gpufleet-settings"
L4_NODES = [f"l4-{i}" for i in range(4)]
TAINT = "example.com/accelerator=reserved:NoSchedule"
TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "example.com/accelerator", "operator": "Equal", "value": "reserved",
     "effect": "NoSchedule"},
]  # fmt: skip


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's operator, configured by a YAML file as a Helm chart's ConfigMap would."""
    folder = tmp_path_factory.mktemp("operator")
    config = folder / "settings.yaml"
    config.write_text(
        f"placement:\n  preset: energy\nscheduler:\n  name: {SCHEDULER}\n"
        f"operator:\n  tick_s: 0.5\n  pod_tolerations: {json.dumps(TOLERATIONS)}\n"
        "log:\n  format: json\n"
    )
    with OperatorProcess(
        sandbox.kubeconfig, folder / "operator.log", kube.coordination, f"--config={config}"
    ) as proc:
        yield proc


def bound_pod(kube: Kube, ns: str, job: str) -> dict[str, Any] | None:
    pods = kube.pods(ns, f"gpufleet.io/trainingjob={job}")
    return pods[0] if pods and pods[0]["spec"].get("nodeName") else None


def cap_of(pod: dict[str, Any]) -> str | None:
    annotations: dict[str, str] = pod["metadata"].get("annotations") or {}
    return annotations.get(names.POWER_CAP)


def test_energy_preset_caps_power_within_its_slowdown(kube: Kube, ns: str) -> None:
    kube.create_job(ns, training_job("balanced", 1, gpus=1, gpu_type=H100))
    fast = training_job("fast", 1, gpus=1, gpu_type=H100)
    fast["spec"]["energy"] = {"preference": "performance"}
    kube.create_job(ns, fast)
    capped = wait_for(lambda: bound_pod(kube, ns, "balanced"), "the balanced job bound", 60)
    uncapped = wait_for(lambda: bound_pod(kube, ns, "fast"), "the performance job bound", 60)
    expected = choose_power_cap(load_catalog()[H100], 0.05)
    assert expected is not None
    assert cap_of(capped) == f"{expected.cap_w:.0f}"
    assert cap_of(uncapped) is None
    for pod in (capped, uncapped):
        assert pod["spec"]["schedulerName"] == SCHEDULER


def test_a_jobs_max_slowdown_bounds_its_power_cap(kube: Kube, ns: str) -> None:
    loose = training_job("loose", 1, gpus=1, gpu_type=H100)
    loose["spec"]["energy"] = {"preference": "energy", "maxSlowdownPercent": 20}
    kube.create_job(ns, loose)
    pod = wait_for(lambda: bound_pod(kube, ns, "loose"), "the job bound", 60)
    expected = choose_power_cap(load_catalog()[H100], 0.20)
    preset = choose_power_cap(load_catalog()[H100], 0.05)
    assert expected is not None and preset is not None and expected.cap_w < preset.cap_w
    assert cap_of(pod) == f"{expected.cap_w:.0f}"


@pytest.fixture
def reserved_l4(sandbox: Sandbox) -> Iterator[None]:
    """The L4 pool with a taint of another key than the GPU Operator's, removed afterwards."""
    sandbox.kubectl("taint", "nodes", *L4_NODES, TAINT)
    try:
        yield
    finally:
        sandbox.kubectl("taint", "nodes", *L4_NODES, TAINT + "-")


def test_the_pod_tolerations_setting_opens_a_pool_with_its_own_taint(
    kube: Kube, ns: str, reserved_l4: None
) -> None:
    job = training_job("reserved", 2, gpus=1, gpu_type="L4")
    assert "tolerations" not in job["spec"]["template"]["spec"]
    kube.create_job(ns, job)
    wait_for(lambda: kube.phase(ns, "reserved") == "Running", "the job running on L4", 60)
    pods = kube.pods(ns, "gpufleet.io/trainingjob=reserved")
    assert len(pods) == 2
    for pod in pods:
        assert pod["spec"]["nodeName"] in L4_NODES
        # The API server's DefaultTolerationSeconds plugin may add its own after them.
        assert pod["spec"]["tolerations"][: len(TOLERATIONS)] == TOLERATIONS


def test_logs_are_json_lines(operator: OperatorProcess) -> None:
    records = []
    for line in operator.log.read_text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    assert records, "no JSON log line"
    assert {"time", "level", "logger", "message"} <= set(records[0])
    assert any(r["message"].startswith("lease gpufleet-system/") for r in records)


def test_a_bad_setting_exits_2_before_taking_the_lease(sandbox: Sandbox, tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("scheduler:\n  resync_s: 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.app", f"--kubeconfig={sandbox.kubeconfig}",
         f"--config={config}"],
        env=os.environ, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "gpufleet operator: error: setting scheduler.resync_s (GPUFLEET_SCHEDULER__RESYNC_S): "
        "Input should be greater than 0 (got 0)"
    ]
