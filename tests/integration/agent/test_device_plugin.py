"""`gpufleet device-plugin` as a real process, with the sandbox's API server and a kubelet peer.

Aspects: the node is found by its `gpufleet.io/node-pool` label (as on kind, where node names are
not the fleet's) and labelled with GFD labels; the preferred allocation follows the assignment
a pod received through the `pods/binding` subresource, read from the real API server; SIGHUP
re-reads the health file at once; a second plugin reads the same GPUs back from the node's GFD
labels alone; SIGTERM stops the plugin cleanly and removes its socket.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakekubelet import FakeKubelet
from kubernetes.client.rest import ApiException

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox, default_fleet_path
from gpufleet.testing.operator import Kube, wait_for


@pytest.fixture
def gpu_node(kube: Kube) -> Iterator[str]:
    """A node of the fleet's L4 pool under a kind-style name, with no kubelet and no GFD labels."""
    name = f"kind-worker-{uuid.uuid4().hex[:6]}"
    body: Any = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gpufleet.io/node-pool": "l4"}},
    }
    kube.core.create_node(body)
    yield name
    with contextlib.suppress(ApiException):
        kube.core.delete_node(name)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"device-plugin-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(name)
    yield name
    with contextlib.suppress(ApiException):
        kube.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        kube.core.delete_namespace(name)


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dpi-") as tmp:  # short: Unix socket path limit
        yield Path(tmp)


def bind_with_assignment(kube: Kube, namespace: str, node: str, gpus: str) -> None:
    """A pod bound the way gpufleet's scheduler binds: the Binding carries the assignment."""
    pod: Any = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "worker", "namespace": namespace},
        "spec": {
            "schedulerName": "nobody",  # no scheduler in the sandbox acts on it
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ],
        },
    }
    kube.core.create_namespaced_pod(namespace, pod)
    binding: Any = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "worker", "annotations": {names.ASSIGNED_GPUS: gpus}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    kube.core.create_namespaced_binding(namespace, binding, _preload_content=False)


def start_plugin(sandbox: Sandbox, node: str, folder: Path, *extra: str) -> subprocess.Popen[str]:
    args = [
        sys.executable,
        "-m",
        "gpufleet.cli",
        "device-plugin",
        "--node-name",
        node,
        "--kubeconfig",
        str(sandbox.kubeconfig),
        "--device-plugin-dir",
        str(folder / "plugins"),
        "--device-dir",
        str(folder / "dev"),
        "--health-file",
        str(folder / "health"),
        "--poll-interval",
        "600",  # only the first tick and SIGHUP wake it: proves the signal does the work
        *extra,
    ]
    with (folder / "plugin.log").open("w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True)


def stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=15)


def test_device_plugin_process_on_the_sandbox(
    sandbox: Sandbox, kube: Kube, gpu_node: str, namespace: str, folder: Path
) -> None:
    kubelet = FakeKubelet(folder / "plugins")
    kubelet.start()
    proc = start_plugin(
        sandbox, gpu_node, folder, "--fleet", str(default_fleet_path()), "--label-node"
    )
    try:
        devices = wait_for(lambda: kubelet.devices("nvidia.com/gpu"), "registration", 30)
        assert devices == {str(i): "Healthy" for i in range(4)}

        labels = kube.core.read_node(gpu_node).metadata.labels
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
        assert labels["nvidia.com/gpu.count"] == "4"
        assert labels["nvidia.com/mig.strategy"] == "none"

        everything = ["0", "1", "2", "3"]
        assert kubelet.preferred("nvidia.com/gpu", everything, 2) == ["0", "1"]
        bind_with_assignment(kube, namespace, gpu_node, "1,3")
        assert kubelet.preferred("nvidia.com/gpu", everything, 2) == ["1", "3"]

        (folder / "health").write_text("2\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(
            lambda: kubelet.devices("nvidia.com/gpu").get("2") == "Unhealthy", "GPU 2 down", 10
        )
    finally:
        code = stop(proc)
        kubelet.stop()
    assert code == 0, (folder / "plugin.log").read_text()
    assert not (folder / "plugins" / "gpufleet-gpu.sock").exists()

    # The node now carries GFD labels: a plugin without a fleet file reads its GPUs from them.
    second = folder / "second"
    kubelet = FakeKubelet(second / "plugins")
    kubelet.start()
    proc = start_plugin(sandbox, gpu_node, second)
    try:
        devices = wait_for(lambda: kubelet.devices("nvidia.com/gpu"), "registration by labels", 30)
        assert sorted(devices) == everything
    finally:
        code = stop(proc)
        kubelet.stop()
    assert code == 0, (second / "plugin.log").read_text()
