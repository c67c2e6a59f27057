"""The kubelet's side of the device-plugin protocol, for tests (not part of the product).

Like the kubelet's device manager it serves `Registration` on `kubelet.sock` in the plugin
folder, validates each request (API version, extended resource name, endpoint in the folder),
then dials the plugin's endpoint, asks for its options and keeps a `ListAndWatch` stream open,
recording every device list it receives. `restart()` does what a restarting kubelet does to the
folder: stops, removes every socket in it and serves a new `kubelet.sock`.
"""

from __future__ import annotations

import re
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpufleet.agent.deviceplugin.v1beta1 import api_pb2 as api
from gpufleet.agent.deviceplugin.v1beta1 import api_pb2_grpc as api_grpc

# The kubelet accepts fully qualified extended resource names outside kubernetes.io/.
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass
class Endpoint:
    """What the fake kubelet knows about one registered resource."""

    request: api.RegisterRequest
    options: api.DevicePluginOptions
    channel: grpc.Channel
    stub: Any  # DevicePluginStub
    updates: list[dict[str, str]] = field(default_factory=list)  # device id -> health
    stream_ended: threading.Event = field(default_factory=threading.Event)


class FakeKubelet:
    """A registration server plus device-manager client over real gRPC on Unix sockets."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.registrations: list[api.RegisterRequest] = []
        self.endpoints: dict[str, Endpoint] = {}
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None

    # Registration service -------------------------------------------------------------------
    def Register(self, request: api.RegisterRequest, context: grpc.ServicerContext) -> api.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.UNKNOWN, f"unsupported version {request.version!r}")
        if not _RESOURCE.match(request.resource_name):
            context.abort(grpc.StatusCode.UNKNOWN, f"invalid resource {request.resource_name!r}")
        socket = self.folder / request.endpoint
        if "/" in request.endpoint or not socket.exists():
            context.abort(grpc.StatusCode.UNKNOWN, f"no plugin socket {request.endpoint!r}")
        channel = grpc.insecure_channel(f"unix://{socket}")
        stub = api_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(api.Empty(), timeout=5)
        endpoint = Endpoint(request, options, channel, stub)
        with self._lock:
            self.registrations.append(request)
            old = self.endpoints.get(request.resource_name)
            self.endpoints[request.resource_name] = endpoint
        if old is not None:
            old.channel.close()
        threading.Thread(target=self._watch, args=(endpoint,), daemon=True).start()
        return api.Empty()

    def _watch(self, endpoint: Endpoint) -> None:
        try:
            for response in endpoint.stub.ListAndWatch(api.Empty()):
                with self._lock:
                    endpoint.updates.append({d.ID: d.health for d in response.devices})
        except grpc.RpcError:
            pass  # plugin gone or channel closed, as the kubelet sees a stream end
        finally:
            endpoint.stream_ended.set()

    # Lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.folder / 'kubelet.sock'}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        with self._lock:
            endpoints = list(self.endpoints.values())
            self.endpoints.clear()
        for endpoint in endpoints:
            endpoint.channel.close()

    def restart(self) -> None:
        """Stop, wipe every socket in the folder (the kubelet's own too), serve anew."""
        self.stop()
        for path in self.folder.iterdir():
            path.unlink()
        self.start()

    # Device-manager calls ---------------------------------------------------------------------
    def devices(self, resource: str) -> dict[str, str]:
        """The last device list the resource's stream delivered (id -> health)."""
        with self._lock:
            endpoint = self.endpoints.get(resource)
            return dict(endpoint.updates[-1]) if endpoint and endpoint.updates else {}

    def stub(self, resource: str) -> Any:
        with self._lock:
            return self.endpoints[resource].stub

    def allocate(self, resource: str, *containers: list[str]) -> api.AllocateResponse:
        request = api.AllocateRequest(
            container_requests=[api.ContainerAllocateRequest(devices_ids=c) for c in containers]
        )
        return self.stub(resource).Allocate(request, timeout=5)

    def preferred(
        self, resource: str, available: list[str], size: int, must_include: list[str] = ()
    ) -> list[str]:
        request = api.PreferredAllocationRequest(
            container_requests=[
                api.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        response = self.stub(resource).GetPreferredAllocation(request, timeout=5)
        return list(response.container_responses[0].deviceIDs)
