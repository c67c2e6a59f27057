"""The setting `operator.pod_tolerations` in the pods the operator renders: TrainingJob worker
pods and ServingJob Deployment templates carry the default (the GPU Operator's taint), a custom
list instead of it, or none with an empty list, always after the template's own tolerations and
without repeating one the template already has; a changed list changes a serving template (its
Deployment is updated, so the replicas roll)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.operator import children, serving_children
from gpufleet.operator.objects import ServingJobObject, TrainingJobObject
from gpufleet.settings import load

GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEDICATED = {"key": "example.com/accelerator", "operator": "Equal", "value": "a100"}
OWN = {"key": "team", "operator": "Equal", "value": "nlp", "effect": "NoSchedule"}


def tolerations(environ_value: str | None) -> tuple[dict[str, Any], ...]:
    environ = {} if environ_value is None else {"GPUFLEET_OPERATOR__POD_TOLERATIONS": environ_value}
    return load(environ=environ).operator.tolerations()


def template(own: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if own:
        spec["tolerations"] = own
    return {"spec": spec}


def worker(own: list[dict[str, Any]], added: tuple[dict[str, Any], ...]) -> Any:
    manifest = {
        "metadata": {"name": "bert", "namespace": "ml", "uid": "u-1"},
        "spec": {"replicas": 2, "gpusPerReplica": 1, "template": template(own)},
    }
    pod = children.worker_pod(TrainingJobObject.of(manifest), 1, added)
    return pod["spec"].get("tolerations")


def serving_template(own: list[dict[str, Any]], added: tuple[dict[str, Any], ...]) -> Any:
    manifest = {
        "metadata": {"name": "llm", "namespace": "serve", "uid": "u-2", "generation": 1},
        "spec": {"server": {"gpusPerReplica": 1, "template": template(own)}},
    }
    deployment = serving_children.deployment(ServingJobObject.of(manifest), "server", 1, added)
    return deployment["spec"]["template"]["spec"].get("tolerations")


CASES = [
    pytest.param(None, [], [GPU], id="default"),
    pytest.param(
        '[{"key": "example.com/accelerator", "value": "a100"}]', [], [DEDICATED], id="custom"
    ),
    pytest.param("[]", [], None, id="none"),
    pytest.param(None, [OWN], [OWN, GPU], id="default-after-the-templates"),
    pytest.param("[]", [OWN], [OWN], id="none-keeps-the-templates"),
    pytest.param(None, [GPU, OWN], [GPU, OWN], id="not-repeated"),
]


@pytest.mark.parametrize(("setting", "own", "expected"), CASES)
def test_worker_pods_carry_the_setting(
    setting: str | None, own: list[dict[str, Any]], expected: list[dict[str, Any]] | None
) -> None:
    assert worker(own, tolerations(setting)) == expected


@pytest.mark.parametrize(("setting", "own", "expected"), CASES)
def test_serving_templates_carry_the_setting(
    setting: str | None, own: list[dict[str, Any]], expected: list[dict[str, Any]] | None
) -> None:
    assert serving_template(own, tolerations(setting)) == expected


def test_a_changed_setting_updates_the_serving_deployment() -> None:
    manifest = {
        "metadata": {"name": "llm", "namespace": "serve", "uid": "u-2", "generation": 1},
        "spec": {"server": {"gpusPerReplica": 1, "template": template([])}},
    }
    job = ServingJobObject.of(manifest)
    before = serving_children.deployment(job, "server", 1, tolerations(None))
    after = serving_children.deployment(job, "server", 1, tolerations("[]"))
    assert serving_children.needs_update(before, after)
    assert not serving_children.needs_update(before, before)
