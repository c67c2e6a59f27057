"""Bad input never ends in a traceback: issue 16's table of cases, through the entry points.

Aspects under test, for `gpufleet simulate`, `gpufleet sandbox up/demo` and the `bench/` scripts:
missing, empty, header-only, truncated and malformed trace rows; text in numeric columns;
negative token counts; bad throughput profiles; unknown GPU types, bad MIG layouts and malformed
fleet files (caught before anything starts: no output directory, no sandbox state); output
paths that are existing files; negative or zero numeric options. Each case runs the entry
point's `main([...])` in-process and checks exit status 2, exactly one line on stderr naming the
file, the line and the field, and no traceback; a few run as real subprocesses too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from gpufleet import cli
from gpufleet.sim.traces.common import default_data_dir
from tests.benchscripts import bench_module

REPO = Path(__file__).resolve().parents[3]
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
PHILLY_ROW = "2017-10-03 10:00:00,600.0,2,1200.0,6214e9\n"
ALIBABA_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "scheduled_time,deletion_time\n"
)
ALIBABA_ROW = "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,10,1000\n"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_ROW = "2023-11-16 18:17:03.9799600,1000,20\n"
FLEET_POOL = "  - name: a\n    count: 1\n    gpuType: A100-80GB\n    gpusPerNode: 8\n"


def _bench(name: str) -> ModuleType:
    return bench_module(name)


ENTRY_POINTS: dict[str, tuple[str, Callable[[], Callable[[list[str]], int]]]] = {
    "simulate": ("gpufleet simulate", lambda: cli.main),
    "sandbox": ("gpufleet sandbox", lambda: cli.main),
    "autoscaler": ("autoscaler_bench.py", lambda: _bench("autoscaler_bench").main),
    "sim_targets": ("sim_targets.py", lambda: _bench("sim_targets").main),
    "placement": ("placement_bench.py", lambda: _bench("placement_bench").main),
    "bind": ("bind_bench.py", lambda: _bench("bind_bench").main),
    "scale": ("scale_bench.py", lambda: _bench("scale_bench").main),
    "chaos": ("chaos.py", lambda: _bench("chaos").main),
    "soak": ("soak.py", lambda: _bench("soak").main),
}


def data_dir_with(tmp: Path, files: dict[str, str | bytes]) -> Path:
    """A data directory with the real throughput profile (unless replaced) and `files`."""
    data = tmp / "data"
    (data / "traces" / "alibaba-gpu-2023").mkdir(parents=True)
    (data / "profiles").mkdir()
    profile = data / "profiles" / "gavel_simulation_throughputs.json"
    profile.symlink_to(default_data_dir() / "profiles" / "gavel_simulation_throughputs.json")
    for name, body in files.items():
        path = data / name
        path.unlink(missing_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body)
    return data


def philly(body: str | bytes | None) -> Callable[[Path], list[str]]:
    """`simulate --trace philly` on a data directory whose philly.csv is `body` (None: absent)."""

    def argv(tmp: Path) -> list[str]:
        files = {} if body is None else {"traces/philly.csv": body}
        data = data_dir_with(tmp, files)
        return ["simulate", "--trace", "philly", "--data-dir", str(data), "--out", str(tmp / "o")]

    return argv


def alibaba(body: str) -> Callable[[Path], list[str]]:
    """`simulate --trace alibaba` on a data directory whose gpuspec10 pod list is `body`."""

    def argv(tmp: Path) -> list[str]:
        data = data_dir_with(tmp, {"traces/alibaba-gpu-2023/openb_pod_list_gpuspec10.csv": body})
        return ["simulate", "--trace", "alibaba", "--data-dir", str(data), "--out", str(tmp / "o")]

    return argv


def profile(body: str) -> Callable[[Path], list[str]]:
    """`simulate --trace philly` with the throughput profile replaced by `body`."""

    def argv(tmp: Path) -> list[str]:
        data = data_dir_with(tmp, {"profiles/gavel_simulation_throughputs.json": body})
        return ["simulate", "--trace", "philly", "--data-dir", str(data), "--out", str(tmp / "o")]

    return argv


def fleet(body: str | None, command: str = "simulate") -> Callable[[Path], list[str]]:
    """`simulate --fleet` or `sandbox up --fleet` with a fleet file `body` (None: absent)."""

    def argv(tmp: Path) -> list[str]:
        path = tmp / "fleet.yaml"
        if body is not None:
            path.write_text(body)
        if command == "sandbox":
            return ["sandbox", "--state-dir", str(tmp / "sandbox"), "up", "--fleet", str(path)]
        return ["simulate", "--trace", "philly", "--fleet", str(path), "--out", str(tmp / "o")]

    return argv


def scale_fleet(body: str) -> Callable[[Path], list[str]]:
    """`scale_bench.py live --fleet` with a fleet file `body`."""

    def argv(tmp: Path) -> list[str]:
        (tmp / "fleet.yaml").write_text(body)
        return ["live", "--fleet", str(tmp / "fleet.yaml")]

    return argv


def demo(fleet_body: str, example_body: str | None = None) -> Callable[[Path], list[str]]:
    """`sandbox demo` with a fleet file and the repository's examples (or one example file)."""

    def argv(tmp: Path) -> list[str]:
        (tmp / "fleet.yaml").write_text(fleet_body)
        examples = REPO / "examples"
        if example_body is not None:
            examples = tmp / "examples"
            examples.mkdir()
            (examples / "job.yaml").write_text(example_body)
        fleet = str(tmp / "fleet.yaml")
        sandbox = ["sandbox", "--state-dir", str(tmp / "sandbox")]
        return [*sandbox, "demo", "--fleet", fleet, "--examples", str(examples)]

    return argv


def simulate(*options: str) -> Callable[[Path], list[str]]:
    """`simulate --trace philly` with options (`{tmp}` in them is the test's directory)."""

    def argv(tmp: Path) -> list[str]:
        (tmp / "a-file").write_text("not a directory\n")
        rest = [o.replace("{tmp}", str(tmp)) for o in options]
        if "--out" not in rest:
            rest += ["--out", str(tmp / "o")]
        return ["simulate", "--trace", "philly", *rest]

    return argv


def azure(body: str) -> Callable[[Path], list[str]]:
    """The autoscaler benchmark replaying the trace file `body`."""

    def argv(tmp: Path) -> list[str]:
        path = tmp / "requests.csv"
        path.write_text(body)
        return ["--trace", str(path)]

    return argv


def options(*argv: str) -> Callable[[Path], list[str]]:
    """Fixed options (`{tmp}` in them is the test's directory)."""
    return lambda tmp: [a.replace("{tmp}", str(tmp)) for a in argv]


@dataclass(frozen=True)
class Case:
    """One bad input: the entry point, how to build its argv, what the error line must name."""

    id: str
    entry: str
    argv: Callable[[Path], list[str]]
    names: tuple[str, ...]  # substrings of the one error line: file:line, field, problem


CASES = [
    # Philly trace rows.
    Case("philly-missing", "simulate", philly(None), ("philly.csv: file not found",)),
    Case("philly-empty", "simulate", philly(""), ("philly.csv:1:", "empty file")),
    Case("philly-header-only", "simulate", philly(PHILLY_HEADER), ("philly.csv:2:", "no data")),
    Case(
        "philly-truncated",
        "simulate",
        philly(PHILLY_HEADER + PHILLY_ROW + "2017-10-03 11:00:00,66.0\n"),
        ("philly.csv:3:", "num_gpus:", "truncated"),
    ),
    Case(
        "philly-text-duration",
        "simulate",
        philly(PHILLY_HEADER + "2017-10-03 10:00:00,long,2,1200.0,6214e9\n"),
        ("philly.csv:2:", "duration:", "'long' is not a number"),
    ),
    Case(
        "philly-bad-timestamp",
        "simulate",
        philly(PHILLY_HEADER + PHILLY_ROW + "yesterday,600.0,1,600.0,6214e9\n"),
        ("philly.csv:3:", "timestamp:", "'yesterday' is not a timestamp"),
    ),
    Case(
        "philly-negative-gpus",
        "simulate",
        philly(PHILLY_HEADER + "2017-10-03 10:00:00,600.0,-2,1200.0,6214e9\n"),
        ("philly.csv:2:", "num_gpus:", "below the minimum 1"),
    ),
    Case(
        "philly-negative-duration",
        "simulate",
        philly(PHILLY_HEADER + PHILLY_ROW + PHILLY_ROW + "2017-10-03 12:00:00,-5,1,5,6214e9\n"),
        ("philly.csv:4:", "duration:", "below the minimum 0"),
    ),
    Case(
        "philly-missing-column",
        "simulate",
        philly("timestamp,duration,gpu_time,cluster\n2017-10-03 10:00:00,600.0,600.0,x\n"),
        ("philly.csv:1:", "num_gpus:", "missing column"),
    ),
    Case(
        "philly-extra-field",
        "simulate",
        philly(PHILLY_HEADER + PHILLY_ROW + "2017-10-03 11:00:00,600.0,2,1200.0,6214e9,oops\n"),
        ("philly.csv:3:", "6 fields, the header 5"),
    ),
    Case(
        "philly-not-utf8",
        "simulate",
        philly((PHILLY_HEADER + PHILLY_ROW).encode() + b"2017-10-03 11:00:00,60.0,1,60.0,\xff\n"),
        ("philly.csv:3:", "not UTF-8"),
    ),
    Case(
        "philly-empty-cluster",
        "simulate",
        philly(PHILLY_HEADER + "2017-10-03 10:00:00,600.0,2,1200.0,\n"),
        ("philly.csv:2:", "cluster:", "missing value"),
    ),
    # Alibaba pod list rows.
    Case(
        "alibaba-text-gpu-milli",
        "simulate",
        alibaba(ALIBABA_HEADER + ALIBABA_ROW.replace(",1000,,", ",lots,,")),
        ("openb_pod_list_gpuspec10.csv:2:", "gpu_milli:", "'lots' is not an integer"),
    ),
    Case(
        "alibaba-negative-creation",
        "simulate",
        alibaba(ALIBABA_HEADER + ALIBABA_ROW + "openb-pod-0001,1,1,1,500,,BE,Running,-7,1,9\n"),
        ("openb_pod_list_gpuspec10.csv:3:", "creation_time:", "below the minimum 0"),
    ),
    Case(
        "alibaba-deleted-before-start",
        "simulate",
        alibaba(ALIBABA_HEADER + "openb-pod-0000,1,1,1,1000,,LS,Running,0,500,100\n"),
        ("openb_pod_list_gpuspec10.csv:2:", "deletion_time:", "before the pod started"),
    ),
    Case(
        "alibaba-gpu-milli-too-large",
        "simulate",
        alibaba(ALIBABA_HEADER + "openb-pod-0000,1,1,1,2000,,LS,Running,0,5,100\n"),
        ("openb_pod_list_gpuspec10.csv:2:", "gpu_milli:", "above the maximum 1000"),
    ),
    # Throughput profile.
    Case(
        "profile-malformed-json",
        "simulate",
        profile('{\n  "v100": {\n    "x": [1,\n}\n'),
        ("gavel_simulation_throughputs.json:4:", "not valid JSON"),
    ),
    Case(
        "profile-text-rate",
        "simulate",
        profile('{"v100": {"(\'ResNet-18\', 1)": {"null": "fast"}}}'),
        ("gavel_simulation_throughputs.json:", "v100/('ResNet-18', 1):", "'fast'"),
    ),
    # Fleet files, for the simulator (checked before any output or simulation).
    Case(
        "fleet-unknown-gpu",
        "simulate",
        fleet("nodePools:\n" + FLEET_POOL.replace("A100-80GB", "X100")),
        ("fleet.yaml:4:", "nodePools[0].gpuType:", "unknown GPU type 'X100'"),
    ),
    Case(
        "fleet-text-count",
        "simulate",
        fleet("nodePools:\n" + FLEET_POOL.replace("count: 1", "count: many")),
        ("fleet.yaml:3:", "nodePools[0].count:", "'many'"),
    ),
    Case(
        "fleet-zero-gpus",
        "simulate",
        fleet("nodePools:\n" + FLEET_POOL + FLEET_POOL.replace("a\n", "b\n").replace(": 8", ": 0")),
        ("fleet.yaml:9:", "nodePools[1].gpusPerNode:", "greater than or equal to 1"),
    ),
    Case(
        "fleet-invalid-yaml",
        "simulate",
        fleet("nodePools:\n  - name: a\n   count: 1\n"),
        ("fleet.yaml:3:", "not valid YAML"),
    ),
    Case(
        "fleet-mig-on-t4",
        "simulate",
        fleet(
            "nodePools:\n" + FLEET_POOL.replace("A100-80GB", "T4") + "    mig: {config: all-1g}\n"
        ),
        ("fleet.yaml:6:", "nodePools[0].mig.config:", "does not support MIG"),
    ),
    Case(
        "fleet-unknown-field",
        "simulate",
        fleet("nodePools:\n" + FLEET_POOL + "    colour: red\n"),
        ("fleet.yaml:6:", "nodePools[0].colour:", "unknown field"),
    ),
    Case("fleet-missing", "simulate", fleet(None), ("fleet.yaml: file not found",)),
    Case("fleet-empty", "simulate", fleet(""), ("fleet.yaml:1:", "expected a mapping")),
    Case(
        "fleet-no-gpu-type",
        "simulate",
        fleet("nodePools:\n  - name: a\n    count: 1\n    gpusPerNode: 8\n"),
        ("fleet.yaml:2:", "nodePools[0].gpuType:", "required field missing"),
    ),
    # Options of `gpufleet simulate`.
    Case("jobs-zero", "simulate", simulate("--jobs", "0"), ("--jobs:", "at least 1, got 0")),
    Case("jobs-negative", "simulate", simulate("--jobs", "-5"), ("--jobs:", "at least 1")),
    Case("jobs-text", "simulate", simulate("--jobs", "ten"), ("--jobs:", "not an integer")),
    Case("load-zero", "simulate", simulate("--load", "0"), ("--load:", "must be positive")),
    Case("load-negative", "simulate", simulate("--load", "-2"), ("--load:", "must be positive")),
    Case("load-infinite", "simulate", simulate("--load", "inf"), ("--load:", "not a finite")),
    Case("seed-negative", "simulate", simulate("--seed", "-1"), ("--seed:", "not be negative")),
    Case("elastic-above-1", "simulate", simulate("--elastic", "1.5"), ("--elastic:", "0 and 1")),
    Case(
        "window-end-before-start",
        "simulate",
        simulate("--window", "2017-11-01,2017-10-01"),
        ("--window:", "not after start"),
    ),
    Case(
        "window-not-a-date",
        "simulate",
        simulate("--window", "2017-13-01"),
        ("--window:", "'2017-13-01' is not an ISO date"),
    ),
    Case(
        "window-alibaba-text",
        "simulate",
        options("simulate", "--trace", "alibaba", "--window", "soon", "--out", "{tmp}/o"),
        ("--window:", "in seconds, got 'soon'"),
    ),
    Case(
        "window-alibaba-negative",
        "simulate",
        options("simulate", "--trace", "alibaba", "--window=-5,10", "--out", "{tmp}/o"),
        ("--window:", "0 <= START < END"),
    ),
    Case(
        "out-is-a-file",
        "simulate",
        simulate("--out", "{tmp}/a-file"),
        ("--out:", "a-file is an existing file"),
    ),
    Case(
        "out-below-a-file",
        "simulate",
        simulate("--out", "{tmp}/a-file/results"),
        ("--out:", "a-file is an existing file"),
    ),
    Case("policies-unknown", "simulate", simulate("--policies", "magic"), ("--policies:", "magic")),
    Case(
        "data-dir-missing",
        "simulate",
        simulate("--data-dir", "{tmp}/nowhere"),
        ("--data-dir:", "nowhere is not a directory"),
    ),
    # The sandbox's fleet and examples (checked before anything starts).
    Case(
        "sandbox-unknown-gpu",
        "sandbox",
        fleet("nodePools:\n" + FLEET_POOL.replace("A100-80GB", "B300"), "sandbox"),
        ("fleet.yaml:4:", "nodePools[0].gpuType:", "unknown GPU type 'B300'"),
    ),
    Case(
        "sandbox-unknown-mig-layout",
        "sandbox",
        fleet("nodePools:\n" + FLEET_POOL + "    mig:\n      config: all-bogus\n", "sandbox"),
        ("fleet.yaml:7:", "nodePools[0].mig.config:", "unknown MIG config 'all-bogus'"),
    ),
    Case(
        "sandbox-negative-count",
        "sandbox",
        fleet("nodePools:\n" + FLEET_POOL.replace("count: 1", "count: -3"), "sandbox"),
        ("fleet.yaml:3:", "nodePools[0].count:", "greater than or equal to 1"),
    ),
    Case(
        "sandbox-demo-unknown-gpu",
        "sandbox",
        demo("nodePools:\n" + FLEET_POOL.replace("A100-80GB", "A100")),
        ("fleet.yaml:4:", "nodePools[0].gpuType:", "unknown GPU type 'A100'"),
    ),
    Case(
        "sandbox-demo-bad-example",
        "sandbox",
        demo("nodePools:\n" + FLEET_POOL, "kind: TrainingJob\nmetadata: {name: x\nspec: {}\n"),
        ("job.yaml:3:", "not valid YAML"),
    ),
    Case(
        "sandbox-demo-no-examples",
        "sandbox",
        options("sandbox", "--state-dir", "{tmp}/sandbox", "demo", "--examples", "{tmp}/none"),
        ("--examples:", "none not found"),
    ),
    # The autoscaler benchmark's trace and options.
    Case(
        "azure-negative-prompt",
        "autoscaler",
        azure(AZURE_HEADER + AZURE_ROW + "2023-11-16 18:17:04.1,-5,20\n"),
        ("requests.csv:3:", "ContextTokens:", "below the minimum 0"),
    ),
    Case(
        "azure-zero-output",
        "autoscaler",
        azure(AZURE_HEADER + "2023-11-16 18:17:04.1,100,0\n"),
        ("requests.csv:2:", "GeneratedTokens:", "below the minimum 1"),
    ),
    Case("azure-header-only", "autoscaler", azure(AZURE_HEADER), ("requests.csv:2:", "no data")),
    Case(
        "azure-text-tokens",
        "autoscaler",
        azure(AZURE_HEADER + "2023-11-16 18:17:04.1,many,3\n"),
        ("requests.csv:2:", "ContextTokens:", "'many' is not an integer"),
    ),
    Case(
        "autoscaler-cold-start-negative",
        "autoscaler",
        options("--cold-start", "-60"),
        ("--cold-start:", "not be negative"),
    ),
    Case(
        "autoscaler-quantile-one",
        "autoscaler",
        options("--slo-quantile", "1"),
        ("--slo-quantile:", "strictly between 0 and 1"),
    ),
    Case(
        "autoscaler-ttft-zero",
        "autoscaler",
        options("--ttft-slo", "0"),
        ("--ttft-slo:", "positive"),
    ),
    Case(
        "autoscaler-set-text",
        "autoscaler",
        options("--set", "window_s=long"),
        ("--set window_s:", "'long' is not a number"),
    ),
    Case(
        "autoscaler-set-negative",
        "autoscaler",
        options("--set", "window_s=-3"),
        ("--set window_s:", "greater than 0"),
    ),
    Case(
        "autoscaler-start-prefill-zero",
        "autoscaler",
        options("--start-prefill", "0"),
        ("--start-prefill:", "at least 1"),
    ),
    # The other benchmarks' options.
    Case("sim-targets-jobs-zero", "sim_targets", options("--jobs", "0"), ("--jobs:", "at least 1")),
    Case(
        "sim-targets-seeds-text",
        "sim_targets",
        options("--seeds", "1,x"),
        ("--seeds:", "'x' is not an integer"),
    ),
    Case(
        "sim-targets-seeds-negative",
        "sim_targets",
        options("--seeds", "1,-2"),
        ("--seeds:", "not be negative"),
    ),
    Case(
        "sim-targets-load-negative", "sim_targets", options("--load", "-8"), ("--load:", "positive")
    ),
    Case(
        "placement-workers-zero", "placement", options("--workers", "0"), ("--workers:", "at least")
    ),
    Case(
        "placement-time-limit-zero",
        "placement",
        options("--time-limit", "0"),
        ("--time-limit:", "positive"),
    ),
    Case("bind-pods-negative", "bind", options("--pods", "-1"), ("--pods:", "at least 1")),
    Case(
        "bind-log-is-a-directory",
        "bind",
        options("--operator-log", "{tmp}"),
        ("--operator-log:", "is a directory"),
    ),
    Case(
        "scale-drain-pods-negative",
        "scale",
        options("live", "--drain-pods", "-1"),
        ("--drain-pods:", "not be negative"),
    ),
    Case(
        "scale-one-table-size",
        "scale",
        options("core", "--nodes-list", "500"),
        ("--nodes-list", "two sizes"),
    ),
    Case(
        "scale-unknown-gpu",
        "scale",
        scale_fleet("nodePools:\n" + FLEET_POOL.replace("A100-80GB", "B300")),
        ("fleet.yaml:4:", "nodePools[0].gpuType:", "unknown GPU type 'B300'"),
    ),
    Case(
        "chaos-fleet-missing",
        "chaos",
        options("--fleet", "{tmp}/none.yaml"),
        ("none.yaml:", "not found"),
    ),
    Case(
        "chaos-log-dir-is-a-file",
        "chaos",
        options("--log-dir", __file__),
        ("--log-dir:", "existing file"),
    ),
    Case(
        "chaos-unknown-fault",
        "chaos",
        options("--faults", "kill,reboot"),
        ("--faults:", "unknown fault kinds ['reboot']"),
    ),
    Case("chaos-no-fault", "chaos", options("--faults", ","), ("--faults:", "unknown fault")),
    Case("soak-jobs-zero", "soak", options("--jobs", "0"), ("--jobs:", "at least 1")),
    Case("soak-rate-zero", "soak", options("--rate", "0"), ("--rate:", "positive")),
]


def _run_main(entry: str, argv: list[str]) -> int:
    """The entry point's exit status, whether it returns it or exits (argparse errors)."""
    main = ENTRY_POINTS[entry][1]()
    try:
        return main(argv)
    except SystemExit as done:
        return int(done.code or 0)


def _one_error_line(err: str, prog: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0]


def test_the_table_has_at_least_30_cases_and_unique_ids() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_exit_2(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = case.argv(tmp_path)
    code = _run_main(case.entry, argv)
    out, err = capsys.readouterr()
    assert code == 2, err
    line = _one_error_line(err, ENTRY_POINTS[case.entry][0])
    for name in case.names:
        assert name in line, f"{name!r} not in {line!r}"
    assert out == ""
    # Checked before any work: no output directory, no sandbox state.
    if "--out" in argv and "out" not in case.id:
        assert not Path(argv[argv.index("--out") + 1]).exists()
    assert not (tmp_path / "sandbox").exists()


SUBPROCESS_CASES = [
    ("philly-truncated", ["-m", "gpufleet.cli"]),
    ("fleet-unknown-gpu", ["-m", "gpufleet.cli"]),
    ("sandbox-unknown-gpu", ["-m", "gpufleet.cli"]),
    ("jobs-zero", ["-m", "gpufleet.cli"]),
    ("azure-negative-prompt", [str(REPO / "bench" / "autoscaler_bench.py")]),
    ("sim-targets-seeds-negative", [str(REPO / "bench" / "sim_targets.py")]),
]


@pytest.mark.parametrize(
    ("case_id", "command"), SUBPROCESS_CASES, ids=[c for c, _ in SUBPROCESS_CASES]
)
def test_bad_input_in_a_real_process(case_id: str, command: list[str], tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == case_id)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, *command, *case.argv(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr, ENTRY_POINTS[case.entry][0])
    assert all(name in line for name in case.names), line
    assert done.stdout == ""


def test_good_input_still_runs_through_the_same_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checks do not reject good input: a tiny replay on a valid data directory."""
    trace = PHILLY_HEADER + "".join(
        f"2017-10-03 10:{m:02d}:00,{120 + m}.0,{1 + m % 2},0,6214e9\n" for m in range(6)
    )
    data = data_dir_with(tmp_path, {"traces/philly.csv": trace})
    out = tmp_path / "o"
    argv = ["simulate", "--trace", "philly", "--data-dir", str(data), "--out", str(out)]
    code = _run_main("simulate", [*argv, "--policies", "fifo-binpack", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["jobs"] == 6 and doc["dropped"] == {"count": 0, "jobs": []}
