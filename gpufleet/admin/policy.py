"""The live placement policy as a resource: a ConfigMap holding a preset and weight overrides.

The document overrides the `placement` settings' preset and weights (the solver's budget stays
the settings'); the scheduler and the what-if both take it through a `PolicyWatch`. Reads and
writes go to the API server directly, so the ETag is always the ConfigMap's current
resourceVersion (`"absent"` while there is none): a PUT needs `If-Match` (428 without it), is
refused with 412 when someone changed the policy since the client read it, and is written with
the resourceVersion as a precondition, so two writers cannot both win.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ConfigDict, Field, ValidationError
from urllib3.exceptions import HTTPError

from gpufleet.admin.errors import ProblemError
from gpufleet.admin.models.common import PublicModel
from gpufleet.core.policy import Policy
from gpufleet.core.presets import Preset
from gpufleet.model.contract.timestamps import format_time, parse_time
from gpufleet.scheduler.policy_watch import POLICY_KEY, LivePolicy, Parse
from gpufleet.settings import PlacementSettings, WeightOverrides

ABSENT = "absent"
UPDATED_BY = "gpufleet.io/updated-by"
UPDATED_AT = "gpufleet.io/updated-at"


class WeightsDocument(WeightOverrides):
    """Weight overrides as a stored or PUT document gives them: numbers only (the settings'
    lax parsing would read `false` as 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class PolicyDocument(PublicModel):
    """The policy the scheduler uses: a preset and the weights that replace its own."""

    model_config = ConfigDict(extra="forbid")

    preset: Preset = Field(
        description="performance (admitted work only), balanced, or energy (energy weighed "
        "against work, stronger consolidation, every gang power-capped within 5 % slowdown on a "
        "GPU type with spare capacity)."
    )
    weights: WeightsDocument = Field(
        default_factory=WeightsDocument,
        description="Objective weights that replace the preset's; unset ones keep its value.",
    )


class WeightsPublic(PublicModel):
    """The objective's weights in force."""

    work: float = Field(description="Weight of priority-weighted admitted work.")
    energy: float = Field(description="Weight of watts drawn by admitted work, per 100 W.")
    consolidation: float = Field(description="Penalty per empty node a decision starts using.")
    packing: float = Field(description="Penalty per free GPU left on a node the decision touches.")
    fragmentation: float = Field(
        description="Weight of FGD fragmentation against the scheduler's online workload estimate."
    )
    disruption: float = Field(description="Penalty per MIG repartition and per preempted gang.")
    scarcity: float = Field(description="Weight of the reserves kept for single-type gangs.")


class PolicyPublic(PublicModel):
    """The stored policy, and what the scheduler decides with because of it."""

    preset: Preset = Field(description="The preset in force.")
    weights: WeightOverrides = Field(description="The stored weight overrides.")
    effective_weights: WeightsPublic = Field(description="Every weight in force.")
    power_caps: bool = Field(description="Whether the policy writes GPU power caps.")
    allow_preemption: bool = Field(description="Whether gangs may preempt lower priorities.")
    source: str = Field(
        description="configmap when the stored policy is in force, settings when there is "
        "none (or it is not valid, see error)."
    )
    error: str | None = Field(
        default=None, description="Why the stored document is not in force, if it is not."
    )
    updated_by: str | None = Field(default=None, description="Who stored it last.")
    updated_at: datetime | None = Field(default=None, description="When it was stored last.")


def parser(base: PlacementSettings) -> Parse:
    """Parses a stored document into (preset name, policy) over the `base` settings."""

    def parse(document: Mapping[str, Any]) -> tuple[str, Policy]:
        try:
            stored = PolicyDocument.model_validate(document)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "document"
            raise ValueError(f"{where}: {first['msg']}") from None
        weights = WeightOverrides.model_validate(stored.weights.model_dump())
        placement = base.model_copy(update={"preset": stored.preset, "weights": weights})
        return placement.preset.value, placement.policy()

    return parse


def public(live: LivePolicy, meta: Mapping[str, Any] | None) -> PolicyPublic:
    """The public form of the policy in force, with who stored it."""
    annotations = (meta or {}).get("annotations") or {}
    stored = live.document if live.source == "configmap" else None
    weights = WeightOverrides.model_validate((stored or {}).get("weights") or {})
    at = annotations.get(UPDATED_AT)
    return PolicyPublic(
        preset=Preset(live.name),
        weights=weights,
        effective_weights=WeightsPublic(**dataclasses.asdict(live.policy.weights)),
        power_caps=live.policy.power_caps.enabled,
        allow_preemption=live.policy.allow_preemption,
        source=live.source,
        error=live.error,
        updated_by=annotations.get(UPDATED_BY),
        updated_at=parse_time(at),
    )


def etag(version: str | None) -> str:
    return f'"{version or ABSENT}"'


class PolicyStore:
    """The policy ConfigMap, read and written with the admin API's own identity."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.name = name

    def read(self) -> dict[str, Any] | None:
        """The ConfigMap as the API server has it now, or None."""
        try:
            raw: Any = self.core.read_namespaced_config_map(
                self.name, self.namespace, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _unavailable(exc) from exc
        except (HTTPError, OSError) as exc:
            raise _unavailable(exc) from exc
        obj: dict[str, Any] = json.loads(raw.data)
        return obj

    def write(self, document: PolicyDocument, if_match: str | None, user: str) -> dict[str, Any]:
        """Store `document` if the stored one is still the one `if_match` names."""
        if if_match is None:
            raise ProblemError(
                428, 'PUT /policy needs If-Match with the ETag of a GET ("absent" to create)'
            )
        current = self.read()
        version = (current or {}).get("metadata", {}).get("resourceVersion")
        if if_match.strip() != etag(version):
            raise ProblemError(
                412, f"the policy changed since it was read: its ETag is now {etag(version)}"
            )
        body: Any = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": {
                    UPDATED_BY: user,
                    UPDATED_AT: format_time(datetime.now(UTC)),
                },
            },
            "data": {
                POLICY_KEY: yaml.safe_dump(
                    document.model_dump(mode="json", by_alias=True, exclude_none=True),
                    sort_keys=False,
                )
            },
        }
        try:
            if version is None:
                raw: Any = self.core.create_namespaced_config_map(
                    self.namespace, body, _preload_content=False
                )
            else:
                body["metadata"]["resourceVersion"] = version  # a precondition of the write
                raw = self.core.replace_namespaced_config_map(
                    self.name, self.namespace, body, _preload_content=False
                )
        except ApiException as exc:
            if exc.status == 409:  # another writer came first
                raise ProblemError(412, "the policy changed while it was being written") from exc
            raise _unavailable(exc) from exc
        except (HTTPError, OSError) as exc:
            raise _unavailable(exc) from exc
        stored: dict[str, Any] = json.loads(raw.data)
        return stored


def _unavailable(exc: Exception) -> ProblemError:
    cause = f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
    return ProblemError(503, f"cannot read or write the policy ConfigMap: {cause}")
