"""Building blocks shared by the TrainingJob and ServingJob models.

The pydantic models in this package are the single source of the CRD schemas: `crdgen` turns
their JSON schema into an apiextensions.k8s.io/v1 structural schema. So every field carries a
`description` (it becomes `kubectl explain` text), bounds and enums are pydantic constraints,
and rules that span several fields are written twice, once as a pydantic validator (so Python
code holding a model can trust it) and once as a CEL rule (so the API server rejects bad
manifests before gpufleet sees them). The `cel()` helper keeps the CEL text beside the model.

Field names are snake_case in Python and camelCase on the wire (pydantic aliases); dump with
`model_dump(by_alias=True, exclude_none=True, mode="json")` to get a manifest back.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gpufleet.model.mig_profiles import MIG_PROFILE_NAMES

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "GPU_TYPE_PATTERN",
    "MAX_GPUS_PER_REPLICA",
    "MAX_REPLICAS",
    "NAME_PATTERN",
    "CRDModel",
    "Condition",
    "ConditionStatus",
    "Container",
    "GPUType",
    "MigProfile",
    "ObjectMeta",
    "PodSpec",
    "PodTemplate",
    "UsageStatus",
    "cel",
    "check_gpus_xor_mig",
    "check_unique_gpu_types",
    "gpu_types_field",
    "gpus_per_replica_field",
    "gpus_xor_mig_rules",
    "mig_profile_field",
    "validations",
]

API_GROUP: Final = "gpufleet.io"
API_VERSION: Final = "v1alpha1"

# A GPU type name as the GPU catalogue spells it: "H100-80GB", "A100-80GB", "L4", "T4", "L40S".
GPU_TYPE_PATTERN: Final = r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,30}[A-Za-z0-9])?$"
# RFC 1123 label: queue names and container names.
NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# Upper bound on any replica count; also bounds list sizes so CEL cost estimates stay finite.
MAX_REPLICAS: Final = 1024
# Whole GPUs one pod may ask for. 16 is the largest single-node count shipped (DGX-2); nodes of
# the default fleet have 8, so a 16-GPU replica is valid but cannot be placed on them.
MAX_GPUS_PER_REPLICA: Final = 16


def cel(
    rule: str, message: str, field_path: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    """One `x-kubernetes-validations` entry.

    `field_path` is relative to the object the rule sits on (".migProfile") and makes the API
    server name that field in its error; `reason` is one of FieldValueInvalid, FieldValueRequired,
    FieldValueForbidden or FieldValueDuplicate and picks the error's wording.
    """
    entry: dict[str, Any] = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


class CRDModel(BaseModel):
    """Base of every CRD model: camelCase aliases, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )


def _known_mig_profile(value: str) -> str:
    if value not in MIG_PROFILE_NAMES:
        raise ValueError(f"unknown MIG profile {value!r}; known: {', '.join(MIG_PROFILE_NAMES)}")
    return value


# A MIG profile name such as "3g.40gb". The CRD enum is the union of every supported GPU's names;
# whether the chosen GPU type offers the profile is the scheduler's question, not the schema's.
MigProfile = Annotated[
    str,
    AfterValidator(_known_mig_profile),
    Field(json_schema_extra={"enum": list(MIG_PROFILE_NAMES)}),
]


class GPUType(CRDModel):
    """A GPU type the workload accepts, optionally with its throughput on that type."""

    name: str = Field(
        pattern=GPU_TYPE_PATTERN,
        max_length=32,
        description=(
            "GPU type name as the GPU catalogue spells it, for example H100-80GB, A100-80GB, "
            "L4 or T4."
        ),
    )
    throughput: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description=(
            "Throughput on this type relative to the other listed types (any common unit, for "
            "example 1.0 for the fastest type and 0.4 for one running at 40% of its speed). "
            "Placement prefers types with more throughput per GPU; omitted means unknown, and "
            "the scheduler falls back to its catalogue's default for the type."
        ),
    )


class Container(CRDModel):
    """A container of the pod template; only name and image are checked here."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(pattern=NAME_PATTERN, max_length=63, description="Container name.")
    image: str = Field(min_length=1, max_length=1024, description="Container image reference.")


class PodSpec(CRDModel):
    """The pod spec of a template: a core/v1 PodSpec whose fields other than `containers` are
    passed through to the pods as written."""

    model_config = ConfigDict(extra="allow")

    containers: list[Container] = Field(
        min_length=1,
        max_length=64,
        description=(
            "The pod's containers (core/v1 Container); at least one. gpufleet adds the GPU or "
            "MIG resource requests and the scheduler name itself."
        ),
    )


class PodTemplate(CRDModel):
    """A pod template (core/v1 PodTemplateSpec) for the pods of one replica."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-embedded-resource": False},
    )

    metadata: dict[str, Any] | None = Field(
        default=None,
        description="Labels and annotations copied onto every pod (core/v1 ObjectMeta).",
    )
    spec: PodSpec = Field(description="Pod spec (core/v1 PodSpec); `containers` is required.")


class ConditionStatus(enum.StrEnum):
    """Status of a condition, as in metav1.Condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(CRDModel):
    """One aspect of the object's state, shaped like metav1.Condition."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Condition type in CamelCase, for example Admitted or Ready.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description=(
            "Stable CamelCase reason for the last transition, for example InsufficientGPUs; "
            "programs may switch on it."
        ),
    )
    message: str = Field(
        max_length=32768, description="Human-readable detail about the last transition."
    )
    last_transition_time: datetime = Field(
        description="When the condition last changed status (RFC 3339)."
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The .metadata.generation the condition was computed from.",
    )


class ObjectMeta(CRDModel):
    """The subset of metav1.ObjectMeta the models read; other keys are kept as they are."""

    model_config = ConfigDict(extra="allow")

    name: str | None = Field(default=None, description="Object name.")
    namespace: str | None = Field(default=None, description="Object namespace.")
    labels: dict[str, str] | None = Field(default=None, description="Object labels.")
    annotations: dict[str, str] | None = Field(default=None, description="Object annotations.")


def validations(*rules: dict[str, Any]) -> dict[str, Any]:
    """`json_schema_extra` for a model whose schema carries the CEL `rules`."""
    entries = list(rules)
    return {"x-kubernetes-validations": entries}


def gpus_xor_mig_rules() -> tuple[dict[str, Any], ...]:
    """CEL rules for an object with `gpusPerReplica` and `migProfile`: exactly one is set."""
    return (
        cel(
            "!(has(self.gpusPerReplica) && has(self.migProfile))",
            "gpusPerReplica and migProfile are mutually exclusive: ask for whole GPUs or for "
            "one MIG slice per replica, not both",
            ".migProfile",
            "FieldValueForbidden",
        ),
        cel(
            "has(self.gpusPerReplica) || has(self.migProfile)",
            "one of gpusPerReplica (whole GPUs per replica) or migProfile (one MIG slice per "
            "replica) is required",
            ".gpusPerReplica",
            "FieldValueRequired",
        ),
    )


def check_gpus_xor_mig(gpus: int | None, mig: str | None) -> None:
    """The pydantic twin of `gpus_xor_mig_rules`."""
    if gpus is not None and mig is not None:
        raise ValueError("gpusPerReplica and migProfile are mutually exclusive")
    if gpus is None and mig is None:
        raise ValueError("one of gpusPerReplica or migProfile is required")


def gpus_per_replica_field() -> Any:
    """The `gpusPerReplica` field, shared by TrainingJob and the ServingJob pools."""
    return Field(
        default=None,
        ge=1,
        le=MAX_GPUS_PER_REPLICA,
        description=(
            "Whole GPUs per replica (nvidia.com/gpu), all on the replica's node. Exactly one "
            "of gpusPerReplica and migProfile is set."
        ),
    )


def mig_profile_field() -> Any:
    """The `migProfile` field, shared by TrainingJob and the ServingJob pools."""
    return Field(
        default=None,
        description=(
            "One MIG slice per replica instead of whole GPUs, named by its profile, for "
            "example 3g.40gb (requested as nvidia.com/mig-<profile>). Exactly one of "
            "gpusPerReplica and migProfile is set."
        ),
    )


def gpu_types_field(what: str) -> Any:
    """The `gpuTypes` list: a map keyed by name, so the API server refuses duplicates."""
    return Field(
        default=None,
        min_length=1,
        max_length=16,
        description=(
            f"GPU types {what} may run on, each optionally with its relative throughput. "
            "Omitted means any type that offers the requested GPUs or MIG profile."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


def check_unique_gpu_types(types: list[GPUType] | None) -> None:
    """The pydantic twin of the list-map key on `gpuTypes`."""
    names = [t.name for t in types or []]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"gpuTypes lists {', '.join(duplicates)} more than once")


class UsageStatus(CRDModel):
    """The GPU time and energy a job has used, in its status (TrainingJob and ServingJob alike;
    the operator's `accounting` module accrues them from the job's running pods)."""

    gpu_seconds: float | None = Field(
        default=None,
        ge=0,
        description="GPU time used so far, in GPU-seconds (a MIG slice counts its GPU fraction).",
    )
    estimated_energy_joules: float | None = Field(
        default=None,
        ge=0,
        description="Energy used so far by the job's GPUs, in joules, from the power model.",
    )
    usage_accounted_time: datetime | None = Field(
        default=None,
        description="When gpuSeconds and estimatedEnergyJoules were last brought up to date.",
    )
