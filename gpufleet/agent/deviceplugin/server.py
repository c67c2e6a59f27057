"""The device plugin's gRPC side: one DevicePlugin server per resource, kept registered.

Protocol (kubelet device-plugin API v1beta1): each resource is served on its own Unix socket in
the kubelet's device-plugin folder and announced with `Registration.Register` on the kubelet's
socket there (`kubelet.sock`); the kubelet then dials the plugin back, asks for its options and
keeps a `ListAndWatch` stream open. A restarting kubelet wipes the folder and recreates its
socket, so the plugin watches both its own socket and the kubelet's (by inode and change time)
and serves and registers again when either changes. Registration that fails (no kubelet yet) is
retried on every tick.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from gpufleet.agent.deviceplugin.devices import FakeDevice, NodeGpus
from gpufleet.agent.deviceplugin.devnodes import container_allocation, ensure_device_nodes
from gpufleet.agent.deviceplugin.health import (
    HEALTHY,
    UNHEALTHY,
    DeviceHealth,
    read_health_file,
    unhealthy_devices,
)
from gpufleet.agent.deviceplugin.preferred import preferred_allocation, waiting_assignments
from gpufleet.agent.deviceplugin.v1beta1 import api_pb2 as api
from gpufleet.agent.deviceplugin.v1beta1 import api_pb2_grpc as api_grpc

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")

log = logging.getLogger("gpufleet.deviceplugin")


class PodSource(Protocol):
    """The pods bound to this node, as API objects (dicts); may raise when the API is down."""

    def pods(self) -> list[Mapping[str, Any]]: ...


class NoPods:
    """Used when the plugin has no API access: preferred allocation then packs."""

    def pods(self) -> list[Mapping[str, Any]]:
        return []


def endpoint_name(resource: str) -> str:
    """The socket file for a resource: nvidia.com/mig-1g.10gb -> gpufleet-mig-1g.10gb.sock."""
    return f"gpufleet-{resource.rsplit('/', 1)[-1]}.sock"


class ResourceServicer:
    """The DevicePlugin service for one resource's devices (grpc calls these by name)."""

    def __init__(
        self,
        resource: str,
        devices: Sequence[FakeDevice],
        health: DeviceHealth,
        device_dir: Path,
        pods: PodSource,
    ) -> None:
        self.resource = resource
        self.devices = list(devices)
        self._by_id = {d.id: d for d in self.devices}
        self._health = health
        self._device_dir = device_dir
        self._pods = pods

    def _device_list(self, unhealthy: frozenset[str]) -> api.ListAndWatchResponse:
        return api.ListAndWatchResponse(
            devices=[
                api.Device(ID=d.id, health=UNHEALTHY if d.id in unhealthy else HEALTHY)
                for d in self.devices
            ]
        )

    def GetDevicePluginOptions(
        self, request: api.Empty, context: grpc.ServicerContext
    ) -> api.DevicePluginOptions:
        return api.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(
        self, request: api.Empty, context: grpc.ServicerContext
    ) -> Iterator[api.ListAndWatchResponse]:
        version, unhealthy = self._health.current()
        last = self._device_list(unhealthy)
        yield last
        while context.is_active() and not self._health.closed:
            change = self._health.wait_change(version, timeout=0.5)
            if change is None:
                continue
            version, unhealthy = change
            current = self._device_list(unhealthy)
            if current != last:  # another resource's devices changed: nothing to say
                last = current
                yield current

    def GetPreferredAllocation(
        self, request: api.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api.PreferredAllocationResponse:
        try:
            assignments = waiting_assignments(self._pods.pods(), self.resource)
        except Exception as exc:  # the API being unreachable must not fail pod admission
            log.warning("cannot read this node's pods, packing instead: %s", exc)
            assignments = []
        responses = [
            api.ContainerPreferredAllocationResponse(
                deviceIDs=preferred_allocation(
                    self.devices,
                    req.available_deviceIDs,
                    req.must_include_deviceIDs,
                    req.allocation_size,
                    assignments,
                )
            )
            for req in request.container_requests
        ]
        return api.PreferredAllocationResponse(container_responses=responses)

    def Allocate(
        self, request: api.AllocateRequest, context: grpc.ServicerContext
    ) -> api.AllocateResponse:
        responses = []
        for req in request.container_requests:
            unknown = [i for i in req.devices_ids if i not in self._by_id]
            if unknown:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{self.resource}: no device with id {', '.join(unknown)}",
                )
            env, nodes = container_allocation(
                [self._by_id[i] for i in req.devices_ids], self._device_dir
            )
            responses.append(
                api.ContainerAllocateResponse(
                    envs=env,
                    devices=[
                        api.DeviceSpec(container_path=c, host_path=h, permissions="rw")
                        for c, h in nodes
                    ],
                )
            )
            log.info("%s: allocated %s", self.resource, ",".join(req.devices_ids))
        return api.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: api.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What tells one socket file from its re-creation: device, inode, change time."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


class ResourceServer:
    """One resource's gRPC server on its socket, and its registration with the kubelet."""

    def __init__(self, folder: Path, servicer: ResourceServicer) -> None:
        self.folder = folder
        self.servicer = servicer
        self.socket = folder / endpoint_name(servicer.resource)
        self._server: grpc.Server | None = None
        self._serving: tuple[int, int, int] | None = None

    def serving(self) -> bool:
        """True while our server runs and its socket file is the one it created."""
        return self._server is not None and _identity(self.socket) == self._serving

    def serve(self) -> None:
        self.stop()
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        # The generated grpc module is untyped; the servicer has the five methods it looks up.
        api_grpc.add_DevicePluginServicer_to_server(self.servicer, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        self._serving = _identity(self.socket)

    def register(self, timeout: float = 5.0) -> None:
        """Announce the resource on the kubelet's socket; raises grpc.RpcError when refused."""
        request = api.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket.name,
            resource_name=self.servicer.resource,
            options=api.DevicePluginOptions(get_preferred_allocation_available=True),
        )
        with grpc.insecure_channel(f"unix://{self.folder / KUBELET_SOCKET}") as channel:
            stub = api_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            stub.Register(request, timeout=timeout)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1.0).wait()
            self._server = None
            self._serving = None


@dataclass
class PluginSettings:
    """Where the plugin talks to the kubelet and keeps its fake devices."""

    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    device_dir: Path = Path("/var/run/gpufleet/devices")
    health_file: Path | None = None
    poll_interval_s: float = 1.0


class DevicePlugin:
    """Every resource of the node, served and kept registered across kubelet restarts."""

    def __init__(self, gpus: NodeGpus, settings: PluginSettings, pods: PodSource) -> None:
        self.gpus = gpus
        self.settings = settings
        self.health = DeviceHealth()
        self._devices = gpus.devices()
        self.servers = [
            ResourceServer(
                settings.plugin_dir,
                ResourceServicer(resource, devices, self.health, settings.device_dir, pods),
            )
            for resource, devices in sorted(gpus.by_resource().items())
        ]
        self._registered_with: tuple[int, int, int] | None = None
        self._wake = threading.Event()

    def reload_health(self) -> None:
        if self.settings.health_file is None:
            return
        listed = read_health_file(self.settings.health_file)
        if self.health.set_unhealthy(unhealthy_devices(listed, self._devices)):
            _, down = self.health.current()
            log.info("unhealthy devices: %s", ", ".join(sorted(down)) or "none")

    def step(self) -> None:
        """One supervision tick: health file, then serve and register wherever needed."""
        self.reload_health()
        kubelet = _identity(self.settings.plugin_dir / KUBELET_SOCKET)
        lost = [s for s in self.servers if not s.serving()]
        if kubelet is None or (kubelet == self._registered_with and not lost):
            return  # no kubelet to talk to, or registered with this one and still served
        try:
            for server in self.servers:
                if not server.serving() or kubelet != self._registered_with:
                    server.serve()
                server.register()
                log.info("registered %s on %s", server.servicer.resource, server.socket.name)
        except grpc.RpcError as exc:
            log.warning("registration with the kubelet failed, retrying: %s", exc.details())
            return
        self._registered_with = kubelet

    def wake(self) -> None:
        """Run the next tick now (SIGHUP: re-read the health file)."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Tick until `stop` is set, then stop every server."""
        self.settings.plugin_dir.mkdir(parents=True, exist_ok=True)
        ensure_device_nodes(self.settings.device_dir, len(self.gpus.layouts))
        try:
            while not stop.is_set():
                self.step()
                self._wake.wait(self.settings.poll_interval_s)
                self._wake.clear()
        finally:
            self.close()

    def close(self) -> None:
        self.health.close()
        for server in self.servers:
            server.stop()
            if server.socket.exists() and os.access(server.socket, os.W_OK):
                server.socket.unlink(missing_ok=True)
