"""The handlers' typed view of a custom resource: the spec validated once, the pod templates
kept as written, the pools in reconcile order, and a spec the model refuses marks the object
Failed (once) instead of being acted on."""

from __future__ import annotations

from typing import Any

from gpufleet.operator.objects import ServingJobObject, TrainingJobObject, parse_or_fail

TEMPLATE = {
    "metadata": {"labels": {"a": "b"}},
    "spec": {"containers": [{"name": "m", "image": "x", "tty": True}]},
}


def body(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"name": "j", "uid": "u", "generation": 3}
    return {"metadata": meta, "spec": spec, "status": status or {}}


def test_training_job_is_typed_and_keeps_its_template() -> None:
    job = TrainingJobObject.of(body({"replicas": 2, "gpusPerReplica": 4, "template": TEMPLATE}))
    assert (job.id.name, job.id.namespace, job.id.uid, job.id.generation) == (
        "j",
        "default",
        "u",
        3,
    )
    assert job.spec.gpus_per_replica == 4 and job.spec.priority == 0
    assert job.template == TEMPLATE


def test_serving_job_pools_in_reconcile_order() -> None:
    pool = {"gpusPerReplica": 1, "template": TEMPLATE}
    job = ServingJobObject.of(body({"decode": pool, "prefill": pool}))
    assert list(job.pools()) == ["prefill", "decode"]
    assert job.templates == {"prefill": TEMPLATE, "decode": TEMPLATE}


def test_a_refused_spec_marks_the_object_failed_once() -> None:
    written: list[dict[str, Any]] = []
    bad = body({"replicas": 0, "template": TEMPLATE})
    assert parse_or_fail(TrainingJobObject.of, bad, written.append) is None
    assert written == [{"phase": "Failed"}]
    failed = body({"replicas": 0, "template": TEMPLATE}, status={"phase": "Failed"})
    assert parse_or_fail(TrainingJobObject.of, failed, written.append) is None
    assert written == [{"phase": "Failed"}]


def test_a_valid_spec_is_parsed() -> None:
    written: list[dict[str, Any]] = []
    good = body({"replicas": 1, "gpusPerReplica": 1, "template": TEMPLATE})
    job = parse_or_fail(TrainingJobObject.of, good, written.append)
    assert job is not None and job.spec.replicas == 1 and written == []
