"""`gpufleet operator`'s command line: every flag sets its setting and wins over the
environment and the config file, unset flags leave them alone, a bad value from any source exits
with status 2 and one line on stderr (before anything connects to a cluster), and `--help`
lists every setting with its default and environment variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.app.command import FLAGS, flag_values, main, settings_from
from gpufleet.cli import build_parser
from gpufleet.settings import LogFormat, LogLevel, rows


def test_every_flag_sets_its_setting() -> None:
    args = build_parser().parse_args(
        ["operator", "--kubeconfig=/k", "--namespace=team", "--preset=energy",
         "--log-level=DEBUG", "--log-format=json", "--metrics-port=9090",
         "--metrics-address=0.0.0.0", "--node-failure-grace=2", "--lease-duration=3",
         "--admin-port=8443", "--admin-address=0.0.0.0", "--admin-tls-cert=/c.pem",
         "--admin-tls-key=/k.pem"]
    )  # fmt: skip
    s = settings_from(args, environ={})
    assert (s.kubeconfig, s.namespace, s.placement.preset) == ("/k", "team", "energy")
    assert (s.log.level, s.log.format) == (LogLevel.DEBUG, LogFormat.JSON)
    assert (s.metrics.port, s.metrics.bind_address) == (9090, "0.0.0.0")
    assert (s.scheduler.node_failure_grace_s, s.lease.duration_s) == (2.0, 3.0)
    assert (s.admin.port, s.admin.bind_address) == (8443, "0.0.0.0")
    assert (str(s.admin.tls_cert_file), str(s.admin.tls_key_file)) == ("/c.pem", "/k.pem")
    # Each flag is tested above: one argument per flag of the table.
    assert len(FLAGS) == 13


def test_flags_win_and_unset_flags_leave_the_other_sources(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("metrics: {port: 9001}\nplacement: {preset: performance}\n")
    args = build_parser().parse_args(["operator", f"--config={config}", "--metrics-port=9003"])
    assert flag_values(args) == {"metrics": {"port": "9003"}}
    s = settings_from(args, environ={"GPUFLEET_METRICS__PORT": "9002"})
    assert s.metrics.port == 9003
    assert s.placement.preset == "performance"


def test_a_bad_flag_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--preset", "fastest"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("gpufleet operator: error: setting placement.preset ")
    assert "'performance', 'balanced' or 'energy'" in err


def test_a_bad_environment_value_exits_2_before_connecting(tmp_path: Path) -> None:
    # No kubeconfig and no cluster: the process must stop at the settings, not at a connection.
    env = {**os.environ, "GPUFLEET_LOG__LEVEL": "LOUD", "KUBECONFIG": str(tmp_path / "none")}
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.app"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "gpufleet operator: error: setting log.level (GPUFLEET_LOG__LEVEL): Input should be "
        "'DEBUG', 'INFO', 'WARNING' or 'ERROR' (got \"LOUD\")"
    ]


def test_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["operator", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for row in rows():
        assert f"  {row.key} = {row.default}  [{row.env}]" in text
    for flag in FLAGS:
        assert flag.name in text
