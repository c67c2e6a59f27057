"""The custom resources as the handlers act on them: identity, a spec validated once through the
pydantic model, the users' pod templates as written, and the status gpufleet wrote.

Each handler pass validates the body it is given (`TrainingJobObject.of`, `ServingJobObject.of`)
and works on the typed spec from then on; the pod templates stay the users' JSON, passed through
to the pods as written (gpufleet adds its own fields, it never re-serialises theirs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from gpufleet.model.servingjob import POOL_NAMES, PoolSpec, ServingJobSpec
from gpufleet.model.trainingjob import TrainingJobSpec

__all__ = ["Identity", "ServingJobObject", "TrainingJobObject", "parse_or_fail"]

Obj = Mapping[str, Any]
T = TypeVar("T")

log = logging.getLogger("gpufleet.operator")


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
    annotations: Mapping[str, str] = field(default_factory=dict)  # the job's own
    created: str | None = None  # its creationTimestamp, as the API server wrote it

    @classmethod
    def of(cls, body: Obj) -> TrainingJobObject:
        """Raises pydantic's ValidationError when the spec is not a valid TrainingJob spec."""
        raw = body["spec"]
        return cls(
            Identity.of(body),
            TrainingJobSpec.model_validate(raw),
            raw["template"],
            body.get("status") or {},
            body["metadata"].get("annotations") or {},
            body["metadata"].get("creationTimestamp"),
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


def parse_or_fail(
    parse: Callable[[Obj], T], body: Obj, set_status: Callable[[dict[str, Any]], None]
) -> T | None:
    """`parse(body)`; None for a spec the model refuses, after logging why and setting the
    phase Failed (the API server's schema should have refused it: say so, never act on it)."""
    try:
        return parse(body)
    except ValidationError as exc:
        meta = body["metadata"]
        log.warning("[%s/%s] invalid spec: %s", meta.get("namespace"), meta["name"], exc)
        if (body.get("status") or {}).get("phase") != "Failed":
            set_status({"phase": "Failed"})
        return None
