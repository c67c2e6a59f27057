"""The fake GPU device plugin against a kubelet-protocol peer over real gRPC on Unix sockets.

Aspects: registration (one plugin per resource, API version, endpoint, options), the
ListAndWatch stream, capacity equal to what the sandbox advertises for the same node, Allocate
(visible devices, fake device nodes, unknown ids refused), preferred allocation following the
scheduler's assignment (a borrower of an asleep standby's GPU gets that GPU's lend device),
health transitions through the health file, re-registration after a kubelet restart,
registration retried until a kubelet appears, and streams ending on stop.
"""

from __future__ import annotations

import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from fakekubelet import FakeKubelet

from gpufleet.agent.deviceplugin.devices import NodeGpus, gpus_from_fleet
from gpufleet.agent.deviceplugin.server import DevicePlugin, PluginSettings
from gpufleet.model.contract import names
from gpufleet.model.fleet import load_fleet
from gpufleet.model.migparted import load_default_configs
from gpufleet.sandbox.control_plane import default_fleet_path
from gpufleet.sandbox.node_manifests import fleet_manifests
from gpufleet.testing.operator import wait_for

FLEET = load_fleet(default_fleet_path())
CONFIGS = load_default_configs()


class ListedPods:
    """The pods bound to the node, as a test sets them."""

    def __init__(self) -> None:
        self.items: list[Mapping[str, Any]] = []

    def pods(self) -> list[Mapping[str, Any]]:
        return list(self.items)


def bound_pod(
    name: str, gpus: str, mig: str | None = None, phase: str = "Pending"
) -> dict[str, Any]:
    annotations = {names.ASSIGNED_GPUS: gpus}
    if mig is not None:
        annotations[names.ASSIGNED_MIG] = mig
    return {
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": f"t-{name}"}
            ],
        },
    }


class RunningPlugin:
    """A DevicePlugin ticking in a thread, stopped at the end of the test."""

    def __init__(self, gpus: NodeGpus, folder: Path, device_dir: Path, health: Path) -> None:
        self.pods = ListedPods()
        settings = PluginSettings(folder, device_dir, health, poll_interval_s=0.05)
        self.plugin = DevicePlugin(gpus, settings, self.pods)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.plugin.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> RunningPlugin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.plugin.wake()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the plugin did not stop"


@pytest.fixture
def start_plugin(socket_dir: Path) -> Iterator[Any]:
    running: list[RunningPlugin] = []

    def start(node: str, folder: Path | None = None, lend: bool = False) -> RunningPlugin:
        gpus = replace(gpus_from_fleet(FLEET, node, CONFIGS), lend_devices=lend)
        plugin = RunningPlugin(
            gpus, folder or socket_dir / "device-plugins", socket_dir / "dev", socket_dir / "health"
        )
        running.append(plugin.__enter__())
        return plugin

    yield start
    for plugin in running:
        plugin.__exit__(None, None, None)


def test_registers_whole_gpus_and_streams_them(kubelet: FakeKubelet, start_plugin: Any) -> None:
    start_plugin("h100-0")
    wait_for(lambda: kubelet.devices("nvidia.com/gpu"), what="the device list")
    [request] = kubelet.registrations
    assert request.version == "v1beta1"
    assert request.endpoint == "gpufleet-gpu.sock"
    assert request.options.get_preferred_allocation_available
    assert kubelet.endpoints["nvidia.com/gpu"].options.get_preferred_allocation_available
    assert kubelet.devices("nvidia.com/gpu") == {str(i): "Healthy" for i in range(8)}


def test_mig_node_capacity_matches_the_sandbox_node(
    kubelet: FakeKubelet, start_plugin: Any
) -> None:
    """One plugin per MIG profile; the counts are what the sandbox's kwok node advertises."""
    start_plugin("h100-mig-0")
    [node] = [n for n in fleet_manifests(FLEET, CONFIGS) if n["metadata"]["name"] == "h100-mig-0"]
    expected = {
        name: int(count)
        for name, count in node["status"]["capacity"].items()
        if name.startswith("nvidia.com/") and int(count) > 0
    }
    assert len(expected) >= 2  # the balanced layout mixes profiles
    wait_for(lambda: set(kubelet.endpoints) == set(expected), what="every profile registered")
    for resource, count in expected.items():
        devices = wait_for(lambda r=resource: kubelet.devices(r), what=resource)
        assert len(devices) == count, resource
    assert all(":" in d for r in expected for d in kubelet.devices(r))


def test_allocate_gives_visible_devices_and_device_nodes(
    kubelet: FakeKubelet, start_plugin: Any, socket_dir: Path
) -> None:
    start_plugin("h100-0")
    wait_for(lambda: kubelet.devices("nvidia.com/gpu"), what="the device list")
    response = kubelet.allocate("nvidia.com/gpu", ["1", "3"], ["0"])
    first, second = response.container_responses
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == "1,3"
    assert second.envs["NVIDIA_VISIBLE_DEVICES"] == "0"
    paths = {d.container_path: d.host_path for d in first.devices}
    assert set(paths) == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1", "/dev/nvidia3"}
    for host in paths.values():
        assert Path(host).parent == socket_dir / "dev"
        assert stat.S_ISCHR(Path(host).stat().st_mode), host
    assert {d.permissions for d in first.devices} == {"rw"}


def test_allocate_mig_device_uses_its_gpu(kubelet: FakeKubelet, start_plugin: Any) -> None:
    start_plugin("a100-mig-0")
    resource = "nvidia.com/mig-1g.10gb"
    wait_for(lambda: kubelet.devices(resource), what="the MIG device list")
    [container] = kubelet.allocate(resource, ["2:5"]).container_responses
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == "2:5"
    assert "/dev/nvidia2" in {d.container_path for d in container.devices}


def test_allocate_refuses_unknown_devices(kubelet: FakeKubelet, start_plugin: Any) -> None:
    start_plugin("l4-0")
    wait_for(lambda: kubelet.devices("nvidia.com/gpu"), what="the device list")
    with pytest.raises(grpc.RpcError) as err:
        kubelet.allocate("nvidia.com/gpu", ["0", "7"])  # an L4 node has GPUs 0-3
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "7" in (err.value.details() or "")


def test_preferred_allocation_follows_the_scheduler(
    kubelet: FakeKubelet, start_plugin: Any
) -> None:
    plugin = start_plugin("h100-0")
    wait_for(lambda: kubelet.devices("nvidia.com/gpu"), what="the device list")
    everything = [str(i) for i in range(8)]
    # No gpufleet pod waiting: pack from the lowest GPU.
    assert kubelet.preferred("nvidia.com/gpu", everything, 2) == ["0", "1"]
    plugin.pods.items = [
        bound_pod("started", "0,1", phase="Running"),
        bound_pod("waiting", "4,6"),
    ]
    assert kubelet.preferred("nvidia.com/gpu", everything, 2) == ["4", "6"]
    # The assignment's GPUs are no longer free (another pod took one): pack instead.
    assert kubelet.preferred("nvidia.com/gpu", ["0", "1", "2", "5", "6"], 2) == ["0", "1"]
    # Devices the kubelet must include win over a conflicting assignment.
    assert kubelet.preferred("nvidia.com/gpu", everything, 2, must_include=["7"]) == ["7", "0"]


def test_a_borrower_gets_the_lend_device_of_the_standbys_gpu(
    kubelet: FakeKubelet, start_plugin: Any
) -> None:
    plugin = start_plugin("h100-0", lend=True)
    devices = wait_for(lambda: kubelet.devices("nvidia.com/gpu"), what="the device list")
    assert set(devices) == {str(i) for i in range(8)} | {f"{i}::lend" for i in range(8)}
    # The asleep standby's container holds "2"; the borrower was assigned GPU 2.
    borrower = bound_pod("train", "2")
    borrower["metadata"]["annotations"][names.BORROWS] = "default/web-0"
    plugin.pods.items = [bound_pod("web-0", "2", phase="Running"), borrower]
    free = sorted(d for d in devices if d != "2")
    [picked] = kubelet.preferred("nvidia.com/gpu", free, 1)
    assert picked == "2::lend"
    response = kubelet.allocate("nvidia.com/gpu", [picked])
    assert response.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == "2"
    # A pod that does not borrow, assigned the same GPU, is not given the lend device.
    plugin.pods.items = [bound_pod("web-0", "2", phase="Running"), bound_pod("rigid", "2")]
    assert kubelet.preferred("nvidia.com/gpu", free, 1) == ["0"]


def test_preferred_mig_device_on_the_assigned_gpu(kubelet: FakeKubelet, start_plugin: Any) -> None:
    plugin = start_plugin("a100-mig-0")
    resource = "nvidia.com/mig-1g.10gb"
    devices = wait_for(lambda: kubelet.devices(resource), what="the MIG device list")
    plugin.pods.items = [bound_pod("slice", "5", mig="1g.10gb@3")]
    [picked] = kubelet.preferred(resource, sorted(devices), 1)
    assert picked.startswith("5:")
    # A pod waiting for another profile does not steer this resource.
    plugin.pods.items = [bound_pod("other", "5", mig="3g.40gb@4")]
    assert kubelet.preferred(resource, sorted(devices), 1) == ["0:0"]


def test_health_file_marks_devices_and_their_slices(
    kubelet: FakeKubelet, start_plugin: Any, socket_dir: Path
) -> None:
    start_plugin("a100-mig-0")
    resource = "nvidia.com/mig-1g.10gb"
    wait_for(lambda: kubelet.devices(resource), what="the MIG device list")
    health = socket_dir / "health"
    health.write_text("# GPU 2 fell off the bus\n2\n0:1\n")

    def down() -> set[str]:
        return {d for d, h in kubelet.devices(resource).items() if h == "Unhealthy"}

    expected = {f"2:{i}" for i in range(7)} | {"0:1"}
    wait_for(lambda: down() == expected, what="GPU 2's slices and 0:1 unhealthy")
    health.write_text("")
    wait_for(lambda: not down(), what="every device healthy again")
    updates = kubelet.endpoints[resource].updates
    assert len(updates) == 3  # initial, down, up: no repeats of an unchanged list


def test_kubelet_restart_re_registers(kubelet: FakeKubelet, start_plugin: Any) -> None:
    start_plugin("h100-mig-0")
    wait_for(lambda: len(kubelet.endpoints) == 3, what="three profiles registered")
    first = list(kubelet.registrations)
    kubelet.restart()  # the socket folder is wiped, kubelet.sock served anew
    assert not kubelet.endpoints
    wait_for(lambda: len(kubelet.endpoints) == 3, what="the profiles registered again")
    assert len(kubelet.registrations) == 2 * len(first)
    resource = "nvidia.com/mig-3g.40gb"
    devices = wait_for(lambda: kubelet.devices(resource), what="a stream on the new connection")
    [container] = kubelet.allocate(resource, [sorted(devices)[0]]).container_responses
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == sorted(devices)[0]


def test_registration_waits_for_the_kubelet(socket_dir: Path, start_plugin: Any) -> None:
    folder = socket_dir / "later"
    plugin = start_plugin("t4-0", folder)
    wait_for(folder.exists, what="the plugin to start without a kubelet")
    assert not (folder / "gpufleet-gpu.sock").exists()  # nothing served before a kubelet asks
    kubelet = FakeKubelet(folder)
    try:
        kubelet.start()
        devices = wait_for(lambda: kubelet.devices("nvidia.com/gpu"), what="late registration")
        assert len(devices) == 4
        assert plugin.thread.is_alive()
    finally:
        kubelet.stop()


def test_streams_end_when_the_plugin_stops(kubelet: FakeKubelet, start_plugin: Any) -> None:
    plugin = start_plugin("l4-1")
    wait_for(lambda: kubelet.devices("nvidia.com/gpu"), what="the device list")
    endpoint = kubelet.endpoints["nvidia.com/gpu"]
    plugin.__exit__(None, None, None)
    assert endpoint.stream_ended.wait(5), "ListAndWatch still open after the plugin stopped"
    assert not (kubelet.folder / "gpufleet-gpu.sock").exists()
