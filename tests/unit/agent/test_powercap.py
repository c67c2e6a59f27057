"""The power-cap node agent's parts: which cap each GPU should have (MIG slices sharing a GPU
get the highest of their caps, none if one is uncapped; finished and unassigned pods hold
nothing), the NVML limiter (milliwatts clamped to the board's range, a removed cap restores the
default limit, an unknown GPU is refused; NVML itself is faked, this is its adapter's test), and
the agent's reconcile (applies and reports once, removes caps no pod needs any more, including
those an earlier run recorded, retries a cap the limiter refused)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.agent.powercap.desired import desired_caps
from gpufleet.agent.powercap.limiters import NvmlLimiter, RecordingLimiter
from gpufleet.agent.powercap.node_agent import NodeAgent
from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import Assignment
from gpufleet.model.contract.power import applied_caps, format_applied_caps
from gpufleet.model.mig import MigPlacement


def pod(
    gpus: tuple[int, ...], cap: float | None, phase: str = "Running", mig: str | None = None
) -> dict[str, Any]:
    instance = None if mig is None else MigPlacement(int(mig.split("@")[1]), mig.split("@")[0])
    annotations = Assignment(gpus, "A100-80GB", instance, cap).annotations()
    return {"metadata": {"annotations": annotations}, "status": {"phase": phase}}


def test_each_gpu_gets_its_pods_cap() -> None:
    pods = [pod((0, 1), 250.0), pod((2,), None), pod((3,), 300.0, phase="Succeeded")]
    assert desired_caps(pods) == {0: 250.0, 1: 250.0}


def test_pods_sharing_a_gpu_get_the_highest_cap_and_none_if_one_is_uncapped() -> None:
    shared = [pod((0,), 200.0, mig="1g.10gb@0"), pod((0,), 260.0, mig="1g.10gb@1")]
    assert desired_caps(shared) == {0: 260.0}
    assert desired_caps([*shared, pod((0,), None, mig="3g.40gb@4")]) == {}


def test_pods_without_an_assignment_hold_nothing() -> None:
    assert desired_caps([{"metadata": {"annotations": {names.POWER_CAP: "200"}}}]) == {}


class FakeNvml:
    """The few NVML calls the limiter makes, on boards limited to 100-400 W, default 350 W."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.limits_mw: dict[int, int] = {}
        self.initialised = False

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: int) -> tuple[int, int]:
        return 100_000, 400_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: int) -> int:
        return 350_000

    def nvmlDeviceSetPowerManagementLimit(self, handle: int, milliwatts: int) -> None:
        self.limits_mw[handle] = milliwatts


def test_nvml_limiter_clamps_to_the_board_and_restores_the_default() -> None:
    nvml = FakeNvml()
    limiter = NvmlLimiter(nvml)
    assert nvml.initialised
    assert limiter.apply(0, 250.4) == pytest.approx(250.4)
    assert nvml.limits_mw[0] == 250_400
    assert limiter.apply(1, 50.0) == pytest.approx(100.0)  # the board's minimum
    assert limiter.apply(0, None) is None
    assert nvml.limits_mw[0] == 350_000
    with pytest.raises(ValueError, match="GPU 2 does not exist"):
        limiter.apply(2, 200.0)
    limiter.close()
    assert not nvml.initialised


class FakeApi:
    """read_node and patch_node of one node's annotations."""

    def __init__(self, annotations: dict[str, str] | None = None) -> None:
        self.annotations = dict(annotations or {})
        self.patches = 0

    def read_node(self, name: str) -> Any:
        return SimpleNamespace(metadata=SimpleNamespace(annotations=dict(self.annotations)))

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.patches += 1
        for k, v in body["metadata"]["annotations"].items():
            if v is None:
                self.annotations.pop(k, None)
            else:
                self.annotations[k] = v


def test_agent_applies_reports_once_and_removes_caps_no_pod_needs() -> None:
    api, limiter = FakeApi(), RecordingLimiter()
    agent = NodeAgent(api, "n", limiter)  # type: ignore[arg-type]
    agent.load_record()
    agent.reconcile([pod((0, 1), 250.0)])
    assert limiter.caps == {0: 250.0, 1: 250.0}
    assert applied_caps(api.annotations) == {0: 250.0, 1: 250.0}
    agent.reconcile([pod((0, 1), 250.0)])
    assert api.patches == 1  # nothing changed: no write
    agent.reconcile([pod((0, 1), 250.0, phase="Succeeded")])
    assert limiter.caps == {}
    assert names.APPLIED_POWER_CAPS not in api.annotations


def test_restarted_agent_removes_the_caps_its_last_run_recorded() -> None:
    api = FakeApi({names.APPLIED_POWER_CAPS: format_applied_caps({3: 200.0})})
    limiter = RecordingLimiter()
    limiter.caps = {3: 200.0}  # still in force on the board
    agent = NodeAgent(api, "n", limiter)  # type: ignore[arg-type]
    agent.load_record()
    agent.reconcile([])
    assert limiter.caps == {}
    assert applied_caps(api.annotations) == {}


def test_a_refused_cap_is_retried_on_the_next_change() -> None:
    class Flaky(RecordingLimiter):
        fail = True

        def apply(self, gpu: int, watts: float | None) -> float | None:
            if self.fail:
                raise RuntimeError("NVML_ERROR_NO_PERMISSION")
            return super().apply(gpu, watts)

    api, limiter = FakeApi(), Flaky()
    agent = NodeAgent(api, "n", limiter)  # type: ignore[arg-type]
    agent.reconcile([pod((0,), 250.0)])
    assert limiter.caps == {} and api.patches == 0
    limiter.fail = False
    agent.reconcile([pod((0,), 250.0)])
    assert limiter.caps == {0: 250.0}
    assert applied_caps(api.annotations) == {0: 250.0}
