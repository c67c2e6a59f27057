"""The service a job received, as pods carry it (`model.contract.service`).

Aspects: the ended runs' GPU-seconds round-trip through the pod annotation, and an absent,
unreadable, negative or non-finite value reads as none; a running pod holds its whole GPUs or its
MIG slice's compute fraction, a pod not running, being deleted or on a slice of unknown size none;
the current run's service is each running pod's share times the seconds since its start, up to
now and never past it (a start after now counts nothing, nothing the pod says about its end is
read), and it grows with now alone; the tier's evictions round-trip through their annotation
(none written for none, an unreadable count reads as none); the current run has lasted since
the latest start among the running pods (pods not running or being deleted not counted, 0 when
none runs or a start is after now).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpufleet.model.contract import names
from gpufleet.model.contract.service import (
    attained_annotations,
    held_share,
    read_attained,
    read_tier_evictions,
    run_gpu_s,
    run_s,
    tier_evictions_annotations,
)
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.gpus import load_catalog

CATALOG = load_catalog()
T0 = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)


def pod(
    *,
    gpus: int = 0,
    mig: str | None = None,
    gpu_type: str = "A100-80GB",
    phase: str = "Running",
    started: datetime | None = T0,
    deleting: bool = False,
) -> dict[str, Any]:
    limits = {f"nvidia.com/mig-{mig}": "1"} if mig else {names.WHOLE_GPU_RESOURCE: str(gpus)}
    meta: dict[str, Any] = {"name": "p", "annotations": {names.ASSIGNED_TYPE: gpu_type}}
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        status["startTime"] = format_time(started)
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "m", "resources": {"limits": limits}}]},
        "status": status,
    }


@given(st.floats(min_value=0.1, max_value=1e9))
@example(0.75)
def test_the_ended_runs_service_round_trips(gpu_s: float) -> None:
    # One decimal is kept: off by at most half a tenth (plus the float's own rounding of
    # values such as 0.75, which is written "0.8").
    assert read_attained(attained_annotations(gpu_s)) == pytest.approx(gpu_s, abs=0.05 + 1e-6)


@pytest.mark.parametrize(
    "raw",
    [None, "", "lots", "-5", "nan", "inf", "0"],
    ids=["absent", "empty", "word", "negative", "nan", "inf", "zero"],
)
def test_a_missing_or_unreadable_value_is_no_service(raw: str | None) -> None:
    annotations = {} if raw is None else {names.ATTAINED: raw}
    assert read_attained(annotations) == 0.0


def test_no_service_writes_no_annotation() -> None:
    assert attained_annotations(0.0) == {}


@pytest.mark.parametrize(
    ("p", "share"),
    [
        pytest.param(pod(gpus=4), 4.0, id="whole-gpus"),
        pytest.param(pod(mig="3g.40gb"), 3 / 7, id="mig-compute-fraction"),
        pytest.param(pod(mig="7g.80gb"), 1.0, id="mig-whole-gpu"),
        pytest.param(pod(gpus=4, phase="Pending", started=None), 0.0, id="pending"),
        pytest.param(pod(gpus=4, phase="Succeeded"), 0.0, id="finished"),
        pytest.param(pod(gpus=4, deleting=True), 0.0, id="being-deleted"),
        pytest.param(pod(mig="3g.40gb", gpu_type="B300"), 0.0, id="slice-of-unknown-type"),
    ],
)
def test_a_pod_holds_its_share_only_while_it_runs(p: dict[str, Any], share: float) -> None:
    assert held_share(p, CATALOG) == pytest.approx(share)


def test_the_current_run_is_each_running_pods_share_times_its_run_time() -> None:
    now = T0 + timedelta(seconds=100)
    pods = [
        pod(gpus=2),  # 2 x 100
        pod(mig="3g.40gb", started=T0 + timedelta(seconds=30)),  # 3/7 x 70
        pod(gpus=8, phase="Pending", started=None),  # not started: nothing
        pod(gpus=8, deleting=True),  # being deleted: its run is over
    ]
    assert run_gpu_s(pods, CATALOG, now) == pytest.approx(200 + 3 / 7 * 70)


def test_the_current_run_never_reads_the_future() -> None:
    # A start after now (clock skew) counts nothing, not a negative service.
    assert run_gpu_s([pod(gpus=4, started=T0 + timedelta(seconds=60))], CATALOG, T0) == 0.0
    # What a pod says about its end (a container's finishedAt) is not read: only now is.
    ended = pod(gpus=4)
    ended["status"]["containerStatuses"] = [
        {"state": {"terminated": {"finishedAt": format_time(T0 + timedelta(hours=5))}}}
    ]
    now = T0 + timedelta(seconds=10)
    assert run_gpu_s([ended], CATALOG, now) == pytest.approx(40.0)


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=10**6))
def test_the_current_run_grows_with_now_alone(a: int, b: int) -> None:
    pods = [pod(gpus=3)]
    early, late = sorted((a, b))
    at = [run_gpu_s(pods, CATALOG, T0 + timedelta(seconds=s)) for s in (early, late)]
    assert at[0] <= at[1]
    assert at[1] == pytest.approx(3.0 * late)


@pytest.mark.parametrize("count", [1, 3, 12])
def test_the_tiers_evictions_round_trip(count: int) -> None:
    assert read_tier_evictions(tier_evictions_annotations(count)) == count


@pytest.mark.parametrize("raw", [None, "", "two", "-1", "1.5", "\u00b2"])
def test_no_or_an_unreadable_count_is_no_tier_eviction(raw: str | None) -> None:
    assert tier_evictions_annotations(0) == {}
    annotations = {} if raw is None else {names.TIER_EVICTIONS: raw}
    assert read_tier_evictions(annotations) == 0


def test_the_current_run_lasts_since_the_latest_running_start() -> None:
    now = T0 + timedelta(seconds=100)
    later = T0 + timedelta(seconds=30)
    running = [pod(gpus=1), pod(gpus=1, started=later)]
    assert run_s(running, now) == pytest.approx(70.0)
    # Pods not running, being deleted or not started do not set it.
    others = [pod(gpus=1, phase="Pending", started=None), pod(gpus=1, deleting=True, started=now)]
    assert run_s([*running, *others], now) == pytest.approx(70.0)
    # A running pod that says no start is skipped (a move's run time waits for it instead:
    # scheduler/progress.py).
    assert run_s([*running, pod(gpus=1, started=None)], now) == pytest.approx(70.0)
    assert run_s(others, now) == 0.0
    assert run_s([pod(gpus=1, started=now + timedelta(seconds=5))], now) == 0.0
