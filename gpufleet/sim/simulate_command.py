"""`gpufleet simulate`: replay a public trace through several policies and compare them.

The lead CLI (`gpufleet/cli.py`) registers the sub-command with `add_simulate_parser` and calls
`run_simulate(args)`, which returns the process exit code. `run_simulate` runs four named steps:
check the options, load the fleet and the trace, run each policy, report. Bad input (an option,
the fleet file, the trace or profile files) raises `InputError` in the first two steps, before
any simulation starts; the entry point prints it as one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.cliargs import (
    OneLineParser,
    add_subcommands,
    ensure_output_dir,
    fraction,
    input_error_exit,
    non_negative_int,
    output_dir,
    positive_float,
    positive_int,
)
from gpufleet.core.policy import Engine
from gpufleet.model.input_error import InputError

if TYPE_CHECKING:
    from gpufleet.model.fleet import FleetSpec
    from gpufleet.sim.results import SimResult
    from gpufleet.sim.runner import Workload

__all__ = ["DEFAULT_POLICIES", "add_simulate_parser", "default_fleet_path", "run_simulate"]

DEFAULT_POLICIES = "kube,fifo-binpack,gavel,tiresias,performance,balanced,energy"
PROG = "gpufleet simulate"


def default_fleet_path(name: str = "hetero-256.yaml") -> Path:
    """A fleet file shipped with the simulator (`gpufleet/sim/fleets/`)."""
    return Path(str(resources.files("gpufleet.sim").joinpath("fleets", name)))


def add_simulate_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the `simulate` sub-command to an argparse sub-parser set."""
    p = subparsers.add_parser(
        "simulate",
        help="trace-driven comparison of placement policies",
        description="Replay a public trace on a fleet under several policies; print a table and "
        "write results.json, results.md and PNG plots.",
    )
    p.add_argument("--trace", choices=("philly", "alibaba"), required=True)
    p.add_argument(
        "--fleet",
        type=Path,
        default=None,
        help="fleet YAML (default: the shipped 256-GPU fleet for the trace, "
        "gpufleet/sim/fleets/hetero-256.yaml or alibaba-mig-256.yaml)",
    )
    p.add_argument(
        "--policies",
        default=DEFAULT_POLICIES,
        help=f"comma-separated policy names (default: {DEFAULT_POLICIES})",
    )
    p.add_argument("--jobs", type=positive_int, default=2000, help="number of jobs (default 2000)")
    p.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="seed for model-class assignment, for CP-SAT and for the kube-like baseline's "
        "random choice among equally scored nodes (default 0)",
    )
    p.add_argument("--out", type=output_dir, default=Path("sim-out"), help="output directory")
    p.add_argument(
        "--window",
        default=None,
        help="trace window START[,END]: dates/datetimes for philly, seconds for alibaba",
    )
    p.add_argument(
        "--load",
        type=positive_float,
        default=1.0,
        help="arrival speed-up: inter-arrival times are divided by this (default 1)",
    )
    p.add_argument(
        "--engine",
        choices=[e.value for e in Engine],
        default=Engine.CPSAT.value,
        help="core solver engine for gpufleet's policies (default cpsat, the product default)",
    )
    p.add_argument(
        "--alibaba-list",
        choices=("default", "gpuspec10"),
        default="gpuspec10",
        help="Alibaba pod list (gpuspec10 carries GPU-type constraints)",
    )
    p.add_argument(
        "--elastic",
        type=fraction,
        default=0.0,
        help="philly: fraction of multi-GPU jobs that may run on half their GPUs (default 0)",
    )
    p.add_argument("--data-dir", type=Path, default=None, help="shared data directory")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=run_simulate)
    return p


@dataclass(frozen=True)
class _Inputs:
    """What a run replays: the fleet (and how the report names it) and the workload."""

    fleet: FleetSpec
    fleet_label: str
    workload: Workload


def run_simulate(args: argparse.Namespace) -> int:
    """Run the comparison described by parsed `simulate` arguments; returns an exit code.

    Raises `InputError` for bad input, before any policy runs.
    """
    policies = _check_options(args)
    inputs = _load_inputs(args)
    ensure_output_dir(args.out, "--out")  # only once every input is known to be good
    results = _run_policies(args, policies, inputs)
    _report(args, inputs, results)
    return 0


def _check_options(args: argparse.Namespace) -> list[str]:
    """Step 1: the options argparse cannot check alone; returns the policy names."""
    from gpufleet.sim.policies import POLICY_NAMES
    from gpufleet.sim.traces.alibaba import parse_seconds_window
    from gpufleet.sim.traces.philly import parse_window

    names = [n.strip() for n in str(args.policies).split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICY_NAMES and n != "best-fit"]
    if not names or unknown:
        raise InputError(
            f"unknown policies: {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(POLICY_NAMES)}",
            field="--policies",
        )
    try:
        if args.trace == "alibaba":
            parse_seconds_window(args.window)
        else:
            parse_window(args.window)
    except ValueError as exc:
        raise InputError(str(exc), field="--window") from None
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise InputError(f"{args.data_dir} is not a directory", field="--data-dir")
    return names


def _load_inputs(args: argparse.Namespace) -> _Inputs:
    """Step 2: the fleet file and the trace selection, fully checked."""
    from gpufleet.model.fleet import load_fleet
    from gpufleet.model.gpus import load_catalog
    from gpufleet.sim.runner import load_workload, sim_pool_check

    fleet_path = args.fleet or default_fleet_path(
        "alibaba-mig-256.yaml" if args.trace == "alibaba" else "hetero-256.yaml"
    )
    fleet = load_fleet(fleet_path, check=sim_pool_check(load_catalog()))
    workload = load_workload(
        args.trace,
        fleet,
        jobs=args.jobs,
        seed=args.seed,
        window=args.window,
        arrival_speedup=args.load,
        data_dir=args.data_dir,
        variant=args.alibaba_list,
        elastic_fraction=args.elastic,
    )
    if not workload.jobs:
        dropped = len(workload.dropped)
        why = f" ({dropped} dropped: no node can hold them)" if dropped else ""
        raise InputError(
            f"the selection contains no jobs{why}", field="--window" if args.window else None
        )
    label = str(args.fleet) if args.fleet else f"built-in {fleet_path.name}"
    return _Inputs(fleet, label, workload)


def _run_policies(
    args: argparse.Namespace, policies: list[str], inputs: _Inputs
) -> list[SimResult]:
    """Step 3: every policy on the same workload, with a progress bar each."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from gpufleet.sim.runner import run_policy

    jobs = inputs.workload.jobs
    results: list[SimResult] = []
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as progress:
        for name in policies:
            task = progress.add_task(name, total=len(jobs))

            def tick(done: int, total: int, task: Any = task) -> None:
                progress.update(task, completed=done)

            results.append(
                run_policy(
                    name,
                    inputs.fleet,
                    inputs.workload,
                    seed=args.seed,
                    engine=Engine(args.engine),
                    on_progress=tick,
                )
            )
            progress.update(task, completed=len(jobs))
    return results


def _report(args: argparse.Namespace, inputs: _Inputs, results: list[SimResult]) -> None:
    """Step 4: results.json, results.md and plots; the table on stdout, notes on stderr."""
    from rich.console import Console
    from rich.table import Table

    from gpufleet.sim.report import COLUMNS, dropped_summary, fmt_cell, write_report

    fleet, workload = inputs.fleet, inputs.workload
    meta = {
        "trace": args.trace,
        "fleet": inputs.fleet_label,
        "fleet_gpus": fleet.total_gpus,
        "jobs": len(workload.jobs),
        "dropped_jobs": len(workload.dropped),
        "seed": args.seed,
        "load": args.load,
        "window": args.window,
        "engine": args.engine,
        "elastic": args.elastic,
    }
    doc = write_report(results, args.out, meta, plots=not args.no_plots, dropped=workload.dropped)
    table = Table(
        title=f"{args.trace}: {len(workload.jobs)} jobs on {fleet.total_gpus} GPUs",
        caption=(
            f"{len(workload.dropped)} job(s) dropped: no node of the fleet can ever hold them "
            "(listed in results.json)"
            if workload.dropped
            else None
        ),
    )
    for _, title, _ in COLUMNS:
        table.add_column(title)
    for s in doc["policies"]:
        table.add_row(*(fmt_cell(fmt, s[key]) for key, _, fmt in COLUMNS))
    out_console = Console()
    if not out_console.is_terminal:
        out_console = Console(width=200)  # piped: do not squeeze the table into 80 columns
    out_console.print(table)
    console = Console(stderr=True)
    plots = "" if args.no_plots else " and PNG plots"
    console.print(f"wrote {args.out / 'results.json'}, {args.out / 'results.md'}{plots}")
    if workload.dropped:
        # Plain print: one line, never wrapped to the terminal's width.
        print(f"{PROG}: warning: {dropped_summary(workload.dropped)}", file=sys.stderr)
    unfinished = sum(r.unfinished for r in results)
    if unfinished:
        console.print(f"[yellow]{unfinished} job(s) never completed (see results.json)[/yellow]")


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (`python -m gpufleet.sim.simulate_command ...`)."""
    parser = OneLineParser(prog="gpufleet")
    add_simulate_parser(add_subcommands(parser, "command"))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except InputError as exc:
        return input_error_exit(PROG, exc)


if __name__ == "__main__":
    sys.exit(main())
