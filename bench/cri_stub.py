"""A container runtime stub: just enough of the CRI for a real kubelet to start and register a node.

The kubelet needs a CRI runtime (RuntimeService and ImageService over gRPC) before it registers
its node and starts its device manager. This stub reports a ready runtime and network, the
cgroupfs driver, no images, no sandboxes and no containers; everything else answers
UNIMPLEMENTED (so a pod admitted to the node gets its devices allocated, then fails to start its
sandbox, which is all the device-plugin benchmark needs). The Python stubs are generated at run
time from the CRI proto in the Go module cache (`k8s.io/cri-api`), so nothing of it is vendored.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

CRI_API_VERSION = "v0.36.3"


def cri_modules(work: Path) -> tuple[ModuleType, ModuleType]:
    """Generate and import the CRI v1 stubs (api_pb2, api_pb2_grpc) under `work`."""
    with tempfile.TemporaryDirectory() as mod:
        (Path(mod) / "go.mod").write_text("module local.test/criapi\n\ngo 1.26.0\n")
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"k8s.io/cri-api@{CRI_API_VERSION}"],
            cwd=mod,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    source = Path(json.loads(out)["Dir"]) / "pkg" / "apis" / "runtime" / "v1" / "api.proto"
    package = work / "criapi"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    shutil.copyfile(source, package / "api.proto")
    # In a process of its own: grpc_tools' compiler crashes one that has loaded OR-Tools.
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{work}", f"--python_out={work}",
         f"--grpc_python_out={work}", "criapi/api.proto"],
        check=True,
    )  # fmt: skip
    sys.path.insert(0, str(work))
    return importlib.import_module("criapi.api_pb2"), importlib.import_module("criapi.api_pb2_grpc")


def serve(socket: Path, work: Path) -> grpc.Server:
    """Start the stub on a Unix socket; stop it with `.stop(None)`."""
    cri, cri_grpc = cri_modules(work)

    def image_fs(*_: Any) -> Any:
        usage = cri.FilesystemUsage(
            timestamp=time.time_ns(),
            fs_id=cri.FilesystemIdentifier(mountpoint=str(work)),
            used_bytes=cri.UInt64Value(value=0),
            inodes_used=cri.UInt64Value(value=0),
        )
        return cri.ImageFsInfoResponse(image_filesystems=[usage], container_filesystems=[usage])

    runtime = type(
        "Runtime",
        (cri_grpc.RuntimeServiceServicer,),
        {
            "Version": lambda self, req, ctx: cri.VersionResponse(
                version="0.1.0",
                runtime_name="gpufleet-cri-stub",
                runtime_version="0.1.0",
                runtime_api_version="v1",
            ),
            "Status": lambda self, req, ctx: cri.StatusResponse(
                status=cri.RuntimeStatus(
                    conditions=[
                        cri.RuntimeCondition(type="RuntimeReady", status=True),
                        cri.RuntimeCondition(type="NetworkReady", status=True),
                    ]
                )
            ),
            "RuntimeConfig": lambda self, req, ctx: cri.RuntimeConfigResponse(
                linux=cri.LinuxRuntimeConfiguration(cgroup_driver=cri.CGROUPFS)
            ),
            "ListPodSandbox": lambda self, req, ctx: cri.ListPodSandboxResponse(),
            "ListContainers": lambda self, req, ctx: cri.ListContainersResponse(),
            "ListPodSandboxStats": lambda self, req, ctx: cri.ListPodSandboxStatsResponse(),
            "ListContainerStats": lambda self, req, ctx: cri.ListContainerStatsResponse(),
            "UpdateRuntimeConfig": lambda self, req, ctx: cri.UpdateRuntimeConfigResponse(),
            "ImageFsInfo": image_fs,
        },
    )
    images = type(
        "Images",
        (cri_grpc.ImageServiceServicer,),
        {
            "ListImages": lambda self, req, ctx: cri.ListImagesResponse(),
            "ImageStatus": lambda self, req, ctx: cri.ImageStatusResponse(),
            "ImageFsInfo": image_fs,
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    cri_grpc.add_RuntimeServiceServicer_to_server(runtime(), server)
    cri_grpc.add_ImageServiceServicer_to_server(images(), server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server
