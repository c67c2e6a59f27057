"""The TrainingJob and ServingJob pydantic models.

Aspects under test:
- every manifest in examples/ parses and dumps back to itself, and the examples cover what they
  are meant to demonstrate, each with a leading comment;
- camelCase on the wire, snake_case in Python, unknown fields refused;
- defaults match what the API server fills in from the generated schema;
- the pydantic validators enforce the same cross-field rules as the CEL rules (a table);
- a status written by gpufleet parses, and the stable enums hold the documented values.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from gpufleet.model.crd_common import CRDModel
from gpufleet.model.gpuqueue import GPUQueue
from gpufleet.model.mig_profiles import MIG_PROFILE_NAMES
from gpufleet.model.servingjob import ServingJob, ServingJobSpec, ServingJobStatus
from gpufleet.model.trainingjob import (
    EnergyPreference,
    Topology,
    TrainingJob,
    TrainingJobPhase,
    TrainingJobSpec,
    TrainingJobStatus,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
# The examples with pod templates (the GPUQueue examples have none).
JOB_EXAMPLES = [p for p in EXAMPLES if not p.stem.startswith("gpuqueue-")]
MODELS: dict[str, type[TrainingJob] | type[ServingJob] | type[GPUQueue]] = {
    "TrainingJob": TrainingJob,
    "ServingJob": ServingJob,
    "GPUQueue": GPUQueue,
}


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc


def _parse(doc: dict[str, Any]) -> TrainingJob | ServingJob | GPUQueue:
    return MODELS[doc["kind"]].model_validate(doc)


# -- examples ---------------------------------------------------------------------------------


def test_there_are_examples_of_both_kinds() -> None:
    kinds = [_load(p)["kind"] for p in EXAMPLES]
    assert kinds.count("TrainingJob") >= 5
    assert kinds.count("ServingJob") >= 2
    assert kinds.count("GPUQueue") >= 2  # the queues the example jobs name


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_round_trips(path: Path) -> None:
    doc = _load(path)
    model = _parse(doc)
    assert model.model_dump(by_alias=True, exclude_unset=True, mode="json") == doc
    # And through JSON text, as the operator would read it from the API server.
    again = type(model).model_validate_json(model.model_dump_json(by_alias=True))
    assert again == model


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_starts_with_a_comment_and_is_namespace_free(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ") and len(lines[0]) > 20
    doc = _load(path)
    assert "namespace" not in doc["metadata"]  # applied into whatever namespace the user picks
    assert doc["apiVersion"] == "gpufleet.io/v1alpha1"


def _spec_of(stem: str) -> Any:
    return _parse(_load(REPO_ROOT / "examples" / f"{stem}.yaml")).spec


def test_examples_demonstrate_what_they_say() -> None:
    gang = _spec_of("trainingjob-gang-h100")
    assert (gang.replicas, gang.gpus_per_replica, gang.gpu_types[0].name) == (2, 4, "H100-80GB")
    mig = _spec_of("trainingjob-mig-slice")
    assert mig.mig_profile == "3g.40gb" and mig.gpus_per_replica is None
    elastic = _spec_of("trainingjob-elastic")
    assert (elastic.elastic.min_replicas, elastic.elastic.max_replicas) == (2, 8)
    assert elastic.energy.preference is EnergyPreference.ENERGY
    urgent = _spec_of("trainingjob-high-priority")
    assert urgent.priority > gang.priority and not urgent.preemptible
    too_big = _spec_of("trainingjob-unschedulable")
    assert too_big.gpus_per_replica == 16
    disaggregated = _spec_of("servingjob-disaggregated")
    assert set(disaggregated.pools()) == {"prefill", "decode"}
    single = _spec_of("servingjob-single-pool")
    assert set(single.pools()) == {"server"}


@pytest.mark.parametrize("path", JOB_EXAMPLES, ids=lambda p: p.stem)
def test_example_images_are_placeholders(path: Path) -> None:
    model = _parse(_load(path))
    templates = (
        [model.spec.template]
        if isinstance(model, TrainingJob)
        else [pool.template for pool in model.spec.pools().values()]
    )
    for template in templates:
        for container in template.spec.containers:
            assert container.image.startswith("registry.example/")


# -- wire format ------------------------------------------------------------------------------


def _all_models(root: type[BaseModel]) -> set[type[CRDModel]]:
    found: set[type[CRDModel]] = set()
    todo: list[type[BaseModel]] = [root]
    while todo:
        model = todo.pop()
        if model in found or not issubclass(model, CRDModel):
            continue
        found.add(model)
        for field in model.model_fields.values():
            for arg in _type_args(field.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    todo.append(arg)
    return found


def _type_args(annotation: Any) -> list[Any]:
    args = [annotation]
    for inner in getattr(annotation, "__args__", ()):
        args.extend(_type_args(inner))
    return args


@pytest.mark.parametrize("root", [TrainingJob, ServingJob])
def test_aliases_are_camel_case_and_every_field_is_described(root: type[BaseModel]) -> None:
    models = _all_models(root)
    assert len(models) >= 8
    for model in models:
        for name, field in model.model_fields.items():
            alias = field.alias or name
            assert "_" not in alias and alias[0].islower(), f"{model.__name__}.{name}"
            assert field.description, f"{model.__name__}.{name}"


def test_snake_case_names_work_in_python() -> None:
    spec = TrainingJobSpec(
        replicas=2,
        gpus_per_replica=4,
        template={"spec": {"containers": [{"name": "a", "image": "registry.example/a"}]}},
    )
    dumped = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped["gpusPerReplica"] == 4
    assert dumped["runPolicy"] == {"backoffLimit": 3, "suspend": False}


def test_unknown_fields_are_refused_but_pod_fields_are_kept() -> None:
    doc = _load(REPO_ROOT / "examples" / "trainingjob-mig-slice.yaml")
    doc["spec"]["gpuPerReplica"] = 1
    with pytest.raises(ValidationError, match="gpuPerReplica"):
        TrainingJob.model_validate(doc)
    doc = _load(REPO_ROOT / "examples" / "trainingjob-mig-slice.yaml")
    doc["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    doc["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "X", "value": "1"}]
    dumped = TrainingJob.model_validate(doc).model_dump(by_alias=True, exclude_unset=True)
    assert dumped["spec"]["template"] == doc["spec"]["template"]


def test_defaults_are_those_of_the_schema() -> None:
    minimal = {
        "replicas": 1,
        "gpusPerReplica": 1,
        "template": {"spec": {"containers": [{"name": "a", "image": "registry.example/a"}]}},
    }
    spec = TrainingJobSpec.model_validate(minimal)
    assert (spec.priority, spec.queue, spec.preemptible) == (0, "default", True)
    assert spec.topology is Topology.NONE
    assert spec.energy.preference is EnergyPreference.BALANCED
    assert (spec.run_policy.backoff_limit, spec.run_policy.suspend) == (3, False)


def test_mig_profile_accepts_every_known_name() -> None:
    base = _load(REPO_ROOT / "examples" / "trainingjob-mig-slice.yaml")
    for name in MIG_PROFILE_NAMES:
        doc = copy.deepcopy(base)
        doc["spec"]["migProfile"] = name
        assert TrainingJob.model_validate(doc).spec.mig_profile == name


# -- cross-field rules (the pydantic twins of the CEL rules) ----------------------------------

TJ = _load(REPO_ROOT / "examples" / "trainingjob-gang-h100.yaml")["spec"]
SJ = _load(REPO_ROOT / "examples" / "servingjob-disaggregated.yaml")["spec"]
DROP = object()


def _changed(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = doc
        for name in parents:
            node = node[name]
        if value is DROP:
            del node[last]
        else:
            node[last] = value
    return doc


INVALID: list[Any] = [
    pytest.param(TrainingJobSpec, TJ, {"migProfile": "3g.40gb"}, "mutually exclusive", id="both"),
    pytest.param(TrainingJobSpec, TJ, {"gpusPerReplica": DROP}, "is required", id="neither"),
    pytest.param(TrainingJobSpec, TJ, {"migProfile": "5g.50gb", "gpusPerReplica": DROP},
                 "unknown MIG profile", id="unknown-mig"),
    pytest.param(TrainingJobSpec, TJ, {"replicas": DROP}, "replicas is required", id="no-replicas"),
    pytest.param(TrainingJobSpec, TJ, {"elastic": {"minReplicas": 4, "maxReplicas": 2}},
                 "minReplicas", id="elastic-min-above-max"),
    pytest.param(TrainingJobSpec, TJ, {"elastic": {"minReplicas": 3, "maxReplicas": 8}},
                 "between", id="replicas-outside-elastic"),
    pytest.param(TrainingJobSpec, TJ, {"topology": "nvlinkDomain", "gpusPerReplica": DROP,
                 "migProfile": "1g.10gb"}, "nvlinkDomain", id="mig-nvlink"),
    pytest.param(TrainingJobSpec, TJ, {"energy": {"preference": "performance",
                 "maxSlowdownPercent": 10}}, "performance", id="cap-with-performance"),
    pytest.param(TrainingJobSpec, TJ, {"gpuTypes": [{"name": "L4"}, {"name": "L4"}]},
                 "more than once", id="duplicate-gpu-type"),
    pytest.param(TrainingJobSpec, TJ, {"replicas": 0}, "greater than or equal to 1", id="zero"),
    pytest.param(TrainingJobSpec, TJ, {"spreadSlowdownPercent": 100}, "less than or equal to 99",
                 id="spread-stops-the-job"),
    pytest.param(TrainingJobSpec, TJ, {"template": {"spec": {"containers": []}}},
                 "at least 1", id="no-containers"),
    pytest.param(TrainingJobSpec, TJ, {"checkpoint": {}}, "exactly one of intervalSeconds",
                 id="checkpoint-no-mode"),
    pytest.param(TrainingJobSpec, TJ, {"checkpoint": {"intervalSeconds": 60, "onSignal": True,
                 "gracePeriodSeconds": 5}}, "exactly one", id="checkpoint-both"),
    pytest.param(TrainingJobSpec, TJ, {"checkpoint": {"onSignal": True}},
                 "needs gracePeriodSeconds", id="checkpoint-signal-no-grace"),
    pytest.param(TrainingJobSpec, TJ, {"checkpoint": {"intervalSeconds": 60,
                 "gracePeriodSeconds": 5}}, "only with onSignal", id="checkpoint-grace-interval"),
    pytest.param(TrainingJobSpec, TJ, {"checkpoint": {"intervalSeconds": 9}},
                 "greater than or equal to 10", id="checkpoint-interval-short"),
    pytest.param(TrainingJobSpec, TJ, {"checkpoint": {"intervalSeconds": 60},
                 "elastic": {"minReplicas": 1, "maxReplicas": 8}, "replicas": 4},
                 "fixed-size", id="checkpoint-elastic"),
    pytest.param(TrainingJobSpec, TJ, {"elastic": {"minReplicas": 1, "maxReplicas": 8,
                 "scaling": [1, 2]}}, "one value per replica count", id="scaling-short"),
    pytest.param(TrainingJobSpec, TJ, {"elastic": {"minReplicas": 1, "maxReplicas": 8,
                 "scaling": [2, 3, 4, 5, 6, 7, 8, 9]}}, "first value must be 1",
                 id="scaling-first-not-one"),
    pytest.param(TrainingJobSpec, TJ, {"elastic": {"minReplicas": 1, "maxReplicas": 8,
                 "scaling": [1, 2, 3, 4, 5, 6, 7, 6]}}, "must not decrease",
                 id="scaling-decreasing"),
    pytest.param(TrainingJobSpec, TJ, {"elastic": {"minReplicas": 1, "maxReplicas": 2,
                 "scaling": [1, 0]}, "replicas": 2}, "greater than 0", id="scaling-zero"),
    pytest.param(ServingJobSpec, SJ, {"server": SJ["decode"]}, "server cannot be combined",
                 id="server-and-pools"),
    pytest.param(ServingJobSpec, SJ, {"decode": DROP}, "together", id="prefill-alone"),
    pytest.param(ServingJobSpec, SJ, {"prefill": DROP, "decode": DROP}, "either server",
                 id="no-pools"),
    pytest.param(ServingJobSpec, SJ, {"slo": DROP}, "slo is required", id="autoscaling-no-slo"),
    pytest.param(ServingJobSpec, SJ, {"autoscaling.prometheus": DROP}, "prometheus is required",
                 id="no-prometheus"),
    pytest.param(ServingJobSpec, SJ, {"decode.minReplicas": 9}, "minReplicas", id="pool-min-max"),
    pytest.param(ServingJobSpec, SJ, {"slo.ttftP90Seconds": 0}, "greater than 0", id="slo-zero"),
    pytest.param(ServingJobSpec, SJ, {"autoscaling.capacity.gpuType": "L4"},
                 "gpuTypes of every pool", id="capacity-type-not-listed"),
    pytest.param(ServingJobSpec, SJ, {"autoscaling.standby": {"prefill": {"replicas": -1}}},
                 "greater than or equal to 0", id="standby-negative"),
    pytest.param(ServingJobSpec, SJ, {"autoscaling.standby": {"prefill": {"replicas": 6}}},
                 r"must not exceed prefill.maxReplicas minus prefill.minReplicas \(5\)",
                 id="standby-above-max-minus-min"),
    pytest.param(ServingJobSpec, SJ, {"autoscaling.standby": {"server": {"replicas": 1}}},
                 "names a pool the ServingJob does not have", id="standby-of-a-missing-pool"),
    pytest.param(ServingJobSpec, SJ, {"autoscaling.standby": {"decode": {"wakeSeconds": 0}}},
                 "greater than or equal to 1", id="standby-wake-zero"),
]  # fmt: skip


@pytest.mark.parametrize(("model", "base", "changes", "message"), INVALID)
def test_cross_field_rules(
    model: type[BaseModel], base: dict[str, Any], changes: dict[str, Any], message: str
) -> None:
    model.model_validate(base)  # the unchanged base is valid
    with pytest.raises(ValidationError, match=message):
        model.model_validate(_changed(base, changes))


def test_disabled_autoscaling_needs_no_source_or_slo() -> None:
    spec = _changed(SJ, {"autoscaling": {"enabled": False}, "slo": DROP})
    assert ServingJobSpec.model_validate(spec).autoscaling is not None


# -- status -----------------------------------------------------------------------------------


def test_training_status_parses() -> None:
    status = TrainingJobStatus.model_validate(
        {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Placed",
                    "message": "2 replicas on h100-0",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ],
            "replicas": 2,
            "gpuType": "H100-80GB",
            "placement": [
                {"replica": 0, "node": "h100-0", "gpus": [0, 1, 2, 3]},
                {
                    "replica": 1,
                    "node": "a100-mig-0",
                    "migSlice": {"profile": "3g.40gb", "gpuIndex": 2, "start": 4},
                },
            ],
            "startTime": "2026-01-01T00:00:05Z",
            "gpuSeconds": 1200.5,
            "estimatedEnergyJoules": 4.2e6,
            "observedGeneration": 1,
        }
    )
    assert status.phase is TrainingJobPhase.RUNNING
    assert status.placement is not None and status.placement[1].mig_slice is not None
    with pytest.raises(ValidationError, match="phase"):
        TrainingJobStatus.model_validate({"phase": "Sleeping"})


def test_serving_status_parses() -> None:
    status = ServingJobStatus.model_validate(
        {
            "phase": "Ready",
            "prefill": {
                "replicas": 2,
                "readyReplicas": 2,
                "desiredReplicas": 3,
                "lastScaleTime": "2026-01-01T00:00:00Z",
                "lastScaleReason": "TTFT p90 0.8s above SLO 0.5s",
            },
        }
    )
    assert status.prefill is not None and status.prefill.desired_replicas == 3
