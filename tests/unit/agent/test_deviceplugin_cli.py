"""`gpufleet device-plugin` refuses bad input with one line naming the problem (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.sandbox.control_plane import default_fleet_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--fleet", "{fleet}"], "--node-name: required (or $NODE_NAME)", id="node"),
        pytest.param(
            ["--node-name", "l4-9", "--fleet", "{fleet}"], "'l4-9' is in no pool", id="no-pool"
        ),
        pytest.param(
            ["--node-name", "l4-0", "--fleet", "{fleet}", "--poll-interval", "0"],
            "--poll-interval: must be positive",
            id="poll",
        ),
        pytest.param(
            ["--node-name", "l4-0"], "--fleet: without --fleet the plugin reads", id="no-api"
        ),
        pytest.param(
            ["--node-name", "l4-0", "--fleet", "{fleet}", "--label-node"],
            "--label-node: needs API access",
            id="label-without-api",
        ),
        pytest.param(
            ["--node-name", "l4-0", "--fleet", "{fleet}", "--mig-layouts", "{fleet}"],
            "not a mig-parted config",
            id="layouts",
        ),
    ],
)
def test_bad_input(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = str(default_fleet_path())
    argv = ["device-plugin", "--device-plugin-dir", str(tmp_path)]
    argv += [a.replace("{fleet}", fleet) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpufleet device-plugin: error: ")
    assert err.count("\n") == 1
    assert message in err
    assert not any(tmp_path.iterdir())  # nothing served, nothing created
