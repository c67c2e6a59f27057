"""Queues on the Philly trace (issue 13): gpufleet vs a Kueue-like and a Gavel-style baseline.

The 15 Philly virtual clusters are the tenants (`gpufleet/sim/tenants.py`): one queue each, with
nominal quotas on every GPU type of the 256-GPU heterogeneous fleet proportional to its share of
the GPU-hours in the `--history-days` before the window starts, so no policy is set up from the
jobs it is scored on. Each sample is one (window, seed): `--jobs` jobs from the window's start,
arrivals sped up `--load` times; the seed draws each job's Gavel model class (its speed on each
type). Every policy replays the same sample through the same engine and snapshot (with queues):

* `gpufleet` - the core `place` (balanced preset; `--engine`, greedy by default for time);
* `kueue` - Kueue-like: nominal quotas + borrowing + reclaim, FIFO per queue, flavors in one
  fixed order (`gpufleet/sim/kueue_like.py`);
* `gavel-tenants` - Gavel-style weighted max-min across tenants in effective throughput, every
  360 s round, no quotas (`gpufleet/sim/baselines.py`).

Metrics per tenant and per replay are defined in `gpufleet/sim/tenant_metrics.py`. Targets
(gpufleet against `kueue`, per sample; median and worst case over the samples reported):
utilisation >= kueue's (ratio >= 1), reported both as busy GPU-seconds and as work (busy
GPU-seconds weighted by the job's speed over its fastest; the plain figure rewards running jobs
on slow types); worst-tenant finish-time fairness rho <= 0.8x kueue's; average JCT <= 0.9x
kueue's; 0 quota violations. The queues' weights are equal by default (`--weights share`: each
tenant's history share, as before; see `gpufleet/sim/tenants.py`).

Idle GPUs are reported two ways: quota-blind per type (`tenant_metrics.IdleMonitor`: a type's
idle GPUs count while any waiting gang fits them), and *usable* (`gpufleet/sim/usable_idle.py`):
the idle GPUs the waiting gangs could legally take at once (their queue's quota allows it, they
fit node by node, each GPU counted once), split into those awaiting the next cycle and those
the last decision left so, by cause on the policy's side (a reservation, a move's or an
eviction's freed GPUs, the gang's pending reason, not offered to the decision); the same
count with quotas ignored (*quota-blind*) shows the idle capacity the quotas alone keep.

Windows: the tuning windows (`--set tuning`) are for trying policy changes; the scoring windows
(`--set scoring`, the default) are the ones reported, and nothing was tuned on them; the
held-out windows (`--set heldout`) were added later, unseen by every change before them, and
are reported separately from the scoring windows. The held-out windows were then used to
diagnose why a rule failed on them (bench/README.md, Queues, twelfth pass), so they are seen
from then on; the fresh windows (`--set fresh`) were added in the thirteenth pass (2026-12-05)
as the unseen set for the change made from that diagnosis. Of them, 2017-11-18 seed 2 was then
used to diagnose the owed gangs it shows (fourteenth pass: the quota monitor and the reclaim,
no rule chosen on it), so that window is seen from then on; 2017-11-04 and 2017-11-28 are not.
Two sets were added on 2026-12-06: `--set diagnosis` (windows free to look into for why a target
misses, like tuning) and `--set unseen`, run only once a stop's changes have landed, to report
on samples no change was chosen or checked on.

Usage: `python bench/queue_bench.py [--set scoring|tuning|heldout|fresh|diagnosis|unseen]
[--windows D1,D2] [--seeds 0,1] [--jobs N] [--load K] [--history-days D] [--engine greedy|cpsat]
[--type-delay SHARE] [--aging-s S] [--service-tier-gpu-s S] [--requeue-timestamp eviction|creation]
[--tier-rerun-s S] [--checkpoint-interval S] [--weights equal|share] [--validate]
[--policies gpufleet,kueue,...]`; the last line printed is one JSON object. `--policies` must
include gpufleet and kueue (the targets compare them). `--validate` checks each of gpufleet's
decisions with the core's validator as it is made (`gpufleet/sim/checked.py`; slower) and
reports the problems found per sample and in all.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping
from datetime import date
from typing import Any

from gpufleet.cliargs import (
    OneLineParser,
    fraction,
    input_error_exit,
    non_negative_float,
    non_negative_int_list,
    positive_float,
    positive_int,
)
from gpufleet.core.policy import SERVICE_TIER_GPU_S, Engine, Policy, RequeueTimestamp, TypeDelay
from gpufleet.model.fleet import load_fleet
from gpufleet.model.input_error import InputError
from gpufleet.sim.engine import SimSettings
from gpufleet.sim.runner import load_workload
from gpufleet.sim.simulate_command import default_fleet_path
from gpufleet.sim.tenant_run import TENANT_POLICIES, run_tenants
from gpufleet.sim.tenants import WEIGHTS, history_before, philly_gpu_hours, tenant_setup
from gpufleet.sim.traces.common import default_data_dir
from gpufleet.sim.usable_idle import CAUSES, NONE_FITS

PROG = "queue_bench.py"
FLEET = "hetero-256.yaml"
# Window starts (trace dates). Tuning windows come before the scoring ones, and every window
# has at least two weeks of trace before it for the quotas' history.
# The held-out windows were added after four passes of results on the scoring windows (whose
# diagnosis looked at them): no pass before ran them, so they are the samples a change is
# reported on that nobody has seen. The fresh windows were added in the thirteenth pass, once
# the held-out ones had served to diagnose a rule (finish-time fairness): no pass before ran
# them. No two windows overlap (1,000 jobs span 8-90 trace hours: 2017-11-04 and 2017-11-18
# start on a Saturday and end before the next window). The diagnosis and unseen windows were
# added on 2026-12-06 from the dates left between the others, checked the same way (arrival
# spans at 1,000 jobs: 10-19 24 h, 10-26 15 h, 10-27 23 h, 11-11 30 h, 12-04 48 h).
WINDOW_SETS: dict[str, tuple[str, ...]] = {
    "tuning": ("2017-10-16", "2017-10-23"),
    "scoring": ("2017-11-01", "2017-11-15", "2017-12-01"),
    "heldout": ("2017-11-08", "2017-11-22", "2017-12-08"),
    "fresh": ("2017-11-04", "2017-11-18", "2017-11-28"),
    "diagnosis": ("2017-10-19", "2017-10-26"),
    "unseen": ("2017-10-27", "2017-11-11", "2017-12-04"),
}
# Target per ratio: (limit, direction); "min" = the ratio must be at least the limit.
TARGETS: dict[str, tuple[float, str]] = {
    "utilisation_vs_kueue": (1.0, "min"),
    "work_utilisation_vs_kueue": (1.0, "min"),
    "worst_rho_vs_kueue": (0.8, "max"),
    "avg_jct_vs_kueue": (0.9, "max"),
    "quota_violations": (0.0, "max"),
}

# Idle GPU-seconds over the arrival span as shares of its capacity (tenant_metrics.py): all idle
# GPUs, those while some gang waits, those with a waiting gang that fits their count, and those
# with one that fits node by node, and of the last two those a decision left so (not those freed
# or wanted since, awaiting the next cycle); and those with one that would fit them gathered on
# whole nodes ("placeable if packed": minus the placeable ones, the fragmented part). Reported
# per policy and as gpufleet's minus kueue's; "held" = 1 - utilisation - idle: GPUs allocated to
# gangs not running (restarting, starting).
IDLE_FIGURES: dict[str, str] = {
    "held": "held",
    "idle": "idle",
    "idle_while_waiting": "idle, a gang waits",
    "idle_with_demand": "idle with demand",
    "idle_placeable": "idle, placeable",
    "idle_packable": "idle, placeable if packed",
    "idle_with_demand_left": "with demand, left by a decision",
    "idle_placeable_left": "placeable, left by a decision",
}


# Idle GPUs the waiting gangs could legally take at once (`gpufleet/sim/usable_idle.py`): their
# quota allows it and they fit node by node, each GPU counted once; split into those a decision
# left so (by cause on the policy's side) and those awaiting the next cycle.
USABLE_CAUSES = CAUSES
# Idle GPUs while gangs wait but none fits them even ignoring quotas, by why
# (`usable_idle.NONE_FITS`): report key per cause.
NONE_FITS_KEYS: dict[str, str] = {f"none_fits_{c.replace(' ', '_')}": c for c in NONE_FITS}


def _window_date(text: str) -> str:
    try:
        return date.fromisoformat(text.strip()).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO date (YYYY-MM-DD)") from None


def _window_list(text: str) -> list[str]:
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected at least one date")
    return [_window_date(t) for t in items]


def _policy_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = sorted(set(names) - set(TENANT_POLICIES))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown policy {', '.join(unknown)}; choose from {', '.join(TENANT_POLICIES)}"
        )
    if not {"gpufleet", "kueue"} <= set(names):
        raise argparse.ArgumentTypeError("the policies must include gpufleet and kueue")
    return [p for p in TENANT_POLICIES if p in names]


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(WINDOW_SETS), default="scoring", dest="window_set")
    parser.add_argument("--windows", type=_window_list, default=None, help="window start dates")
    parser.add_argument("--seeds", type=non_negative_int_list, default=[0, 1])
    parser.add_argument("--jobs", type=positive_int, default=1000)
    parser.add_argument("--load", type=positive_float, default=8.0)
    parser.add_argument("--history-days", type=positive_float, default=14.0)
    parser.add_argument("--engine", choices=[e.value for e in Engine], default="greedy")
    parser.add_argument(
        "--type-delay",
        type=fraction,
        default=0.0,
        metavar="SHARE",
        help="gpufleet: start a new gang only on types >= SHARE of its fastest type's speed "
        "(core TypeDelay, patience 1800 s); off by default",
    )
    parser.add_argument(
        "--aging-s",
        type=positive_float,
        default=None,
        help="gpufleet: queue aging (core Policy.queue_aging_s; default the core's, 3600 s)",
    )
    parser.add_argument(
        "--service-tier-gpu-s",
        type=non_negative_float,
        default=SERVICE_TIER_GPU_S,
        metavar="S",
        help="gpufleet: the service tier's threshold in GPU-seconds (core "
        f"Policy.service_tier_gpu_s; default the core's, {SERVICE_TIER_GPU_S:g}; 0: no tier)",
    )
    parser.add_argument(
        "--requeue-timestamp",
        choices=[r.value for r in RequeueTimestamp],
        default=None,
        help="gpufleet: where an evicted gang goes back in line (core "
        "Policy.requeue_timestamp; default the core's); kueue always requeues by eviction",
    )
    parser.add_argument(
        "--tier-rerun-s",
        type=positive_float,
        default=None,
        metavar="S",
        help="gpufleet: the service tier does not evict a gang it evicted before until its "
        "current run has lasted S seconds (core Policy.service_tier_rerun_s; default the "
        "core's)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=non_negative_float,
        default=0.0,
        metavar="S",
        help="both policies: jobs checkpoint every S seconds of run time, so an evicted job "
        "redoes the work since its last checkpoint (SimSettings.checkpoint_interval_s); "
        "default 0: they checkpoint on the eviction's signal and lose nothing",
    )
    parser.add_argument("--weights", choices=WEIGHTS, default="equal", help="queue weights")
    parser.add_argument(
        "--validate",
        action="store_true",
        help="check each of gpufleet's decisions with the core's validator (decision_problems, "
        "with its service tier settings) and report the problems found",
    )
    parser.add_argument(
        "--policies", type=_policy_list, default=list(TENANT_POLICIES), help="comma-separated"
    )
    return parser


def sample(window: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every policy on one (window, seed); the reports and gpufleet's ratios to kueue."""
    fleet = load_fleet(default_fleet_path(FLEET))
    work = load_workload(
        "philly", fleet, jobs=args.jobs, seed=seed, window=window, arrival_speedup=args.load
    )
    if not work.jobs:
        raise InputError(f"no Philly jobs from {window}")
    history = history_before(window, args.history_days)
    trace = default_data_dir() / "traces" / "philly.csv"
    setup = tenant_setup(philly_gpu_hours(trace, history), fleet, history, args.weights)
    reports: dict[str, dict[str, Any]] = {}
    for name in args.policies:
        t0 = time.perf_counter()
        run = run_tenants(
            name,
            fleet,
            work,
            setup,
            engine=Engine(args.engine),
            seed=seed,
            settings=SimSettings(checkpoint_interval_s=args.checkpoint_interval or None),
            type_delay=TypeDelay(args.type_delay) if args.type_delay > 0 else None,
            aging_s=args.aging_s,
            service_tier_gpu_s=args.service_tier_gpu_s or None,
            requeue_timestamp=RequeueTimestamp(args.requeue_timestamp)
            if args.requeue_timestamp
            else None,
            tier_rerun_s=args.tier_rerun_s,
            validate=args.validate,
        )
        reports[name] = run.report.as_dict() | {"wall_s": time.perf_counter() - t0}
        if run.checked is not None:
            reports[name]["validator"] = run.checked.as_dict()
    for r in reports.values():
        r["held"] = 1.0 - r["utilisation"] - r["idle"]  # without MIG: busy + held + idle = 1
    gf, kq = reports["gpufleet"], reports["kueue"]
    ratios = {
        "utilisation_vs_kueue": gf["utilisation"] / kq["utilisation"],
        "work_utilisation_vs_kueue": gf["work_utilisation"] / kq["work_utilisation"],
        "worst_rho_vs_kueue": gf["worst_rho"] / kq["worst_rho"],
        "avg_jct_vs_kueue": gf["avg_jct_h"] / kq["avg_jct_h"],
        "quota_violations": float(gf["violations"]),
    }
    # Idle GPUs as shares of the capacity over the arrival span: gpufleet's minus kueue's.
    idle_gap = {key: gf[key] - kq[key] for key in IDLE_FIGURES}
    for r in reports.values():
        r["usable_idle_next_cycle"] = r["usable_idle"] - r["usable_idle_left"]
        for key, cause in NONE_FITS_KEYS.items():
            r[key] = r["idle_none_fits_by_cause"].get(cause, 0.0)
    idle_gap |= {
        key: gf[key] - kq[key]
        for key in (
            "usable_idle",
            "usable_idle_left",
            "usable_idle_next_cycle",
            "usable_idle_quota_blind",
            *NONE_FITS_KEYS,
        )
    }
    tenants = sorted({j.queue for j in work.jobs})
    return {
        "window": window,
        "seed": seed,
        "jobs": len(work.jobs),
        "tenants": len(tenants),
        "history": history,
        "reports": reports,
        "ratios": ratios,
        "idle_vs_kueue": idle_gap,
    }


def _met(key: str, value: float) -> bool:
    limit, direction = TARGETS[key]
    return value >= limit if direction == "min" else value <= limit


def _worst(key: str, values: list[float]) -> float:
    return min(values) if TARGETS[key][1] == "min" else max(values)


def _print_gaps(
    samples: list[dict[str, Any]], labels: Mapping[str, str]
) -> dict[str, dict[str, float]]:
    """gpufleet's figure minus kueue's over the samples, per key of `labels` (printed under its
    label): median, max and how many samples are not above kueue's; printed and returned."""
    print("\n| gpufleet - kueue | median | max | samples gpufleet <= kueue |")
    print("|---|---|---|---|")
    out: dict[str, dict[str, float]] = {}
    for key, label in labels.items():
        gaps = [s["idle_vs_kueue"][key] for s in samples]
        out[key] = {
            "median": statistics.median(gaps),
            "max": max(gaps),
            "not_above": sum(1 for g in gaps if g <= 0),
            "samples": len(gaps),
        }
        print(
            f"| {label} | {out[key]['median']:+.4f} | {out[key]['max']:+.4f} "
            f"| {out[key]['not_above']} of {len(gaps)} |"
        )
    return out


def _print_idle(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The idle-GPU table per sample and policy, then gpufleet's minus kueue's over the
    samples; returns that summary."""
    print(
        "\n## Idle GPUs (GPU-seconds / (fleet GPUs x span from the first to the last "
        "arrival); with demand: a waiting gang accepting the type needs at most its idle GPUs; "
        "placeable: and fits on them node by node; held: allocated to gangs not running)\n"
    )
    labels = " | ".join(IDLE_FIGURES.values())
    print(f"| window | seed | policy | util. | {labels} | with demand by type |")
    print("|---" * (5 + len(IDLE_FIGURES)) + "|")
    for s in samples:
        for name, r in s["reports"].items():
            by_type = ", ".join(f"{t} {v:.3f}" for t, v in r["idle_with_demand_by_type"].items())
            figures = " | ".join(f"{r[key]:.3f}" for key in IDLE_FIGURES)
            print(
                f"| {s['window']} | {s['seed']} | {name} | {r['utilisation']:.3f} | {figures} "
                f"| {by_type or '-'} |"
            )
    return _print_gaps(samples, IDLE_FIGURES)


def _print_validator(samples: list[dict[str, Any]]) -> dict[str, int]:
    """The validator's findings on gpufleet's decisions per sample (`--validate`); the totals."""
    print("\n## The core's validator on gpufleet's decisions\n")
    print("| window | seed | decisions | problems | first problem |")
    print("|---|---|---|---|---|")
    total = {"decisions": 0, "problems": 0}
    for s in samples:
        found = s["reports"]["gpufleet"]["validator"]
        first = found["examples"][0] if found["examples"] else "-"
        print(
            f"| {s['window']} | {s['seed']} | {found['decisions']} | {found['problems']} "
            f"| {first} |"
        )
        total["decisions"] += found["decisions"]
        total["problems"] += found["problems"]
    print(f"\nIn all: {total['problems']} problems in {total['decisions']} decisions.")
    return total


def _print_usable(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The usable idle GPUs per sample and policy, those a decision left by cause, then
    gpufleet's minus kueue's over the samples; returns that summary."""
    print(
        "\n## Usable idle GPUs (GPU-seconds / (fleet GPUs x arrival span) that waiting gangs "
        "could legally take at once: quota allows, fits node by node; left: by the last "
        "decision, by cause; next cycle: freed or arrived since; quota-blind: usable with "
        "quotas ignored)\n"
    )
    causes = " | ".join(USABLE_CAUSES)
    print(f"| window | seed | policy | quota-blind | usable | next cycle | left | {causes} |")
    print("|---" * (7 + len(USABLE_CAUSES)) + "|")
    for s in samples:
        for name, r in s["reports"].items():
            by_cause = r["usable_idle_left_by_cause"]
            split = " | ".join(f"{by_cause.get(c, 0.0):.4f}" for c in USABLE_CAUSES)
            print(
                f"| {s['window']} | {s['seed']} | {name} | {r['usable_idle_quota_blind']:.4f} "
                f"| {r['usable_idle']:.4f} "
                f"| {r['usable_idle_next_cycle']:.4f} | {r['usable_idle_left']:.4f} | {split} |"
            )
    keys = ("usable_idle_quota_blind", "usable_idle", "usable_idle_next_cycle", "usable_idle_left")
    return _print_gaps(samples, {key: key for key in keys})


def _print_none_fits(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The idle GPUs no waiting gang fits even ignoring quotas, by cause, per sample and
    policy, then gpufleet's minus kueue's; returns that summary."""
    print(
        "\n## Idle while gangs wait but none fits, quotas ignored (GPU-seconds / (fleet GPUs x "
        "arrival span), by why: no gang left wants the type; the gangs left need more GPUs on "
        "one node than its nodes hold; more than it has idle; enough idle, not node by node)\n"
    )
    causes = " | ".join(NONE_FITS_KEYS.values())
    print(f"| window | seed | policy | {causes} |")
    print("|---" * (3 + len(NONE_FITS_KEYS)) + "|")
    for s in samples:
        for name, r in s["reports"].items():
            split = " | ".join(f"{r[key]:.4f}" for key in NONE_FITS_KEYS)
            print(f"| {s['window']} | {s['seed']} | {name} | {split} |")
    return _print_gaps(samples, NONE_FITS_KEYS)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except InputError as exc:
        return input_error_exit(PROG, exc)


def _run(args: argparse.Namespace) -> int:
    windows = args.windows or list(WINDOW_SETS[args.window_set])
    interval = args.checkpoint_interval
    checkpoint = f"every {interval:g} s" if interval else "on signal"
    samples = [sample(w, s, args) for w in windows for s in args.seeds]
    print(
        f"## Queues on Philly: {args.jobs} jobs per window, load x{args.load:g}, "
        f"{FLEET}, quotas from the {args.history_days:g} days before each window, "
        f"engine {args.engine}, type delay {args.type_delay:g}, aging {args.aging_s or 3600:g} s, "
        f"service tier {args.service_tier_gpu_s:g} GPU-s, checkpoint "
        f"{checkpoint}, "
        f"requeue timestamp "
        f"{args.requeue_timestamp or Policy().requeue_timestamp.value}, "
        f"tier re-evictions after {args.tier_rerun_s or 0:g} s of run, {args.weights} weights\n"
    )
    print(
        "| window | seed | tenants | policy | avg JCT (h) | util. (arrivals) | work util. "
        "| util. (makespan) | worst rho (tenant) | Jain | violations (limit / owed gangs) "
        "| preemptions | wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in samples:
        for name, r in s["reports"].items():
            print(
                f"| {s['window']} | {s['seed']} | {s['tenants']} | {name} | {r['avg_jct_h']:.2f} "
                f"| {r['utilisation']:.3f} | {r['work_utilisation']:.3f} "
                f"| {r['makespan_utilisation']:.3f} "
                f"| {r['worst_rho']:.2f} ({r['worst_tenant']}) | {r['jain']:.3f} "
                f"| {r['violations']} ({r['limit_decisions']} / {r['owed_gangs']}) "
                f"| {r['preemptions']} | {r['wall_s']:.0f} |"
            )
    idle_summary = _print_idle(samples)
    idle_summary |= _print_usable(samples)
    idle_summary |= _print_none_fits(samples)
    validator = _print_validator(samples) if args.validate else None
    summary: dict[str, dict[str, Any]] = {}
    print("\n## Targets (gpufleet vs kueue)\n")
    print("| target | limit | median | worst | met in samples |")
    print("|---|---|---|---|---|")
    for key, (limit, direction) in TARGETS.items():
        values = [s["ratios"][key] for s in samples]
        met = sum(1 for v in values if _met(key, v))
        worst = _worst(key, values)
        summary[key] = {
            "limit": limit,
            "direction": direction,
            "median": statistics.median(values),
            "worst": worst,
            "met_samples": met,
            "samples": len(values),
            "met_worst_case": _met(key, worst),
        }
        sign = ">=" if direction == "min" else "<="
        print(
            f"| {key} | {sign} {limit:g} | {statistics.median(values):.3f} | {worst:.3f} "
            f"| {met} of {len(values)} |"
        )
    doc = {
        "bench": "queue_bench",
        "config": {
            "windows": windows,
            "seeds": args.seeds,
            "jobs": args.jobs,
            "load": args.load,
            "history_days": args.history_days,
            "engine": args.engine,
            "type_delay": args.type_delay,
            "aging_s": args.aging_s,
            "service_tier_gpu_s": args.service_tier_gpu_s,
            "requeue_timestamp": args.requeue_timestamp or Policy().requeue_timestamp.value,
            "tier_rerun_s": args.tier_rerun_s,
            "validate": args.validate,
            "checkpoint_interval_s": args.checkpoint_interval,
            "weights": args.weights,
            "policies": args.policies,
            "fleet": FLEET,
        },
        "targets": summary,
        "idle_vs_kueue": idle_summary,
        "validator": validator,
        "samples": samples,
    }
    print(json.dumps(doc, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
