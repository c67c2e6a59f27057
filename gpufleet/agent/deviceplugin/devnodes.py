"""Fake NVIDIA device nodes, and what Allocate tells the kubelet to put into a container.

A container runtime refuses a device spec whose host path is not a device, so the plugin makes
character devices with the numbers of /dev/null (1, 3) under its device folder: `nvidia<N>` per
GPU plus `nvidiactl` and `nvidia-uvm`, the nodes a CUDA container expects. Containers see them at
the real paths (`/dev/nvidia0`, ...), and `NVIDIA_VISIBLE_DEVICES` lists the allocated device ids
as the NVIDIA device plugin's `index` strategy does.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from gpufleet.agent.deviceplugin.devices import FakeDevice

CONTROL_NODES = ("nvidiactl", "nvidia-uvm")
_NULL_DEVICE = os.makedev(1, 3)


def node_names(gpu_count: int) -> list[str]:
    return [*CONTROL_NODES, *(f"nvidia{i}" for i in range(gpu_count))]


def ensure_device_nodes(folder: Path, gpu_count: int) -> None:
    """Create the fake device nodes (needs CAP_MKNOD, as the NVIDIA plugin's pod has)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in node_names(gpu_count):
        path = folder / name
        if path.exists() and stat.S_ISCHR(path.stat().st_mode):
            continue
        path.unlink(missing_ok=True)
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, _NULL_DEVICE)
        except PermissionError as exc:
            raise RuntimeError(
                f"cannot create the fake device node {path}: the plugin needs CAP_MKNOD "
                "(run it privileged, as a device plugin runs)"
            ) from exc


def container_allocation(
    devices: Sequence[FakeDevice], folder: Path
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Environment and (container path, host path) device nodes for one container's devices."""
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(dict.fromkeys(d.visible for d in devices))}
    gpus = sorted({d.gpu for d in devices})
    nodes = [*CONTROL_NODES, *(f"nvidia{g}" for g in gpus)]
    return env, [(f"/dev/{name}", str(folder / name)) for name in nodes]
