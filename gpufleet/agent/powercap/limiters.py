"""Where a power cap goes: the GPU through NVML, or (fake GPUs) a record of it.

`NvmlLimiter` sets a GPU's power management limit with `nvmlDeviceSetPowerManagementLimit`
(milliwatts, needs root on the host), clamped to the range the board allows
(`nvmlDeviceGetPowerManagementLimitConstraints`); removing a cap restores the board's default
limit (`nvmlDeviceGetPowerManagementDefaultLimit`). NVML numbers GPUs as the NVIDIA device
plugin does, so a pod's assigned GPU index is NVML's. `RecordingLimiter` is the sandbox's: its
GPUs are fake, so the cap is only recorded (the agent reports it on the node either way).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

__all__ = ["NvmlLimiter", "PowerLimiter", "RecordingLimiter"]


class PowerLimiter(Protocol):
    def apply(self, gpu: int, watts: float | None) -> float | None:
        """Cap GPU `gpu` at `watts` (None: back to its default); the cap now in force."""
        ...


class RecordingLimiter:
    """Fake GPUs: every cap asked for is in force as asked."""

    def __init__(self) -> None:
        self.caps: dict[int, float] = {}

    def apply(self, gpu: int, watts: float | None) -> float | None:
        if watts is None:
            self.caps.pop(gpu, None)
        else:
            self.caps[gpu] = watts
        return watts


class NvmlLimiter:
    """Real GPUs through NVML (`nvidia-ml-py`); `nvml` is the module (tests pass a fake)."""

    def __init__(self, nvml: Any = None) -> None:
        self.nvml = nvml if nvml is not None else importlib.import_module("pynvml")
        self.nvml.nvmlInit()
        self.count = int(self.nvml.nvmlDeviceGetCount())

    def apply(self, gpu: int, watts: float | None) -> float | None:
        if not 0 <= gpu < self.count:
            raise ValueError(f"GPU {gpu} does not exist (NVML sees {self.count})")
        handle = self.nvml.nvmlDeviceGetHandleByIndex(gpu)
        if watts is None:
            default_mw = int(self.nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle))
            self.nvml.nvmlDeviceSetPowerManagementLimit(handle, default_mw)
            return None
        low_mw, high_mw = self.nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        milliwatts = min(max(round(watts * 1000), int(low_mw)), int(high_mw))
        self.nvml.nvmlDeviceSetPowerManagementLimit(handle, milliwatts)
        return milliwatts / 1000

    def close(self) -> None:
        self.nvml.nvmlShutdown()
