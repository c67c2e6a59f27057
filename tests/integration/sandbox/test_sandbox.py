"""The sandbox against its real control plane: fleet, kwok, the fake MIG manager, the demo's
simulated vLLM servers with Prometheus, up and down, and the supervision that restarts a
component or the operator that dies."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
import yaml

from gpufleet.model.fleet import load_fleet
from gpufleet.sandbox import processes
from gpufleet.sandbox.control_plane import (
    COMPONENTS,
    OPERATOR,
    PROMETHEUS,
    SERVING,
    Sandbox,
    default_fleet_path,
)


def _node(sandbox: Sandbox, name: str) -> dict:
    return json.loads(sandbox.kubectl("get", "node", name, "-o", "json").stdout)


def _wait_mig_state(sandbox: Sandbox, name: str, config: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = _node(sandbox, name)
        meta = node["metadata"]
        done = meta["labels"].get("nvidia.com/mig.config.state") in ("success", "failed")
        if done and meta.get("annotations", {}).get("gpufleet.io/mig-config-applied") == config:
            return node
        time.sleep(0.2)
    raise AssertionError(f"MIG manager did not act on {name} -> {config} in {timeout}s")


def test_default_fleet_nodes_are_ready_with_gpus(sandbox: Sandbox) -> None:
    fleet = load_fleet(default_fleet_path())
    nodes = json.loads(sandbox.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert len(by_name) == fleet.total_nodes
    for pool in fleet.node_pools:
        for name in pool.node_names():
            node = by_name[name]
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", name
            labels = node["metadata"]["labels"]
            assert labels["nvidia.com/gpu.count"] == str(pool.gpus_per_node)
            assert labels["nvidia.com/gpu.present"] == "true"
            allocatable = node["status"]["allocatable"]
            if pool.mig is None:
                assert allocatable["nvidia.com/gpu"] == str(pool.gpus_per_node), name
            else:
                assert labels["nvidia.com/mig.config"] == pool.mig.config
    a100_mig = by_name["a100-mig-0"]["status"]["allocatable"]
    assert a100_mig["nvidia.com/mig-1g.10gb"] == "56"


def test_bound_pod_runs_on_a_fake_gpu_node(sandbox: Sandbox) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-probe", "namespace": "default"},
        "spec": {
            "nodeName": "l4-0",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/probe:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    sandbox.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))
    try:
        sandbox.kubectl(
            "wait", "--for=jsonpath={.status.phase}=Running", "pod/gpu-probe", "--timeout=60s"
        )
    finally:
        sandbox.kubectl("delete", "pod", "gpu-probe", "--wait=true", "--timeout=60s")


def test_mig_manager_applies_a_layout_and_refuses_an_invalid_one(sandbox: Sandbox) -> None:
    name = "a100-1"
    before = _node(sandbox, name)["status"]["allocatable"]
    assert before["nvidia.com/gpu"] == "8"
    try:
        sandbox.kubectl("label", "node", name, "nvidia.com/mig.config=all-3g.40gb", "--overwrite")
        node = _wait_mig_state(sandbox, name, "all-3g.40gb")
        assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
        assert node["metadata"]["labels"]["nvidia.com/mig-3g.40gb.count"] == "16"
        assert node["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] == "16"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "0"

        sandbox.kubectl("label", "node", name, "nvidia.com/mig.config=all-9g.99gb", "--overwrite")
        node = _wait_mig_state(sandbox, name, "all-9g.99gb")
        assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "failed"
        # A refused layout leaves the node exactly as it was.
        assert node["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] == "16"
    finally:
        sandbox.kubectl("label", "node", name, "nvidia.com/mig.config=all-disabled", "--overwrite")
        restored = _wait_mig_state(sandbox, name, "all-disabled")
    assert restored["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert "nvidia.com/mig-3g.40gb" not in restored["status"]["allocatable"]


def test_up_on_a_running_sandbox_changes_nothing(sandbox: Sandbox) -> None:
    before = json.loads(sandbox._state_file.read_text())["pids"]
    sandbox.up(progress=lambda _: None)
    assert json.loads(sandbox._state_file.read_text())["pids"] == before
    assert sandbox.status()["nodes_ready"] == load_fleet(default_fleet_path()).total_nodes


@pytest.fixture
def small_fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "nodePools:\n"
        "  - {name: t4, count: 2, gpuType: T4, gpusPerNode: 4}\n"
        "  - {name: h200, count: 1, gpuType: H200-141GB, gpusPerNode: 8,\n"
        "     mig: {strategy: mixed, config: all-balanced}}\n"
    )
    return path


def _killed_and_restarted(sbx: Sandbox, name: str) -> None:
    """`kill -9` a supervised process: its supervisor starts it again and counts it."""
    pid = sbx.component_pid(name)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while sbx.component_pid(name) in (None, pid):
        assert time.monotonic() < deadline, f"{name} was not restarted"
        time.sleep(0.1)
    assert sbx.status()["restarts"][name] == 1


def test_down_leaves_nothing_behind_and_up_works_again(tmp_path: Path, small_fleet: Path) -> None:
    sbx = Sandbox(tmp_path / "second")
    try:
        for round in range(2):  # a second up after down must work, the second with the operator
            sbx.up(small_fleet, progress=lambda _: None, operator=round == 1)
            state = json.loads(sbx._state_file.read_text())
            assert set(state["pids"]) == set(COMPONENTS) | ({OPERATOR} if round else set())
            assert sbx.status()["nodes_ready"] == 3
            # Supervised like a pod by a kubelet: a dead component or operator comes back.
            _killed_and_restarted(sbx, OPERATOR if round else "kwok")
            children = {n: sbx.component_pid(n) for n in state["child_markers"]}
            # The demo's simulated vLLM servers and their Prometheus are stopped with the rest.
            url = sbx.ensure_serving("default", "demo-llm", progress=lambda _: None)
            assert httpx.get(f"{url}/-/ready", timeout=5).status_code == 200
            assert sbx.ensure_serving("default", "demo-llm", progress=lambda _: None) == url
            state = json.loads(sbx._state_file.read_text())
            assert {SERVING, PROMETHEUS} <= set(state["pids"])
            assert all(sbx.running_components().values())
            sbx.down(progress=lambda _: None)
            for component, pid in state["pids"].items():
                assert not processes.is_ours(pid, state["markers"][component]), component
            # The supervisors are gone (above) and so are the processes they kept running, so
            # nothing can start them again.
            for name, pid in children.items():
                assert pid is not None and not processes.is_ours(pid, state["child_markers"][name])
            for port in state["ports"].values():
                assert not processes.port_open(port), port
            assert not sbx.is_running()
    finally:
        sbx.down(progress=lambda _: None)
