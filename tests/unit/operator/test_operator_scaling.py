"""An elastic TrainingJob's reported throughput and scaling curve in the operator.

Aspects: the annotation's reports are kept per replica count in the status (latest wins, earlier
counts kept across passes); the curve is the spec's (or linear) refined from them, in
status.scaling and on every live worker pod (annotation patches only where it differs, new pods
created with it); a job without a curve or reports has no curve; an unreadable report sets
ThroughputReported False with one Warning (not repeated by the next pass) and changes nothing;
fixed-size jobs are untouched; the contract's parser and lenient pod reader.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_operator_reconcile import NOW, cond, job, plan, pod

from gpufleet.model.contract import names
from gpufleet.model.contract.scaling import parse_throughput, read_scaling, scaling_annotations
from gpufleet.operator import children
from gpufleet.operator.objects import TrainingJobObject

CURVE = [1.0, 1.9, 2.6, 3.1]


def elastic(throughput: str | None = None, status: dict[str, Any] | None = None,
            scaling: list[float] | None = CURVE) -> dict[str, Any]:  # fmt: skip
    bounds: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 4}
    if scaling is not None:
        bounds["scaling"] = scaling
    manifest = job(status, elastic=bounds, replicas=2)
    if throughput is not None:
        manifest["metadata"]["annotations"] = {names.THROUGHPUT: throughput}
    return manifest


def running(*ranks: int, curve: str | None = None) -> list[dict[str, Any]]:
    pods = [pod(r, "Running", f"n{r}") for r in ranks]
    for p in pods:
        if curve is not None:
            p["metadata"]["annotations"][names.SCALING] = curve
    return pods


def test_the_spec_curve_goes_to_the_status_and_the_pods() -> None:
    out = plan(elastic(), running(0, 1), NOW)
    assert out.status["scaling"] == CURVE and "throughput" not in out.status
    assert out.annotate == {
        "j-worker-0": {names.SCALING: "1,1.9,2.6,3.1"},
        "j-worker-1": {names.SCALING: "1,1.9,2.6,3.1"},
    }
    # Pods that carry it already are not patched again.
    assert plan(elastic(), running(0, 1, curve="1,1.9,2.6,3.1"), NOW).annotate == {}


def test_reports_refine_the_curve_and_are_kept_per_count() -> None:
    # 100 at one replica, 150 at two: half the gain the spec predicted (1.9).
    out = plan(elastic("1=100,2=145"), running(0, 1), NOW)
    assert out.status["throughput"] == [
        {"replicas": 1, "value": 100.0},
        {"replicas": 2, "value": 145.0},
    ]
    assert out.status["scaling"][:2] == pytest.approx([1.0, 1.45])
    assert out.status["scaling"][1] < CURVE[1]
    assert cond(out.status, "ThroughputReported")["reason"] == "ThroughputRecorded"
    # The job now reports at three replicas: earlier counts stay, the curve follows.
    later = plan(elastic("3=180", out.status), running(0, 1, 2), NOW)
    assert [e["replicas"] for e in later.status["throughput"]] == [1, 2, 3]
    assert later.status["scaling"][2] == pytest.approx(1.8)
    # A newer report at a count replaces the older one.
    again = plan(elastic("2=190", later.status), running(0, 1), NOW)
    assert {"replicas": 2, "value": 190.0} in again.status["throughput"]


def test_without_a_curve_reports_refine_the_linear_one() -> None:
    assert "scaling" not in plan(elastic(scaling=None), running(0, 1), NOW).status
    out = plan(elastic("1=10,2=15", scaling=None), running(0, 1), NOW)
    assert out.status["scaling"] == pytest.approx([1.0, 1.5, 2.25, 3.0])


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        pytest.param("150", "expected replicas=throughput pairs", id="bare-number"),
        pytest.param("9=150", "outside 1..4", id="count-too-large"),
        pytest.param("2=fast", "must be a positive number", id="not-a-number"),
        pytest.param("2=-3", "must be a positive number", id="negative"),
        pytest.param("2=1,2=3", "given twice", id="twice"),
        pytest.param("²=1", "expected replicas=throughput pairs", id="not-an-ascii-count"),
        pytest.param("x" * 10_000, "got 'xxxxx", id="long"),
    ],
)
def test_an_unreadable_report_is_shown_once_and_changes_nothing(raw: str, says: str) -> None:
    before = plan(elastic("1=100,2=150"), running(0, 1), NOW).status
    out = plan(elastic(raw, before), running(0, 1), NOW)
    reported = cond(out.status, "ThroughputReported")
    assert reported["status"] == "False" and reported["reason"] == "ThroughputUnreadable"
    assert says in reported["message"] and names.THROUGHPUT in reported["message"]
    assert len(reported["message"]) < 200
    assert out.status["throughput"] == before["throughput"]
    assert out.status["scaling"] == before["scaling"]
    warnings = [e for e in out.events if e[0] == "Warning"]
    assert warnings == [("Warning", "ThroughputUnreadable", reported["message"])]
    assert plan(elastic(raw, out.status), running(0, 1), NOW).events == []


def test_a_long_report_is_quoted_short() -> None:
    raw = ",".join(f"{r}=100" for r in (1, 2, 3, 4)) + " " * 500
    message = cond(plan(elastic(raw), running(0, 1), NOW).status, "ThroughputReported")["message"]
    assert message.startswith("recorded 1=100,2=100") and len(message) < 300


def test_a_finished_job_keeps_its_curve_but_patches_no_pod() -> None:
    done = plan(elastic(status={"phase": "Succeeded"}), running(0, 1), NOW)
    assert done.status["scaling"] == CURVE and done.annotate == {}


def test_a_fixed_size_job_has_no_curve() -> None:
    manifest = job()
    manifest["metadata"]["annotations"] = {names.THROUGHPUT: "2=100"}
    out = plan(manifest, running(0, 1), NOW)
    assert "scaling" not in out.status and "throughput" not in out.status
    assert out.annotate == {}


def test_new_worker_pods_carry_the_refined_curve() -> None:
    status = plan(elastic("1=100,2=145"), running(0, 1), NOW).status
    obj = TrainingJobObject.of(elastic(status=status))
    annotations = children.worker_pod(obj, 3)["metadata"]["annotations"]
    assert read_scaling(annotations) == pytest.approx(tuple(status["scaling"]))


def test_parse_throughput_reads_pairs() -> None:
    assert parse_throughput(" 2=150.5, 4=260 ", 4) == {2: 150.5, 4: 260.0}


@pytest.mark.parametrize("raw", ["", "x", "2,1.9", "0,1.9", "1,nan", "1,-1", "1,inf"], ids=repr)
def test_an_unreadable_curve_on_a_pod_reads_as_none(raw: str) -> None:
    assert read_scaling({names.SCALING: raw}) == ()


def test_the_curve_round_trips_through_the_pod_annotation() -> None:
    assert read_scaling(scaling_annotations((1.0, 1.91234567, 2.5))) == (1.0, 1.9123, 2.5)
    assert scaling_annotations(()) == {}
