"""The `gpufleet operator` command: its flags map onto settings, `--help` lists every setting.

Each flag sets one setting of `gpufleet.settings` and wins over the environment, the config
file and the default. Flag values are validated with the settings, so a bad value from any
source exits with status 2 and one line naming the setting and what it allows.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.settings import CONFIG_FILE_ENV, Settings, SettingsError, load, rows


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    key: tuple[str, ...]  # the setting it sets
    metavar: str
    help: str


FLAGS: tuple[Flag, ...] = (
    Flag("--kubeconfig", ("kubeconfig",), "FILE", "kubeconfig file of the cluster to manage"),
    Flag("--namespace", ("namespace",), "NS", "handle the jobs of this namespace only"),
    Flag("--preset", ("placement", "preset"), "NAME", "placement policy preset"),
    Flag("--log-level", ("log", "level"), "LEVEL", "DEBUG, INFO, WARNING or ERROR"),
    Flag("--log-format", ("log", "format"), "FORMAT", "text or json"),
    Flag("--metrics-port", ("metrics", "port"), "PORT", "serve Prometheus metrics on PORT"),
    Flag("--metrics-address", ("metrics", "bind_address"), "ADDR", "address of the metrics"),
    Flag("--admin-port", ("admin", "port"), "PORT", "serve the admin API and dashboard on PORT"),
    Flag("--admin-address", ("admin", "bind_address"), "ADDR", "address of the admin API"),
    Flag(
        "--admin-tls-cert", ("admin", "tls_cert_file"), "FILE", "PEM certificate of the admin API"
    ),
    Flag("--admin-tls-key", ("admin", "tls_key_file"), "FILE", "PEM key of the admin API"),
    Flag(
        "--node-failure-grace",
        ("scheduler", "node_failure_grace_s"),
        "S",
        "seconds a node may be NotReady before its gangs restart elsewhere",
    ),
    Flag(
        "--lease-duration",
        ("lease", "duration_s"),
        "S",
        "seconds a standby waits after the leader stops renewing before taking over",
    ),
)

DESCRIPTION = "Run the TrainingJob and ServingJob operator, the autoscaler and the scheduler."


def _epilog() -> str:
    lines = textwrap.wrap(
        "settings (a flag wins over the environment, which wins over the config file, which "
        "wins over the default; a group may also be given whole as a JSON object, e.g. "
        "GPUFLEET_AUTOSCALER='{\"window_s\": 30}'):",
        100,
    )
    for row in rows():
        lines.append(f"  {row.key} = {row.default}  [{row.env}]")
        lines += textwrap.wrap(row.meaning, 100, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    defaults = {row.key: row.default for row in rows()}
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"YAML file of settings (default: ${CONFIG_FILE_ENV}, else none)",
    )
    for flag in FLAGS:
        key = ".".join(flag.key)
        parser.add_argument(
            flag.name,
            dest=key,
            default=None,
            metavar=flag.metavar,
            help=f"{flag.help} (setting {key}; default {defaults[key]})",
        )


def _texts() -> dict[str, Any]:
    return {
        "description": DESCRIPTION,
        "epilog": _epilog(),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def add_operator_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "operator", help="run the operator, the autoscaler and the gpufleet scheduler", **_texts()
    )
    _arguments(parser)


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags set, nested like the settings' groups (unset flags left out)."""
    out: dict[str, Any] = {}
    given: Mapping[str, Any] = vars(args)
    for flag in FLAGS:
        value = given.get(".".join(flag.key))
        if value is None:
            continue
        group = out
        for part in flag.key[:-1]:
            group = group.setdefault(part, {})
        group[flag.key[-1]] = value
    return out


def settings_from(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """Flags over the environment (default os.environ) over the config file over the
    defaults; raises `SettingsError`."""
    return load(flags=flag_values(args), environ=environ, config_file=args.config)


def run_operator(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)
    except SettingsError as exc:
        print(f"gpufleet operator: error: {exc}", file=sys.stderr)
        return 2
    from gpufleet.app.process import run  # kopf and the clients, only for this command

    return run(settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufleet operator", **_texts())
    _arguments(parser)
    return run_operator(parser.parse_args(argv))
