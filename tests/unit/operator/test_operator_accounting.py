"""GPU time and energy accrual of a TrainingJob from its pods (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.model.gpus import load_catalog
from gpufleet.model.power import capped_power_w
from gpufleet.operator.accounting import Usage, accrue, pod_draw

CATALOG = load_catalog()
T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


def pod(
    *,
    gpus: int = 0,
    mig: str | None = None,
    gpu_type: str | None = "A100-80GB",
    phase: str = "Running",
    started: datetime | None = None,
    cap: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    limits = {names.WHOLE_GPU_RESOURCE: str(gpus)} if gpus else {f"nvidia.com/mig-{mig}": "1"}
    annotations = {}
    if gpu_type is not None:
        annotations[names.ASSIGNED_TYPE] = gpu_type
    if cap is not None:
        annotations[names.POWER_CAP] = cap
    meta: dict[str, Any] = {"name": "w", "namespace": "ns", "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T12:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        status["startTime"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": meta,
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": status,
    }


def test_whole_gpus_charge_time_and_the_power_model() -> None:
    start = Usage(0.0, 0.0, T0)
    usage = accrue(start, [pod(gpus=4)], T0 + timedelta(seconds=10), CATALOG)
    watts = capped_power_w(CATALOG["A100-80GB"], None)
    assert usage.gpu_seconds == pytest.approx(40.0)
    assert usage.joules == pytest.approx(40.0 * watts)
    assert usage.at == T0 + timedelta(seconds=10)


def test_power_cap_lowers_the_energy_not_the_time() -> None:
    start = Usage(0.0, 0.0, T0)
    later = T0 + timedelta(seconds=10)
    free = accrue(start, [pod(gpus=1)], later, CATALOG)
    capped = accrue(start, [pod(gpus=1, cap="200")], later, CATALOG)
    assert capped.gpu_seconds == free.gpu_seconds
    assert capped.joules == pytest.approx(10 * 200.0)
    assert capped.joules < free.joules


def test_mig_slice_counts_its_compute_share() -> None:
    gpus, watts = pod_draw(pod(mig="3g.40gb", gpu_type="A100-80GB"), CATALOG)
    assert gpus == pytest.approx(3 / 7)
    assert watts == pytest.approx(3 / 7 * capped_power_w(CATALOG["A100-80GB"], None))


@pytest.mark.parametrize(
    "p",
    [pod(gpus=2, phase="Pending"), pod(gpus=2, phase="Succeeded"), pod(gpus=2, deleting=True)],
    ids=["pending", "finished", "terminating"],
)
def test_pods_not_running_charge_nothing(p: dict[str, Any]) -> None:
    assert pod_draw(p, CATALOG) == (0.0, 0.0)


def test_unknown_type_adds_time_but_no_energy() -> None:
    assert pod_draw(pod(gpus=2, gpu_type="Mystery-GPU"), CATALOG) == (2.0, 0.0)
    assert pod_draw(pod(gpus=2, gpu_type=None), CATALOG) == (2.0, 0.0)
    assert pod_draw(pod(mig="1g.10gb", gpu_type=None), CATALOG) == (0.0, 0.0)


def test_a_pod_is_never_charged_before_it_started() -> None:
    # The operator was down for an hour; the pod started 5 s before the pass.
    previous = Usage(100.0, 1000.0, T0)
    now = T0 + timedelta(hours=1)
    usage = accrue(previous, [pod(gpus=1, started=now - timedelta(seconds=5))], now, CATALOG)
    assert usage.gpu_seconds == pytest.approx(105.0)


def test_resume_from_status_and_totals_only_grow() -> None:
    status = {
        "gpuSeconds": 12.5,
        "estimatedEnergyJoules": 3000,
        "usageAccountedTime": "2026-12-02T12:00:00Z",
    }
    previous = Usage.from_status(status, T0 + timedelta(seconds=4))
    assert (previous.gpu_seconds, previous.joules, previous.at) == (12.5, 3000.0, T0)
    usage = accrue(previous, [pod(gpus=1)], T0 + timedelta(seconds=4), CATALOG)
    assert usage.gpu_seconds == pytest.approx(16.5)
    # A clock that steps back charges nothing and never moves the accounting time back.
    again = accrue(usage, [pod(gpus=1)], T0, CATALOG)
    assert (again.gpu_seconds, again.at) == (usage.gpu_seconds, usage.at)


def test_a_job_never_accounted_starts_now() -> None:
    fresh = Usage.from_status({}, T0)
    assert fresh == Usage(0.0, 0.0, T0)
