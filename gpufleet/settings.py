"""gpufleet's settings: one typed root, a group per concern, read once.

Sources, the first that sets a value wins:
1. `gpufleet operator` flags (each maps onto one setting, `gpufleet.app.command`);
2. the environment: `GPUFLEET_<FIELD>` for a top-level setting, `GPUFLEET_<GROUP>__<FIELD>`
   inside a group (`GPUFLEET_PLACEMENT__SOLVER__ENGINE=greedy`), or a whole group as a JSON
   object (`GPUFLEET_AUTOSCALER='{"window_s": 30}'`);
3. a YAML file (`--config FILE` or `GPUFLEET_CONFIG_FILE`) shaped like the groups below, as a
   Helm chart mounts it from a ConfigMap;
4. the defaults.

`load` is called once, by the composition root (`gpufleet.app`), which hands each component the
values of its group; nothing else reads the environment. Unknown keys inside a group and in the
file are refused (a typo must not pass silently); a bad value raises `SettingsError` with one
line naming the key, its environment variable and what is allowed.

Groups defined by the component that uses them are nested as they are: `autoscaler` is the
policy's own `AutoscalerSettings` (a ServingJob's CRD fields still win over it per job),
`scheduler` the live scheduler's `SchedulerSettings`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError
from pydantic_settings.sources.utils import parse_env_vars

from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.core.policy import (
    QUEUE_AGING_S,
    REQUEUE_TIMESTAMP,
    SERVICE_TIER_GPU_S,
    Engine,
    MoveRule,
    Policy,
    PowerDownRule,
    RequeueTimestamp,
    SolverSettings,
    Weights,
)
from gpufleet.core.presets import Preset, preset_policy
from gpufleet.operator.podtemplate import GPU_TOLERATIONS
from gpufleet.scheduler.lease import DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE
from gpufleet.scheduler.loop_settings import SchedulerSettings

__all__ = [
    "CONFIG_FILE_ENV",
    "ENV_PREFIX",
    "AdminSettings",
    "LeaseSettings",
    "LogFormat",
    "LogLevel",
    "LogSettings",
    "MetricsSettings",
    "OperatorSettings",
    "PlacementSettings",
    "PodToleration",
    "PowerDownGroup",
    "SchedulerSettings",
    "SettingRow",
    "Settings",
    "SettingsError",
    "SolverGroup",
    "TaintEffect",
    "TolerationOperator",
    "WeightOverrides",
    "load",
    "markdown_table",
    "rows",
]

ENV_PREFIX = "GPUFLEET_"
DELIMITER = "__"
CONFIG_FILE_ENV = "GPUFLEET_CONFIG_FILE"
# Read by earlier versions; refused so that a left-over value is not silently ignored.
_REPLACED_ENV = {
    "GPUFLEET_AUTOSCALER_SETTINGS": "set GPUFLEET_AUTOSCALER to the same JSON object, or "
    "GPUFLEET_AUTOSCALER__<FIELD> per field",
}


class SettingsError(ValueError):
    """A setting is invalid; the message is one line naming the key."""


class _Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WeightOverrides(_Group):
    """Objective weights that replace the preset's (unset: the preset's value)."""

    work: float | None = Field(None, ge=0, description="Weight of priority-weighted work.")
    energy: float | None = Field(None, ge=0, description="Weight of watts drawn, per 100 W.")
    consolidation: float | None = Field(
        None, ge=0, description="Penalty per empty node a decision starts using."
    )
    packing: float | None = Field(
        None, ge=0, description="Penalty per free GPU left on a node the decision touches."
    )
    fragmentation: float | None = Field(
        None,
        ge=0,
        description="Weight of FGD fragmentation: per GPU of free capacity that the request "
        "shapes seen so far could not use (the scheduler's online estimate).",
    )
    disruption: float | None = Field(
        None, ge=0, description="Penalty per MIG repartition and per preempted gang."
    )
    scarcity: float | None = Field(
        None,
        ge=0,
        description="Weight of the reserves kept for gangs confined to some GPU types (one "
        "type, or MIG slices on the MIG-capable types).",
    )


class SolverGroup(_Group):
    """The placement engine's budget (`gpufleet.core.policy.SolverSettings`)."""

    engine: Engine = Field(Engine.CPSAT, description="Placement engine.")
    time_limit_s: float = Field(2.0, gt=0, description="Wall-clock limit of one CP-SAT solve.")
    deterministic_time: float = Field(
        0.2, gt=0, description="CP-SAT work limit: the same input and seed give the same answer."
    )
    workers: int = Field(1, ge=1, description="CP-SAT search workers.")
    seed: int = Field(0, ge=0, description="CP-SAT random seed.")
    presolve: bool = Field(False, description="CP-SAT presolve.")
    skip_when_greedy_admits_all: bool = Field(
        True,
        description="Bind the greedy decision without solving when it admits every pending "
        "gang whole, with no preemption or MIG change.",
    )
    max_gangs: int = Field(
        4000,
        ge=1,
        description="Keep the greedy decision without solving when more gangs are pending "
        "than this (CP-SAT found no solution in time at 5,000).",
    )

    def solver_settings(self) -> SolverSettings:
        return SolverSettings(**self.model_dump())


class PowerDownGroup(_Group):
    """Idle-node power-down (`gpufleet.core.policy.PowerDownRule`): empty GPU nodes the
    scheduler would switch off are cordoned and labelled `gpufleet.io/power-state=off` for a
    cluster autoscaler, Karpenter or a BMC script to act on."""

    enabled: bool = Field(
        False,
        description="Mark empty GPU nodes for power-down (opt-in: the cordon is seen by every "
        "scheduler of the cluster).",
    )
    idle_s: float = Field(1800.0, ge=0, description="Seconds a node stays empty before it goes.")
    warm_nodes_per_type: int = Field(
        2, ge=0, description="Empty powered nodes kept per GPU type as headroom for arrivals."
    )
    boot_s: float = Field(
        300.0,
        ge=0,
        description="Seconds a woken node takes to boot before it is used.",
    )
    expected_run_s: float = Field(
        3600.0,
        ge=0,
        description="Prior run time of a new gang on its fastest type: a gang waits for a "
        "faster switched-off node when its boot costs less than the slower powered GPUs "
        "would over that run (0: never waits).",
    )

    def rule(self) -> PowerDownRule:
        return PowerDownRule(**self.model_dump())


class MovesGroup(_Group):
    """Moves of running gangs to faster GPUs (`gpufleet.core.policy.MoveRule`): only jobs
    with `spec.checkpoint` are ever moved."""

    enabled: bool = Field(True, description="Move checkpointing jobs to faster GPUs that free.")
    max_per_hour: int = Field(
        1,
        ge=0,
        description="Most moves of one job to faster GPUs in any hour (counted from its "
        "status); one more may empty a node reserved for an aged wide gang.",
    )
    min_gain_s: float = Field(
        0.0,
        ge=0,
        description="Seconds of completion time a move must save, net of its restart and the "
        "progress it loses.",
    )
    min_speedup: float = Field(
        0.1,
        ge=0,
        description="The new placement must be at least 1 + this times as fast.",
    )

    def rule(self) -> MoveRule:
        return MoveRule(**self.model_dump())


class PlacementSettings(_Group):
    """The live placement policy: a preset of `gpufleet.core.presets`, with overrides."""

    preset: Preset = Field(
        Preset.BALANCED,
        description="Named policy: performance (work only), balanced, energy (energy weighed, "
        "stronger consolidation, every gang power-capped within 5 % slowdown on a GPU type with "
        "spare capacity).",
    )
    weights: WeightOverrides = Field(default_factory=WeightOverrides)
    solver: SolverGroup = Field(default_factory=SolverGroup)
    power_down: PowerDownGroup = Field(default_factory=PowerDownGroup)
    moves: MovesGroup = Field(default_factory=MovesGroup)
    service_tier_gpu_s: float = Field(
        SERVICE_TIER_GPU_S,
        ge=0,
        description="Inside a queue, among jobs of the same priority, a job that has received "
        "less than this many GPU-seconds of service (GPUs x run time over its runs) goes first "
        "and may preempt one that has received more (least attained service first); never "
        "over a higher priority, never across queues. 0: no service tier.",
    )
    service_tier_rerun_s: float = Field(
        0.0,
        ge=0,
        description="With the service tier: a job the tier preempted before (its "
        "status.tierEvictions) is not preempted by the tier again until its current run has "
        "lasted this many seconds (a limit on a served job's loop of eviction and return); "
        "higher priorities and queues' reclaims may still preempt it. 0: no limit.",
    )
    queue_aging_s: float = Field(
        QUEUE_AGING_S,
        gt=0,
        description="With GPUQueues: a job pending this many seconds (since its pods were "
        "created, i.e. since it was submitted or last evicted) goes before the queues' "
        "fair-share order, and one needing many GPUs on one node that fits nowhere has a node "
        "reserved for it (one whose replicas may spread: the fewest nodes that hold it packed).",
    )
    requeue_timestamp: RequeueTimestamp = Field(
        REQUEUE_TIMESTAMP,
        description="Where an evicted job goes back in line among its queue's jobs (Kueue's "
        "requeuingStrategy.timestamp): eviction, at the back (its place counts from its "
        "recreated pods); creation, where its submission put it (the TrainingJob's "
        "creationTimestamp, which the operator writes on its worker pods; ServingJob replicas: "
        "their own creation; bare pods: their earliest creation). Either way queue aging counts "
        "from the eviction.",
    )

    def policy(self) -> Policy:
        """The core's `Policy`: the preset with the solver settings, power-down rule, move rule,
        service tier, queue aging, requeue timestamp and weight overrides."""
        policy = preset_policy(
            self.preset, self.solver.solver_settings(), power_down=self.power_down.rule()
        )
        policy = dataclasses.replace(
            policy,
            moves=self.moves.rule(),
            service_tier_gpu_s=self.service_tier_gpu_s or None,  # 0: no tier
            service_tier_rerun_s=self.service_tier_rerun_s or None,  # 0: no limit
            queue_aging_s=self.queue_aging_s,
            requeue_timestamp=self.requeue_timestamp,
        )
        overrides = {k: v for k, v in self.weights.model_dump().items() if v is not None}
        if not overrides:
            return policy
        weights = Weights(**{**dataclasses.asdict(policy.weights), **overrides})
        return dataclasses.replace(policy, weights=weights)


# Kubernetes' rule for a toleration's key: a label key (an optional DNS prefix and a name).
_LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class PodToleration(_Group):
    """One toleration, in a Kubernetes pod's terms, checked as the API server checks it."""

    key: str = Field("", pattern=_LABEL_KEY + "|^$")
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None  # unset: every effect
    tolerationSeconds: int | None = Field(None, ge=0)  # Kubernetes' own field name

    @model_validator(mode="after")
    def _as_the_api_server_does(self) -> PodToleration:
        if not self.key and self.operator is not TolerationOperator.EXISTS:
            raise ValueError("a toleration without a key must use operator Exists")
        if self.operator is TolerationOperator.EXISTS and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if self.tolerationSeconds is not None and self.effect is not TaintEffect.NO_EXECUTE:
            raise ValueError("tolerationSeconds needs effect NoExecute")
        return self

    def as_kubernetes(self) -> dict[str, Any]:
        """The toleration as a pod spec lists it (unset fields left out)."""
        out: dict[str, Any] = {}
        if self.key:
            out["key"] = self.key
        out["operator"] = self.operator.value
        if self.value:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect.value
        if self.tolerationSeconds is not None:
            out["tolerationSeconds"] = self.tolerationSeconds
        return out


def _gpu_operator_toleration() -> tuple[PodToleration, ...]:
    return tuple(PodToleration.model_validate(t) for t in GPU_TOLERATIONS)


class OperatorSettings(_Group):
    """The TrainingJob and ServingJob handlers."""

    tick_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="Seconds between two passes over each job (how soon pods' progress shows "
        "in its status; also the resolution of the autoscaling interval).",
    )
    pod_tolerations: tuple[PodToleration, ...] = Field(
        default_factory=_gpu_operator_toleration,
        description="Tolerations added to every pod the operator creates for a job, beside "
        "those of the job's template: the taints of the GPU nodes (the default tolerates the "
        "NVIDIA GPU Operator's nvidia.com/gpu taint; an empty list adds none).",
    )

    vllm_sleep_api: bool = Field(
        False,
        description="Call vLLM's sleep endpoints on a ServingJob's standby replicas (POST "
        "/sleep?level=1 and /wake_up on the pod's IP and spec.port; the server needs "
        "--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1) before marking them asleep or awake, "
        "and read GET /is_sleeping to put a woken replica back in its Service as soon as it "
        "serves; off, the gpufleet.io/standby pod annotation alone tells the server, and a "
        "woken replica rejoins its Service after the pool's wakeSeconds.",
    )

    def tolerations(self) -> tuple[dict[str, Any], ...]:
        """`pod_tolerations` as pod specs list them."""
        return tuple(t.as_kubernetes() for t in self.pod_tolerations)


class LeaseSettings(_Group):
    """Leader election: only the holder of this Lease schedules and reconciles."""

    name: str = Field(DEFAULT_LEASE_NAME, min_length=1, description="Name of the Lease.")
    namespace: str = Field(
        DEFAULT_LEASE_NAMESPACE, min_length=1, description="Namespace of the Lease."
    )
    duration_s: float = Field(
        15.0,
        gt=0,
        description="Seconds a standby waits after the leader stops renewing; a leader that "
        "has not renewed for this long makes no decision.",
    )
    renew_every_s: float | None = Field(
        None, gt=0, description="Seconds between renewals (unset: a third of duration_s)."
    )

    @model_validator(mode="after")
    def _renew_within_duration(self) -> LeaseSettings:
        if self.renew_every_s is not None and self.renew_every_s >= self.duration_s:
            raise ValueError("renew_every_s must be less than duration_s")
        return self

    @property
    def renew_period_s(self) -> float:
        return self.renew_every_s if self.renew_every_s is not None else self.duration_s / 3


class MetricsSettings(_Group):
    """The Prometheus metrics endpoint."""

    bind_address: str = Field(
        "127.0.0.1",
        min_length=1,
        description="Address to listen on (0.0.0.0 in a cluster, for the scraper).",
    )
    port: int = Field(0, ge=0, le=65535, description="Port; 0 serves no metrics.")


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class LogSettings(_Group):
    level: LogLevel = Field(LogLevel.INFO, description="Lowest level logged.")
    format: LogFormat = Field(
        LogFormat.TEXT, description="text (one line per record) or json (one object per line)."
    )


# Where the admin API stores the live placement policy (PUT /policy) by default.
POLICY_CONFIGMAP = "gpufleet-policy"
SYSTEM_NAMESPACE = "gpufleet-system"


class AdminSettings(_Group):
    """The admin API (REST, dashboard): served by `gpufleet operator` when `port` is set."""

    bind_address: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="Address the admin API and dashboard listen on (0.0.0.0 in a cluster).",
    )
    port: int = Field(
        default=0, ge=0, le=65535, description="Port of the admin API and dashboard; 0 serves none."
    )
    tls_cert_file: Path | None = Field(
        default=None, description="PEM certificate chain to serve TLS with (unset: plain HTTP)."
    )
    tls_key_file: Path | None = Field(
        default=None, description="PEM private key of the TLS certificate."
    )
    token_cache_ttl_s: float = Field(
        default=10.0,
        ge=0,
        le=300,
        description="Seconds a TokenReview or SubjectAccessReview answer is reused.",
    )
    rate_limit_per_s: float = Field(
        default=20.0, gt=0, description="Requests per second each user may make on average."
    )
    rate_limit_burst: int = Field(
        default=40, ge=1, description="Requests a user may make at once before being slowed."
    )
    max_body_bytes: int = Field(
        default=1 << 20, ge=1024, description="Largest request body accepted (413 beyond)."
    )
    namespace: str = Field(
        default=SYSTEM_NAMESPACE, min_length=1, description="Namespace of the policy ConfigMap."
    )
    policy_configmap: str = Field(
        default=POLICY_CONFIGMAP,
        min_length=1,
        description="Name of the ConfigMap holding the live placement policy (PUT /policy).",
    )
    pod_name: str | None = Field(
        default=None,
        description="This process's pod (set from the downward API by the chart): the replica "
        "serving the admin API labels it so that the admin Service routes to it alone.",
    )
    pod_namespace: str | None = Field(default=None, description="Namespace of that pod.")
    drain_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a MIG layout change with drain=true waits for the node's GPU pods.",
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> AdminSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file are set together or not at all")
        return self


class Settings(BaseSettings):
    """Every setting of a `gpufleet operator` process. Build it with `load`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=DELIMITER,
        extra="forbid",
        frozen=True,
    )

    kubeconfig: str | None = Field(
        None, description="kubeconfig file of the cluster to manage (unset: in-cluster config)."
    )
    namespace: str | None = Field(
        None, description="Handle the jobs of this namespace only (unset: every namespace)."
    )
    placement: PlacementSettings = Field(default_factory=PlacementSettings)
    autoscaler: AutoscalerSettings = Field(default_factory=AutoscalerSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    operator: OperatorSettings = Field(default_factory=OperatorSettings)
    lease: LeaseSettings = Field(default_factory=LeaseSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: Any, *_: Any, **__: Any
    ) -> tuple[Any, ...]:
        # Only what `load` passes: constructing Settings never reads the environment by itself.
        return (init_settings,)


# --- loading ---------------------------------------------------------------------------------


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment parsing over a given mapping instead of os.environ."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


def _merge(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    """`low` with `high`'s values on top, group by group."""
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def env_name(loc: tuple[str | int, ...]) -> str:
    return ENV_PREFIX + DELIMITER.join(str(p).upper() for p in loc)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SettingsError(f"config file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise SettingsError(f"config file {path}: not valid YAML{at}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: must hold a mapping of settings")
    return data


def _one_line(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        key = ".".join(str(p) for p in loc) or "settings"
        value = error.get("input")
        shown = "" if isinstance(value, Mapping) else f" (got {json.dumps(value, default=str)})"
        message = error["msg"].removeprefix("Value error, ")
        # A list is set whole (JSON in its variable): name the list's variable.
        whole = tuple(itertools.takewhile(lambda part: not isinstance(part, int), loc))
        parts.append(f"setting {key} ({env_name(whole)}): {message}{shown}")
    return "; ".join(parts)


def load(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> Settings:
    """The settings from `flags` (nested like the groups; None values ignored), the
    environment (`environ`, default os.environ) and the YAML file (`config_file`, else
    `GPUFLEET_CONFIG_FILE`), over the defaults."""
    import os

    environ = os.environ if environ is None else environ
    for name, instead in _REPLACED_ENV.items():
        if name in environ:
            raise SettingsError(f"{name} is no longer read: {instead}")
    if config_file is None and environ.get(CONFIG_FILE_ENV):
        config_file = Path(environ[CONFIG_FILE_ENV])
    from_file = _read_file(config_file) if config_file is not None else {}
    try:
        from_env = _Environment(environ)()
    except SourceError as exc:
        # A group given whole whose value is not JSON; pydantic-settings names the field.
        found = re.search(r'field "(\w+)"', str(exc))
        field = found.group(1) if found else "?"
        raise SettingsError(f"setting {field} ({env_name((field,))}): not a JSON object") from None
    values = _merge(_merge(from_file, from_env), _without_none(flags or {}))
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise SettingsError(_one_line(exc)) from None


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            inner = _without_none(value)
            if inner:
                out[key] = inner
        elif value is not None:
            out[key] = value
    return out


# --- description (for `gpufleet operator --help` and the README) -----------------------------


@dataclass(frozen=True, slots=True)
class SettingRow:
    key: str  # dotted path, as in the YAML file
    env: str
    default: str
    meaning: str


def _default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple) and all(isinstance(v, PodToleration) for v in value):
        return json.dumps([v.as_kubernetes() for v in value], separators=(",", ":"))
    return str(value)


def _meaning(info: FieldInfo) -> str:
    text = " ".join((info.description or "").split())
    # The policy's descriptions go on to cite their sources; what comes before says what.
    return text.split(" Source:")[0].rstrip(".") + "."


def _choices(info: FieldInfo) -> str:
    annotation = info.annotation
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return " One of: " + ", ".join(m.value for m in annotation) + "."
    return ""


def _walk(model: type[BaseModel], prefix: tuple[str, ...]) -> Iterator[SettingRow]:
    for name, info in model.model_fields.items():
        loc = (*prefix, name)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _walk(annotation, loc)
            continue
        yield SettingRow(
            ".".join(loc), env_name(loc), _default(info), _meaning(info) + _choices(info)
        )


def rows() -> list[SettingRow]:
    """Every setting, in declaration order."""
    return list(_walk(Settings, ()))


def markdown_table() -> str:
    """The README's settings table."""
    lines = ["| setting | environment | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{r.key}` | `{r.env}` | `{r.default}` | {r.meaning} |" for r in rows()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
