"""The custom resources as the handlers act on them: identity, a spec validated once through the
pydantic model, the users' pod templates as written, and the status gpufleet wrote.

Each handler pass validates the body it is given (`TrainingJobObject.of`, `ServingJobObject.of`)
and works on the typed spec from then on; the pod templates stay the users' JSON, passed through
to the pods as written (gpufleet adds its own fields, it never re-serialises theirs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.model.servingjob import POOL_NAMES, PoolSpec, ServingJobSpec
from gpufleet.model.trainingjob import TrainingJobSpec

__all__ = ["Identity", "ServingJobObject", "TrainingJobObject"]

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a custom resource is: what its children's names and owner references need."""

    name: str
    namespace: str
    uid: str
    generation: int = 0

    @classmethod
    def of(cls, body: Obj) -> Identity:
        meta = body["metadata"]
        return cls(
            meta["name"],
            meta.get("namespace") or "default",
            meta.get("uid", ""),
            int(meta.get("generation") or 0),
        )


@dataclass(frozen=True, slots=True)
class TrainingJobObject:
    id: Identity
    spec: TrainingJobSpec
    template: Obj  # the workers' pod template as written
    status: Obj = field(default_factory=dict)

    @classmethod
    def of(cls, body: Obj) -> TrainingJobObject:
        """Raises pydantic's ValidationError when the spec is not a valid TrainingJob spec."""
        raw = body["spec"]
        return cls(
            Identity.of(body),
            TrainingJobSpec.model_validate(raw),
            raw["template"],
            body.get("status") or {},
        )


@dataclass(frozen=True, slots=True)
class ServingJobObject:
    id: Identity
    spec: ServingJobSpec
    templates: Mapping[str, Obj]  # each pool's pod template as written
    status: Obj = field(default_factory=dict)

    @classmethod
    def of(cls, body: Obj) -> ServingJobObject:
        """Raises pydantic's ValidationError when the spec is not a valid ServingJob spec."""
        raw = body["spec"]
        spec = ServingJobSpec.model_validate(raw)
        templates = {name: raw[name]["template"] for name in POOL_NAMES if raw.get(name)}
        return cls(Identity.of(body), spec, templates, body.get("status") or {})

    def pools(self) -> dict[str, PoolSpec]:
        """The pools that are set, by name, in reconcile order."""
        pools = {"prefill": self.spec.prefill, "decode": self.spec.decode}
        pools["server"] = self.spec.server
        return {name: pool for name in POOL_NAMES if (pool := pools[name]) is not None}
