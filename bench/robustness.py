"""Robustness of the simulator targets over many workload samples (issue 14).

Every policy runs on every sample; per target the benchmark reports the median, the worst case
and the share of samples that meet it, and draws box plots. Samples:

* **Alibaba packing orders** (the FGD paper's method): each shipped pod list (`default`,
  `gpuspec10`, `multigpu20`) in `--orders` random orders, re-timed with the list's arrival times
  in order, never departing, until requests reach 1.2x the fleet (`gpufleet/sim/samples.py`), on
  two fleet mixes: `alibaba-mig-256.yaml` (the trace's type mix at 1/24 scale, 8-GPU MIG nodes)
  and `alibaba-shapes-273.yaml` (every node shape of the trace's node list at 1/24 scale).
  The first `--history` pods of each order are not replayed: they are the past that seeds
  gpufleet's workload estimate (`--history 0`: the online estimate alone).
  `--lists gpuspec10,default` runs those pod lists only; `--order-list 1-24,41-52` runs those
  orders instead of 1 to `--orders` (the syntax of `--seed-list`; orders are numbered from 1,
  so order 24 is the same sample in `--orders 24` and `--order-list 24`).
* **Philly windows**: `--philly-jobs` jobs from each of `--windows` start dates, arrivals sped
  up by `--load` so that queues form, one Gavel model class per job drawn from each of
  `--seeds` (seeds 0 to N-1; `--seed-list 3,5,10-14` runs those seeds instead, in that order), on
  `hetero-256.yaml` and `hetero-mix-b.yaml` (fewer fast GPUs). The jobs of the 14 days before
  the start seed the workload estimate.

Targets (worst case over samples):
* `unallocated_vs_best_fit` (Alibaba): unallocated GPUs while pods wait, balanced / best fit
  (`fifo-binpack`): <= 0.8 on every sample and <= 0.6 in the median;
* `jct_vs_strongest` (Philly): balanced's average JCT / the lowest of fifo-binpack, gavel and
  tiresias in the same sample: <= 0.9 in the median and <= 1.0 in the worst case;
* `energy_jct_vs_balanced` (Philly): the energy policy's average JCT / balanced's: <= 1.1 on
  every sample.

Samples run in `--workers` processes (default 2); each finished sample is appended to
`<out>/samples.jsonl`, and a rerun with the same settings skips the samples already there
(resumable). The last line printed is one JSON object.

    python bench/robustness.py                       # everything (hours on 2 shared cores)
    python bench/robustness.py --only alibaba        # the packing samples only
    python bench/robustness.py --quick               # 2 orders x 3 lists, 1 window x 1 seed
    python bench/robustness.py --only philly --seed-list 10-14   # held-out Philly seeds only
    python bench/robustness.py --only alibaba --lists gpuspec10 --order-list 1-24,41-52
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpufleet.core.policy import Engine
from gpufleet.model.fleet import load_fleet
from gpufleet.sim.engine import SimSettings
from gpufleet.sim.policies import POLICY_NAMES
from gpufleet.sim.report import write_box_plots
from gpufleet.sim.results import summarise
from gpufleet.sim.runner import (
    days_before,
    load_workload,
    run_policy,
    speed_model,
    with_history_prior,
)
from gpufleet.sim.samples import packing_order
from gpufleet.sim.simulate_command import default_fleet_path

ALIBABA_LISTS = ("default", "gpuspec10", "multigpu20")
ALIBABA_FLEETS = ("alibaba-mig-256.yaml", "alibaba-shapes-273.yaml")
PHILLY_FLEETS = ("hetero-256.yaml", "hetero-mix-b.yaml")
PHILLY_WINDOWS = ("2017-10-02", "2017-11-06", "2017-12-04")
STRONGEST = ("fifo-binpack", "gavel", "tiresias")
KEPT = (
    "avg_jct_h",
    "median_jct_h",
    "p99_jct_h",
    "avg_queueing_h",
    "makespan_h",
    "unallocated_gpus_waiting",
    "energy_kwh",
    "preemptions",
    "moves",
    "completed",
    "wall_s",
)


@dataclass(frozen=True)
class Target:
    """A ratio per sample and the limits it must meet."""

    name: str
    trace: str
    worst: float | None  # every sample at or below this
    median: float | None  # the median at or below this

    def met(self, values: Sequence[float]) -> bool:
        ok = True
        if self.worst is not None:
            ok = ok and max(values) <= self.worst
        if self.median is not None:
            ok = ok and statistics.median(values) <= self.median
        return ok


TARGETS = (
    Target("unallocated_vs_best_fit", "alibaba", 0.8, 0.6),
    Target("jct_vs_strongest", "philly", 1.0, 0.9),
    Target("energy_jct_vs_balanced", "philly", 1.1, None),
)


@dataclass(frozen=True)
class Sample:
    trace: str  # "alibaba" or "philly"
    variant: str  # pod list, or window start date
    fleet: str  # fleet file shipped in gpufleet/sim/fleets
    seed: int  # order, or model-class seed

    @property
    def key(self) -> str:
        return f"{self.trace}/{self.variant}/{self.fleet}/{self.seed}"

    @property
    def family(self) -> str:
        return f"{self.variant} on {self.fleet.removesuffix('.yaml')}"


@dataclass(frozen=True)
class Config:
    """Everything besides the sample that decides a result (part of the resume check)."""

    policies: tuple[str, ...]
    engine: str
    history: int
    philly_jobs: int
    load: float
    weights: tuple[tuple[str, float], ...]
    code: str  # the commit measured ("+" when the tree had changes), so reruns never mix code

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def ratios(sample: Sample, runs: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The target ratios one sample gives (NaN where a policy needed was not run)."""

    def get(policy: str, key: str) -> float:
        return float(runs[policy][key]) if policy in runs else math.nan

    out: dict[str, float] = {}
    if sample.trace == "alibaba":
        best_fit = get("fifo-binpack", "unallocated_gpus_waiting")
        for p in ("balanced", "performance", "energy"):
            name = "unallocated_vs_best_fit" if p == "balanced" else f"unallocated_vs_best_fit[{p}]"
            mine = get(p, "unallocated_gpus_waiting")
            out[name] = mine / best_fit if best_fit > 0 else (0.0 if mine == 0 else math.inf)
    else:
        # A run of some policies only (e.g. `--policies balanced,energy`) has no strongest.
        strongest = _argmin(runs)
        best = get(strongest, "avg_jct_h") if strongest else math.nan
        out["jct_vs_strongest"] = get("balanced", "avg_jct_h") / best
        out["jct_vs_strongest[performance]"] = get("performance", "avg_jct_h") / best
        out["energy_jct_vs_balanced"] = get("energy", "avg_jct_h") / get("balanced", "avg_jct_h")
        out["strongest_is"] = float(STRONGEST.index(strongest)) if strongest else math.nan
    return out


def _argmin(runs: Mapping[str, Mapping[str, float]]) -> str | None:
    present = [p for p in STRONGEST if p in runs]
    return min(present, key=lambda p: float(runs[p]["avg_jct_h"]), default=None)


def run_sample(sample: Sample, config: Config, data_dir: str | None) -> dict[str, Any]:
    """Every policy of `config` on one sample (runs in a worker process)."""
    start = time.perf_counter()
    fleet = load_fleet(default_fleet_path(sample.fleet))
    data = Path(data_dir) if data_dir else None
    weights = dict(config.weights)
    engine = Engine(config.engine)
    if sample.trace == "alibaba":
        work = load_workload(
            "alibaba", fleet, jobs=None, seed=0, data_dir=data, variant=sample.variant
        )
        replay = packing_order(work.jobs, sample.seed, fleet.total_gpus, history=config.history)
        jobs, past = replay.jobs, replay.history
        settings = SimSettings(horizon_s=jobs[-1].arrival_s + 60.0)
    else:
        window = sample.variant
        work = load_workload(
            "philly",
            fleet,
            jobs=config.philly_jobs,
            seed=sample.seed,
            window=window,
            arrival_speedup=config.load,
            data_dir=data,
        )
        jobs = work.jobs
        earlier = days_before(window)
        past = load_workload(
            "philly", fleet, jobs=None, seed=sample.seed, window=earlier, data_dir=data
        ).jobs
        settings = SimSettings()
    settings = with_history_prior(settings, past, fleet, work.catalog, speed_model(fleet, work))
    runs: dict[str, dict[str, float]] = {}
    for policy in config.policies:
        result = run_policy(
            policy,
            fleet,
            work,
            seed=sample.seed,
            engine=engine,
            settings=settings,
            jobs=jobs,
            weights=weights,
        )
        summary = summarise(result)
        runs[policy] = {k: float(summary[k]) for k in KEPT if k in summary}
    return {
        "sample": asdict(sample),
        "key": sample.key,
        "config": config.digest(),
        "code": config.code,
        "jobs": len(jobs),
        "history": len(past),
        "runs": runs,
        "ratios": ratios(sample, runs),
        "wall_s": time.perf_counter() - start,
    }


def code_version() -> str:
    """The checkout's commit, with "+" when files differ from it ("unknown" outside git)."""
    here = Path(__file__).resolve().parent
    try:
        head = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, check=True
            )
            .stdout.decode()
            .strip()
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


def parse_seed_list(text: str, *, lowest: int = 0, what: str = "seed") -> tuple[int, ...]:
    """`--seed-list`: seeds and inclusive ranges, comma-separated ("3,5,10-12" -> 3, 5, 10, 11,
    12), in the order given, each once (`--order-list`: the same, numbers from 1)."""
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {what} or a range: {part!r}") from None
        if low < lowest or high < low:
            raise argparse.ArgumentTypeError(f"{what}s are >= {lowest} and ranges ascend: {part!r}")
        seeds.extend(s for s in range(low, high + 1) if s not in seeds)
    return tuple(seeds)


def parse_order_list(text: str) -> tuple[int, ...]:
    """`--order-list`: Alibaba orders as `--seed-list` takes seeds; orders are numbered from 1,
    as `--orders N` numbers them (order k is the same sample either way)."""
    return parse_seed_list(text, lowest=1, what="order")


def parse_lists(text: str) -> tuple[str, ...]:
    """`--lists`: Alibaba pod lists, comma-separated, in the order given, each once."""
    lists: list[str] = []
    for part in text.split(","):
        name = part.strip()
        if name not in ALIBABA_LISTS:
            raise argparse.ArgumentTypeError(
                f"not a pod list: {name!r} (lists: {', '.join(ALIBABA_LISTS)})"
            )
        if name not in lists:
            lists.append(name)
    return tuple(lists)


def philly_seeds(args: argparse.Namespace) -> Sequence[int]:
    """The Philly seeds to run: `--seed-list` if given, else 0 to `--seeds` - 1."""
    chosen: Sequence[int] | None = args.seed_list
    return chosen if chosen is not None else range(args.seeds)


def alibaba_orders(args: argparse.Namespace) -> Sequence[int]:
    """The Alibaba orders to run: `--order-list` if given, else 1 to `--orders`."""
    chosen: Sequence[int] | None = args.order_list
    return chosen if chosen is not None else range(1, args.orders + 1)


def samples_for(args: argparse.Namespace) -> list[Sample]:
    """Every sample, the order/seed index outermost and the two traces interleaved, so that a run
    cut short (or still going) has covered every list, window and fleet about equally. Alibaba
    orders run in `alibaba_orders` order, the pod lists of `--lists` in the order given, Philly
    seeds in `philly_seeds` order."""
    alibaba: list[Sample] = []
    philly: list[Sample] = []
    if args.only in (None, "alibaba"):
        for k in alibaba_orders(args):
            for fleet in ALIBABA_FLEETS:
                alibaba.extend(Sample("alibaba", variant, fleet, k) for variant in args.lists)
    if args.only in (None, "philly"):
        for seed in philly_seeds(args):
            for fleet in PHILLY_FLEETS:
                philly.extend(Sample("philly", w, fleet, seed) for w in args.windows.split(","))
    out: list[Sample] = []
    for i in range(max(len(alibaba), len(philly))):
        out.extend(batch[i] for batch in (philly, alibaba) if i < len(batch))
    return out


def load_done(path: Path, digest: str | None) -> dict[str, dict[str, Any]]:
    """The rows of `path` measured with configuration `digest` (None: the last row's)."""
    rows: list[dict[str, Any]] = []
    if path.exists():
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    if digest is None and rows:
        digest = rows[-1]["config"]
    return {row["key"]: row for row in rows if row.get("config") == digest}


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per ratio: median, worst, and for targets the share of samples meeting the limit."""
    values: dict[str, list[float]] = {}
    for row in rows:
        for name, value in row["ratios"].items():
            if name != "strongest_is" and not math.isnan(value):
                values.setdefault(name, []).append(value)
    out: dict[str, dict[str, Any]] = {}
    for name, vals in sorted(values.items()):
        entry: dict[str, Any] = {
            "samples": len(vals),
            "median": statistics.median(vals),
            "worst": max(vals),
            "best": min(vals),
        }
        target = next((t for t in TARGETS if t.name == name), None)
        if target is not None:
            limit = target.worst if target.worst is not None else target.median
            assert limit is not None
            entry["limit_worst"] = target.worst
            entry["limit_median"] = target.median
            entry["share_meeting"] = sum(1 for v in vals if v <= limit) / len(vals)
            entry["met"] = target.met(vals)
        out[name] = entry
    return out


def print_report(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> None:
    print("\n## Per sample\n")
    print("| sample | jobs | ratios |")
    print("|---|---|---|")
    for row in sorted(rows, key=lambda r: r["key"]):
        shown = ", ".join(
            f"{k}={v:.2f}" for k, v in row["ratios"].items() if "[" not in k and k != "strongest_is"
        )
        print(f"| {row['key']} | {row['jobs']} | {shown} |")
    print("\n## Targets\n")
    print(
        "| ratio | samples | median | worst | best | limit (worst / median) | share meeting | met |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, e in summary.items():
        limits = f"{e.get('limit_worst') or '-'} / {e.get('limit_median') or '-'}"
        share = f"{e['share_meeting']:.0%}" if "share_meeting" in e else "-"
        met = ("yes" if e["met"] else "NO") if "met" in e else "-"
        print(
            f"| {name} | {e['samples']} | {e['median']:.2f} | {e['worst']:.2f} | "
            f"{e['best']:.2f} | {limits} | {share} | {met} |"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out/robustness"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", choices=("alibaba", "philly"), default=None)
    parser.add_argument(
        "--orders", type=int, default=8, help="random orders per Alibaba list: orders 1 to N"
    )
    parser.add_argument(
        "--order-list",
        type=parse_order_list,
        default=None,
        metavar="ORDERS",
        help="the Alibaba orders to run instead of --orders, in this order, e.g. 1-24,41-52 "
        "(order k is the sample --orders N >= k runs as order k)",
    )
    parser.add_argument(
        "--lists",
        type=parse_lists,
        default=ALIBABA_LISTS,
        metavar="LISTS",
        help=f"the Alibaba pod lists to run, e.g. gpuspec10 (default: {','.join(ALIBABA_LISTS)})",
    )
    parser.add_argument("--history", type=int, default=1000, help="pods before each order")
    parser.add_argument("--windows", default=",".join(PHILLY_WINDOWS))
    parser.add_argument(
        "--seeds", type=int, default=5, help="Philly seeds per window: seeds 0 to N-1"
    )
    parser.add_argument(
        "--seed-list",
        type=parse_seed_list,
        default=None,
        metavar="SEEDS",
        help="the Philly seeds to run instead of --seeds, in this order, e.g. 3,5,10-14 "
        "(a rerun of chosen seeds; the results file resumes as usual)",
    )
    parser.add_argument("--philly-jobs", type=int, default=2000)
    parser.add_argument("--load", type=float, default=16.0, help="Philly arrival speed-up")
    parser.add_argument("--engine", choices=[e.value for e in Engine], default="cpsat")
    parser.add_argument("--policies", default=",".join(POLICY_NAMES))
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="WEIGHT=VALUE",
        help="objective weight of gpufleet's policies (sensitivity runs)",
    )
    parser.add_argument("--quick", action="store_true", help="2 orders, 1 window, 1 seed")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--report",
        action="store_true",
        help="run nothing: summarise and plot the samples of the last configuration in "
        "<out>/samples.jsonl (a run cut short, or plots redrawn)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.report:
        rows = list(load_done(args.out / "samples.jsonl", None).values())
        if not rows:
            parser.error(f"no samples in {args.out / 'samples.jsonl'}")
        codes = sorted({str(r.get("code", "unknown")) for r in rows})
        return finish(rows, {"digest": rows[0]["config"], "code": ",".join(codes)}, args)
    if args.quick:
        args.orders, args.seeds, args.windows = 2, 1, PHILLY_WINDOWS[1]
    if args.workers < 1 or args.orders < 1 or args.seeds < 1 or args.history < 0:
        parser.error("--workers, --orders and --seeds must be >= 1, --history >= 0")
    try:
        weights = tuple(sorted((k, float(v)) for k, v in (s.split("=", 1) for s in args.set)))
    except ValueError:
        parser.error("--set takes WEIGHT=NUMBER")
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        parser.error(f"unknown policies: {', '.join(unknown)}")
    config = Config(
        policies, args.engine, args.history, args.philly_jobs, args.load, weights, code_version()
    )
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "samples.jsonl"
    done = load_done(results, config.digest())
    todo = [s for s in samples_for(args) if s.key not in done]
    print(f"{len(done)} samples done, {len(todo)} to run ({args.workers} workers)", flush=True)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = {pool.submit(run_sample, s, config, args.data_dir): s for s in todo}
        for future in as_completed(futures):
            row = future.result()
            with results.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            done[row["key"]] = row
            shown = ", ".join(f"{k}={v:.2f}" for k, v in row["ratios"].items() if "[" not in k)
            print(f"{row['key']}: {shown} ({row['wall_s']:.0f} s)", flush=True)
    wanted = {s.key for s in samples_for(args)}
    rows = [r for k, r in done.items() if k in wanted]
    return finish(rows, {"digest": config.digest(), **asdict(config)}, args)


def finish(rows: Sequence[Mapping[str, Any]], config: Mapping[str, Any], args: Any) -> int:
    """Print the per-sample and target tables, draw the box plots, write summary.json."""
    summary = aggregate(rows)
    print_report(rows, summary)
    plots: list[str] = []
    if not args.no_plots and rows:
        plots = [p.name for p in write_box_plots(rows, TARGETS, args.out)]
    doc = {
        "bench": "robustness",
        "config": dict(config),
        "samples": len(rows),
        "summary": summary,
        "plots": plots,
    }
    (args.out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
