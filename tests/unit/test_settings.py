"""The settings root: defaults equal to the live components' former hard-coded values, the live
placement preset, weight overrides and opt-in idle-node power-down, precedence of flags over
environment over file over defaults, groups given whole as JSON, one-line errors naming the key
and what it allows, the tolerations for the operator's pods (default, replaced, emptied, checked
as the API server checks a pod's), refusal of unknown keys and of the replaced
GPUFLEET_AUTOSCALER_SETTINGS, a constructor that never reads the environment by itself, and the
README's settings table matching the fields."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.core.policy import (
    QUEUE_AGING_S,
    REQUEUE_TIMESTAMP,
    SERVICE_TIER_GPU_S,
    Engine,
    MoveRule,
    Policy,
    PowerCapRule,
    PowerDownRule,
    RequeueTimestamp,
    SolverSettings,
    Weights,
)
from gpufleet.core.presets import PRESET_NAMES, Preset, preset_policy
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.settings import (
    LeaseSettings,
    LogFormat,
    LogLevel,
    SettingsError,
    load,
    markdown_table,
    rows,
)

README = Path(__file__).resolve().parents[2] / "README.md"
TOLERATIONS = "GPUFLEET_OPERATOR__POD_TOLERATIONS"
LIVE_SOLVER = SolverSettings(skip_when_greedy_admits_all=True)


def test_defaults_are_what_the_live_components_used() -> None:
    s = load(environ={})
    # The live scheduler's former LIVE_POLICY: the core's defaults with the greedy shortcut.
    assert s.placement.policy() == Policy(solver=LIVE_SOLVER)
    assert s.scheduler == SchedulerSettings()
    assert (s.scheduler.node_failure_grace_s, s.scheduler.explain_delay_s) == (30.0, 1.0)
    assert (s.scheduler.busy_explain_delay_s, s.scheduler.bind_connections) == (5.0, 32)
    assert (s.lease.name, s.lease.namespace) == ("gpufleet-operator", "gpufleet-system")
    assert (s.lease.duration_s, s.lease.renew_period_s) == (15.0, 5.0)
    assert (s.metrics.bind_address, s.metrics.port) == ("127.0.0.1", 0)
    assert (s.log.level, s.log.format) == (LogLevel.INFO, LogFormat.TEXT)
    assert s.autoscaler == AutoscalerSettings()
    assert s.kubeconfig is None and s.namespace is None


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_is_selectable_with_the_live_solver(name: str) -> None:
    s = load(environ={"GPUFLEET_PLACEMENT__PRESET": name})
    assert s.placement.policy() == preset_policy(name, LIVE_SOLVER)


def test_energy_preset_caps_power() -> None:
    policy = load(environ={"GPUFLEET_PLACEMENT__PRESET": "energy"}).placement.policy()
    assert policy.power_caps == PowerCapRule(
        enabled=True, max_slowdown=0.05, cap_all=True, spare_only=True
    )


def test_power_down_is_off_by_default_and_opted_into_per_field() -> None:
    assert load(environ={}).placement.policy().power_down == PowerDownRule(enabled=False)
    s = load(
        environ={
            "GPUFLEET_PLACEMENT__PRESET": "energy",
            "GPUFLEET_PLACEMENT__POWER_DOWN__ENABLED": "true",
            "GPUFLEET_PLACEMENT__POWER_DOWN__BOOT_S": "120",
        }
    )
    rule = s.placement.policy().power_down
    assert rule == PowerDownRule(enabled=True, idle_s=1800.0, warm_nodes_per_type=2, boot_s=120.0)
    with pytest.raises(SettingsError, match="GPUFLEET_PLACEMENT__POWER_DOWN__IDLE_S"):
        load(environ={"GPUFLEET_PLACEMENT__POWER_DOWN__IDLE_S": "-1"})


def test_the_move_rule_is_the_cores_default_and_set_per_field() -> None:
    assert load(environ={}).placement.policy().moves == MoveRule()
    s = load(
        environ={
            "GPUFLEET_PLACEMENT__MOVES__MAX_PER_HOUR": "3",
            "GPUFLEET_PLACEMENT__MOVES__MIN_GAIN_S": "600",
        }
    )
    assert s.placement.policy().moves == MoveRule(max_per_hour=3, min_gain_s=600.0)
    assert (
        not load(environ={"GPUFLEET_PLACEMENT__MOVES__ENABLED": "false"})
        .placement.policy()
        .moves.enabled
    )
    with pytest.raises(SettingsError, match="GPUFLEET_PLACEMENT__MOVES__MAX_PER_HOUR"):
        load(environ={"GPUFLEET_PLACEMENT__MOVES__MAX_PER_HOUR": "-1"})


def test_weight_overrides_replace_only_the_weights_given() -> None:
    s = load(
        environ={
            "GPUFLEET_PLACEMENT__PRESET": "energy",
            "GPUFLEET_PLACEMENT__WEIGHTS__FRAGMENTATION": "0.5",
            "GPUFLEET_PLACEMENT__SOLVER__ENGINE": "greedy",
        }
    )
    policy = s.placement.policy()
    energy = preset_policy(Preset.ENERGY)
    assert policy.weights == dataclasses.replace(energy.weights, fragmentation=0.5)
    assert policy.weights != Weights()
    assert policy.power_caps == energy.power_caps
    assert policy.solver == dataclasses.replace(LIVE_SOLVER, engine=Engine.GREEDY)


def test_flags_win_over_environment_over_file_over_defaults(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text(
        "metrics: {port: 9001, bind_address: 0.0.0.0}\n"
        "lease: {duration_s: 30, namespace: from-file}\n"
        "log: {format: json}\n"
    )
    environ = {
        "GPUFLEET_CONFIG_FILE": str(config),
        "GPUFLEET_METRICS__PORT": "9002",
        "GPUFLEET_LEASE__DURATION_S": "20",
    }
    s = load(flags={"lease": {"duration_s": 9.0}, "log": {"level": None}}, environ=environ)
    assert s.lease.duration_s == 9.0  # flag
    assert s.metrics.port == 9002  # environment over file
    assert (s.metrics.bind_address, s.lease.namespace) == ("0.0.0.0", "from-file")
    assert s.log.format is LogFormat.JSON  # file
    assert s.log.level is LogLevel.INFO  # an unset flag leaves the default
    # An explicit file wins over the environment's file.
    other = tmp_path / "other.yaml"
    other.write_text("lease: {namespace: other}\n")
    assert load(environ=environ, config_file=other).lease.namespace == "other"


def test_a_group_given_whole_as_json_merges_with_single_fields() -> None:
    s = load(
        environ={
            "GPUFLEET_AUTOSCALER": '{"window_s": 30, "burst_memory_half_life_s": 5}',
            "GPUFLEET_AUTOSCALER__STALENESS_S": "12",
            "GPUFLEET_SANDBOX_DIR": "/elsewhere",  # another command's variable: ignored
        }
    )
    assert (s.autoscaler.window_s, s.autoscaler.burst_memory_half_life_s) == (30, 5)
    assert s.autoscaler.staleness_s == 12
    assert s.autoscaler.target_utilization == AutoscalerSettings().target_utilization


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param(
            {"GPUFLEET_PLACEMENT__PRESET": "fastest"},
            r"^setting placement\.preset \(GPUFLEET_PLACEMENT__PRESET\): .*'performance', "
            r"'balanced' or 'energy' \(got \"fastest\"\)$",
            id="preset",
        ),
        pytest.param(
            {"GPUFLEET_METRICS__PORT": "70000"},
            r"^setting metrics\.port \(GPUFLEET_METRICS__PORT\): .*less than or equal to 65535",
            id="port",
        ),
        pytest.param(
            {"GPUFLEET_LOG__FORMAT": "xml"},
            r"^setting log\.format \(GPUFLEET_LOG__FORMAT\): .*'text' or 'json'",
            id="log-format",
        ),
        pytest.param(
            {"GPUFLEET_PLACEMENT__WEIGHTS__ENERGY": "-1"},
            r"^setting placement\.weights\.energy \(GPUFLEET_PLACEMENT__WEIGHTS__ENERGY\): "
            r".*greater than or equal to 0",
            id="negative-weight",
        ),
        pytest.param(
            {"GPUFLEET_SCHEDULER__NODE_FAILURE_GRACE": "3"},
            r"^setting scheduler\.node_failure_grace \(GPUFLEET_SCHEDULER__NODE_FAILURE_GRACE\)"
            r": Extra inputs are not permitted",
            id="unknown-key",
        ),
        pytest.param(
            {"GPUFLEET_SCHEDULER__NAME": "Gpufleet_B"},
            r"^setting scheduler\.name \(GPUFLEET_SCHEDULER__NAME\): String should match pattern",
            id="scheduler-name",
        ),
        pytest.param(
            {"GPUFLEET_LEASE__RENEW_EVERY_S": "20"},
            r"^setting lease \(GPUFLEET_LEASE\): renew_every_s must be less than duration_s$",
            id="renew-after-expiry",
        ),
        # The operator-wide autoscaler settings (formerly GPUFLEET_AUTOSCALER_SETTINGS).
        pytest.param(
            {"GPUFLEET_AUTOSCALER": '{"window_s": -3}'},
            r"^setting autoscaler\.window_s \(GPUFLEET_AUTOSCALER__WINDOW_S\): .*greater than 0",
            id="autoscaler-bound",
        ),
        pytest.param(
            {"GPUFLEET_AUTOSCALER": '{"nope": 1}'},
            r"^setting autoscaler\.nope \(GPUFLEET_AUTOSCALER__NOPE\): Extra inputs",
            id="autoscaler-unknown",
        ),
        pytest.param(
            {"GPUFLEET_AUTOSCALER": "not json"},
            r"^setting autoscaler \(GPUFLEET_AUTOSCALER\): not a JSON object$",
            id="autoscaler-not-json",
        ),
        # Tolerations for the operator's pods, checked as the API server checks a pod's.
        pytest.param(
            {TOLERATIONS: '[{"operator": "Equal", "value": "x"}]'},
            r"^setting operator\.pod_tolerations\.0 \(GPUFLEET_OPERATOR__POD_TOLERATIONS\): "
            "a toleration without a key must use operator Exists$",
            id="toleration-no-key",
        ),
        pytest.param(
            {TOLERATIONS: '[{"key": "a", "operator": "Exists", "value": "x"}]'},
            r"\.pod_tolerations\.0 .*: a toleration with operator Exists takes no value$",
            id="toleration-exists-value",
        ),
        pytest.param(
            {TOLERATIONS: '[{"key": "a", "effect": "NoSchedul"}]'},
            r"\.pod_tolerations\.0\.effect .*'NoSchedule', 'PreferNoSchedule' or 'NoExecute'",
            id="toleration-effect",
        ),
        pytest.param(
            {TOLERATIONS: '[{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 60}]'},
            r"\.pod_tolerations\.0 .*: tolerationSeconds needs effect NoExecute$",
            id="toleration-seconds",
        ),
        pytest.param(
            {TOLERATIONS: '[{"key": "not a key"}]'},
            r"\.pod_tolerations\.0\.key \(GPUFLEET_OPERATOR__POD_TOLERATIONS\): .*pattern",
            id="toleration-key",
        ),
        pytest.param(
            {TOLERATIONS: '{"key": "a"}'},
            r"^setting operator\.pod_tolerations \(GPUFLEET_OPERATOR__POD_TOLERATIONS\)",
            id="toleration-not-a-list",
        ),
        pytest.param(
            {"GPUFLEET_AUTOSCALER_SETTINGS": '{"window_s": 30}'},
            r"^GPUFLEET_AUTOSCALER_SETTINGS is no longer read: set GPUFLEET_AUTOSCALER",
            id="replaced-variable",
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_key(environ: dict[str, str], expected: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load(environ=environ)
    message = str(caught.value)
    assert "\n" not in message
    assert re.search(expected, message), message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("placment: {preset: energy}\n", r"setting placment \(GPUFLEET_PLACMENT\): Extra"),
        ("metrics: [1, 2]\n", r"setting metrics \(GPUFLEET_METRICS\)"),
        ("- a list\n", r"must hold a mapping of settings"),
        ("metrics: {port: [\n", r"not valid YAML at line 2"),
    ],
)
def test_a_bad_config_file_is_named(tmp_path: Path, text: str, expected: str) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text(text)
    with pytest.raises(SettingsError, match=expected):
        load(environ={}, config_file=config)


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(SettingsError, match=f"config file {missing}: No such file"):
        load(environ={"GPUFLEET_CONFIG_FILE": str(missing)})


def test_pod_tolerations_default_to_the_gpu_operators_and_may_be_replaced_or_emptied(
    tmp_path: Path,
) -> None:
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert load(environ={}).operator.tolerations() == (gpu,)
    assert load(environ={TOLERATIONS: "[]"}).operator.tolerations() == ()
    config = tmp_path / "settings.yaml"
    config.write_text(
        "operator:\n  pod_tolerations:\n"
        "  - {key: example.com/accelerator, operator: Equal, value: a100, effect: NoSchedule}\n"
        "  - {operator: Exists, effect: NoExecute, tolerationSeconds: 300}\n"
    )
    custom = load(environ={}, config_file=config).operator.tolerations()
    assert custom == (
        {"key": "example.com/accelerator", "operator": "Equal", "value": "a100",
         "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    )  # fmt: skip
    # The environment's JSON list replaces the file's whole.
    environ = {TOLERATIONS: '[{"key": "dedicated", "operator": "Exists"}]'}
    replaced = load(environ=environ, config_file=config).operator.tolerations()
    assert replaced == ({"key": "dedicated", "operator": "Exists"},)


def test_lease_renewal_defaults_to_a_third_of_the_duration() -> None:
    assert LeaseSettings(duration_s=3).renew_period_s == 1.0
    assert LeaseSettings(duration_s=3, renew_every_s=2).renew_period_s == 2.0


def test_the_constructor_does_not_read_the_environment() -> None:
    # Only `load` (called by the composition root) reads it: a component cannot pick settings
    # up behind the root's back by building its own Settings().
    code = "from gpufleet.settings import Settings; print(Settings().metrics.port)"
    env = {**os.environ, "GPUFLEET_METRICS__PORT": "9100"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0"
    assert load(environ={"GPUFLEET_METRICS__PORT": "9100"}).metrics.port == 9100


def test_every_setting_is_described_with_its_environment_variable() -> None:
    table = rows()
    assert len({r.key for r in table}) == len(table)
    assert all(r.meaning.strip(".") and r.env.startswith("GPUFLEET_") for r in table)
    keys = {r.key for r in table}
    assert {"placement.preset", "lease.renew_every_s", "autoscaler.window_s"} <= keys
    assert len([k for k in keys if k.startswith("autoscaler.")]) == len(
        AutoscalerSettings.model_fields
    )


def test_readme_lists_every_setting() -> None:
    # Regenerate with `python -m gpufleet.settings` when a setting changes.
    assert markdown_table() in README.read_text()


def test_the_service_tier_is_the_cores_default_and_zero_turns_it_off() -> None:
    assert load(environ={}).placement.policy().service_tier_gpu_s == SERVICE_TIER_GPU_S
    env = "GPUFLEET_PLACEMENT__SERVICE_TIER_GPU_S"
    assert load(environ={env: "600"}).placement.policy().service_tier_gpu_s == 600.0
    assert load(environ={env: "0"}).placement.policy().service_tier_gpu_s is None
    with pytest.raises(SettingsError, match=env):
        load(environ={env: "-1"})


def test_the_tiers_limit_on_re_evictions_is_off_by_default_and_zero_turns_it_off() -> None:
    assert load(environ={}).placement.policy().service_tier_rerun_s is None
    env = "GPUFLEET_PLACEMENT__SERVICE_TIER_RERUN_S"
    assert load(environ={env: "1800"}).placement.policy().service_tier_rerun_s == 1800.0
    assert load(environ={env: "0"}).placement.policy().service_tier_rerun_s is None
    with pytest.raises(SettingsError, match=env):
        load(environ={env: "-1"})


def test_the_queue_aging_is_the_cores_default_and_must_be_positive() -> None:
    assert load(environ={}).placement.policy().queue_aging_s == QUEUE_AGING_S
    env = "GPUFLEET_PLACEMENT__QUEUE_AGING_S"
    assert load(environ={env: "600"}).placement.policy().queue_aging_s == 600.0
    with pytest.raises(SettingsError, match=env):
        load(environ={env: "0"})


def test_the_requeue_timestamp_is_the_cores_default_and_one_of_two() -> None:
    assert load(environ={}).placement.policy().requeue_timestamp is REQUEUE_TIMESTAMP
    env = "GPUFLEET_PLACEMENT__REQUEUE_TIMESTAMP"
    policy = load(environ={env: "creation"}).placement.policy()
    assert policy.requeue_timestamp is RequeueTimestamp.CREATION
    with pytest.raises(SettingsError, match=env):
        load(environ={env: "arrival"})
