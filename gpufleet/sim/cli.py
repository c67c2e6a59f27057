"""`gpufleet simulate`: replay a public trace through several policies and compare them.

The lead CLI (`gpufleet/cli.py`) registers the sub-command with `add_simulate_parser` and calls
`run_simulate(args)`, which returns the process exit code.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from gpufleet.core.policy import Engine

__all__ = ["DEFAULT_POLICIES", "add_simulate_parser", "default_fleet_path", "run_simulate"]

DEFAULT_POLICIES = "kube,fifo-binpack,gavel,tiresias,performance,balanced,energy"


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
    p.add_argument("--jobs", type=int, default=2000, help="number of jobs (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed for model-class assignment")
    p.add_argument("--out", type=Path, default=Path("sim-out"), help="output directory")
    p.add_argument(
        "--window",
        default=None,
        help="trace window START[,END]: dates/datetimes for philly, seconds for alibaba",
    )
    p.add_argument(
        "--load",
        type=float,
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
        type=float,
        default=0.0,
        help="philly: fraction of multi-GPU jobs that may run on half their GPUs (default 0)",
    )
    p.add_argument("--data-dir", type=Path, default=None, help="shared data directory")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=run_simulate)
    return p


def run_simulate(args: argparse.Namespace) -> int:
    """Run the comparison described by parsed `simulate` arguments; returns an exit code."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    from rich.table import Table

    from gpufleet.sim.fleet import load_fleet
    from gpufleet.sim.metrics import SimResult
    from gpufleet.sim.policies import POLICY_NAMES
    from gpufleet.sim.report import COLUMNS, fmt_cell, write_report
    from gpufleet.sim.runner import load_workload, run_policy

    console = Console(stderr=True)
    names = [n.strip() for n in str(args.policies).split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICY_NAMES and n != "best-fit"]
    if not names or unknown:
        console.print(
            f"[red]unknown policies: {', '.join(unknown) or '(none given)'}[/red]; "
            f"choose from {', '.join(POLICY_NAMES)}"
        )
        return 2
    if args.jobs is not None and args.jobs < 1:
        console.print("[red]--jobs must be at least 1[/red]")
        return 2
    fleet_path = args.fleet or default_fleet_path(
        "alibaba-mig-256.yaml" if args.trace == "alibaba" else "hetero-256.yaml"
    )
    try:
        fleet = load_fleet(fleet_path)
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
    except (OSError, ValueError, KeyError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    if not workload.jobs:
        console.print("[red]error:[/red] the selection contains no jobs")
        return 2
    results: list[SimResult] = []
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        for name in names:
            task = progress.add_task(name, total=len(workload.jobs))

            def tick(done: int, total: int, task: Any = task) -> None:
                progress.update(task, completed=done)

            results.append(
                run_policy(
                    name,
                    fleet,
                    workload,
                    seed=args.seed,
                    engine=Engine(args.engine),
                    on_progress=tick,
                )
            )
            progress.update(task, completed=len(workload.jobs))
    meta = {
        "trace": args.trace,
        "fleet": str(args.fleet) if args.fleet else f"built-in {fleet_path.name}",
        "fleet_gpus": fleet.total_gpus,
        "jobs": len(workload.jobs),
        "seed": args.seed,
        "load": args.load,
        "window": args.window,
        "engine": args.engine,
        "elastic": args.elastic,
    }
    doc = write_report(results, args.out, meta, plots=not args.no_plots)
    table = Table(title=f"{args.trace}: {len(workload.jobs)} jobs on {fleet.total_gpus} GPUs")
    for _, title, _ in COLUMNS:
        table.add_column(title)
    for s in doc["policies"]:
        table.add_row(*(fmt_cell(fmt, s[key]) for key, _, fmt in COLUMNS))
    out_console = Console()
    if not out_console.is_terminal:
        out_console = Console(width=200)  # piped: do not squeeze the table into 80 columns
    out_console.print(table)
    plots = "" if args.no_plots else " and PNG plots"
    console.print(f"wrote {args.out / 'results.json'}, {args.out / 'results.md'}{plots}")
    unfinished = sum(r.unfinished for r in results)
    if unfinished:
        console.print(f"[yellow]{unfinished} job(s) never completed (see results.json)[/yellow]")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (`python -m gpufleet.sim.cli ...`) for use before CLI wiring."""
    parser = argparse.ArgumentParser(prog="gpufleet")
    sub = parser.add_subparsers(dest="command", required=True)
    add_simulate_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
