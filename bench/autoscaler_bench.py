"""Autoscaler benchmark: replay the Azure LLM 2023 code trace through the serving model.

Compares, in one run and on the same simulated disaggregated server:
  (a) static   - the smallest fixed (prefill, decode) fleet that meets the attainment target,
                 i.e. provisioning sized for the trace's peak (found by search);
  (b) hpa      - Kubernetes HPA on one metric per pool, `vllm:num_requests_running` per replica
                 (KServe's documented example metric), with HPA's real defaults: tolerance 0.1,
                 scale-up 100 % or 4 pods per 15 s, scale-down stabilization 300 s;
  (c) gpufleet - gpufleet's pure P/D policy (`gpufleet.core.autoscaling.decide`).

Reports the fraction of requests meeting both SLOs (TTFT <= SLO and mean time per output token
<= ITL SLO; unfinished requests count as misses) and GPU-hours, plus two reference points built
from per-minute needs (clairvoyant and reactive-oracle; see `minute_bounds`). Prints a table;
the last line is one JSON object.

    python bench/autoscaler_bench.py [--trace PATH] [--gpu H100-SXM-80GB] [--cold-start 60]
                                     [--ttft-slo 0.5] [--itl-slo 0.05] [--slo-quantile 0.9]
                                     [--start-prefill N] [--set NAME=VALUE ...]

`--start-prefill` changes the prefill count both autoscalers start from (default: the
static-peak count, which was sized with hindsight); `--set` overrides one gpufleet
`AutoscalerSettings` field (sensitivity runs, clearly not the defaults). `--trace` replays
another file in the Azure format (default: the shared data directory's code trace); the output
names the trace replayed. A bad option or trace file is one error line and exit status 2.

Modelling choices (see bench/README.md, "Autoscaler"):
- SLOs: TTFT p90 0.5 s and ITL p90 50 ms, NVIDIA Dynamo SLA planner defaults
  (reference/serving.md §2.2).
- Replica: a Llama-3.1-8B-class model on one H100-SXM-80GB, roofline profile from
  `gpufleet.sim.serving.profiles` (prefill ~24.7k tok/s at 40 % MFU; ITL = alpha + beta*batch,
  the llm-d queueing-analyzer form, §3.2).
- Cold start 60 s per added replica, the lower end of the 60-300 s in §9 rule 5; billed.
- Control period 15 s (HPA sync period and a typical Prometheus scrape, §5).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gpufleet.cliargs import (
    OneLineParser,
    input_error_exit,
    non_negative_float,
    open_fraction,
    positive_float,
    positive_int,
)
from gpufleet.core.autoscaling import AutoscalerSettings, Slo
from gpufleet.core.autoscaling_estimators import decode_batch_at_slo
from gpufleet.model.input_error import InputError
from gpufleet.sim.serving import (
    PolicyController,
    PoolBounds,
    ReplayResult,
    Request,
    ServingConfig,
    ServingModel,
    StaticController,
    load_azure_code_trace,
    replay,
    replica_profile,
)
from gpufleet.sim.serving.hpa import HpaController
from gpufleet.sim.serving.profiles import GPU_SPECS
from gpufleet.sim.traces.common import default_data_dir

PROG = "autoscaler_bench.py"
# The trace replayed without --trace, under the shared data directory, and its printed name.
DEFAULT_TRACE = Path("traces") / "azure-llm-2023-code.csv"
DEFAULT_TRACE_LABEL = "Azure LLM 2023 code trace"

SLO = Slo(ttft_p90_s=0.5, itl_p90_s=0.05)  # Dynamo SLA planner defaults (serving.md §2.2)
ATTAINMENT_TARGET = 0.99
PERIOD_S = 15.0  # HPA --horizontal-pod-autoscaler-sync-period (serving.md §5)
MAX_REPLICAS = 64
# Prefill `vllm:num_requests_running` targets for HPA: 2 is KServe's documented example
# (serving.md §6), the rest are lower (more eager) settings for a matched-attainment comparison.
HPA_PREFILL_TARGETS = (2.0, 1.0, 0.5, 0.25)
# The static-peak search gives up on a pool after this many sizing runs in a row that do not
# raise attainment: on a trace whose prompts alone exceed the TTFT SLO no fleet reaches the
# target, and searching on to MAX_REPLICAS took minutes for nothing.
PLATEAU_RUNS = 2


@dataclass(frozen=True)
class Run:
    name: str
    result: ReplayResult
    scale_events: int
    detail: str

    @property
    def attainment(self) -> float:
        return self.result.attainment(SLO)

    @property
    def gpu_hours(self) -> float:
        return self.result.gpu_hours


def _config(profile_gpu: str, prefill: int, decode: int, cold_start_s: float) -> ServingConfig:
    profile = replica_profile(profile_gpu)
    return ServingConfig.of(profile, prefill, decode, cold_start_s)


def _run_static(
    requests: tuple[Request, ...], gpu: str, prefill: int, decode: int, cold: float
) -> ReplayResult:
    model = ServingModel(_config(gpu, prefill, decode, cold), requests)
    return replay(
        model, StaticController({"prefill": prefill, "decode": decode}), period_s=PERIOD_S
    )


@dataclass(frozen=True)
class StaticSize:
    """Outcome of the static-peak search."""

    prefill: int
    decode: int
    result: ReplayResult
    runs: int
    reached: bool  # False: attainment stopped improving below the target


def _smallest_count(attainment_of: Callable[[int], float]) -> tuple[int, bool, int]:
    """Smallest count in 1..MAX_REPLICAS whose attainment meets the target, counting up.

    Stops after PLATEAU_RUNS counts in a row without a gain over the best so far and returns
    the best count instead. Returns (count, target reached, runs).
    """
    best_n, best, stale = 1, -1.0, 0
    for n in range(1, MAX_REPLICAS + 1):
        value = attainment_of(n)
        if value >= ATTAINMENT_TARGET:
            return n, True, n
        if value > best:
            best_n, best, stale = n, value, 0
        else:
            stale += 1
            if stale >= PLATEAU_RUNS:
                return best_n, False, n
    return best_n, False, MAX_REPLICAS


def size_static(requests: tuple[Request, ...], gpu: str, cold: float) -> StaticSize:
    """Smallest fixed fleet meeting the attainment target: decode first (with ample prefill),
    then prefill; the best fleet found when attainment stops improving below the target."""
    decode, decode_ok, decode_runs = _smallest_count(
        lambda d: _run_static(requests, gpu, MAX_REPLICAS, d, cold).attainment(SLO)
    )
    results: dict[int, ReplayResult] = {}

    def prefill_attainment(p: int) -> float:
        results[p] = _run_static(requests, gpu, p, decode, cold)
        return results[p].attainment(SLO)

    prefill, prefill_ok, prefill_runs = _smallest_count(prefill_attainment)
    return StaticSize(
        prefill, decode, results[prefill], decode_runs + prefill_runs, decode_ok and prefill_ok
    )


@dataclass(frozen=True)
class Bound:
    name: str
    attainment: float
    gpu_hours: float
    detail: str


def minute_bounds(
    requests: tuple[Request, ...], gpu: str, cold: float, decode: int, max_prefill: int
) -> list[Bound]:
    """Reference points from per-minute needs, to show what any reactive policy can reach.

    For every prefill count n, a static run gives the misses of each trace minute; the minute's
    need is the smallest n with <= 1 % misses in that minute. "clairvoyant" provisions each
    minute's need during that minute (perfect foresight, no cold start); "reactive-oracle" knows
    every past minute's exact need and holds the largest of the last 5 minutes (HPA's 300 s
    window), i.e. reacts one minute late (about one cold start). Approximate: a minute's misses
    are taken from the static run, ignoring queues carried over between minutes.
    """
    minutes = int(requests[-1].arrival_s // 60) + 1
    count = [0] * minutes
    for r in requests:
        count[int(r.arrival_s // 60)] += 1
    misses: dict[int, list[int]] = {}
    for n in range(1, max_prefill + 1):
        per = [0] * minutes
        for o in _run_static(requests, gpu, n, decode, cold).outcomes:
            if not o.meets(SLO.ttft_p90_s, SLO.itl_p90_s):
                per[int(o.arrival_s // 60)] += 1
        misses[n] = per
    need = [
        next((n for n in misses if misses[n][m] <= 0.01 * count[m]), max_prefill)
        for m in range(minutes)
    ]

    def bound(name: str, prov: list[int], detail: str) -> Bound:
        missed = sum(misses[n][m] for m, n in enumerate(prov))
        gpu_h = (sum(prov) + decode * minutes) / 60.0
        return Bound(name, 1.0 - missed / len(requests), gpu_h, detail)

    clairvoyant = bound("clairvoyant", need, "each minute's own need, known in advance")
    reactive = [max(need[max(0, m - 5) : m] or [max_prefill]) for m in range(minutes)]
    oracle = bound("reactive-oracle", reactive, "max exact need of the previous 5 minutes")
    return [clairvoyant, oracle]


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="request trace in the Azure LLM format (default: the shared data directory's "
        f"{DEFAULT_TRACE})",
    )
    parser.add_argument("--gpu", default="H100-SXM-80GB", choices=sorted(GPU_SPECS))
    parser.add_argument(
        "--cold-start", type=non_negative_float, default=60.0, help="seconds per new replica"
    )
    parser.add_argument("--ttft-slo", type=positive_float, default=SLO.ttft_p90_s, help="seconds")
    parser.add_argument("--itl-slo", type=positive_float, default=SLO.itl_p90_s, help="seconds")
    parser.add_argument(
        "--slo-quantile",
        type=open_fraction,
        default=0.9,
        help="gpufleet's AutoscalerSettings.slo_quantile",
    )
    parser.add_argument(
        "--start-prefill",
        type=positive_int,
        default=None,
        help="prefill replicas the autoscalers start from (default: the static-peak count)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one gpufleet AutoscalerSettings field (sensitivity runs)",
    )
    return parser


def _settings(args: argparse.Namespace) -> tuple[dict[str, float], AutoscalerSettings]:
    """The `--set` overrides and gpufleet's settings, or an InputError naming the option."""
    overrides: dict[str, float] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or key not in AutoscalerSettings.model_fields:
            raise InputError(
                f"expected NAME=VALUE with an AutoscalerSettings field, got {item!r}", field="--set"
            )
        try:
            overrides[key] = float(value)
        except ValueError:
            raise InputError(f"{value!r} is not a number", field=f"--set {key}") from None
    try:
        return overrides, AutoscalerSettings(slo_quantile=args.slo_quantile, **overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "?"
        option = "--slo-quantile" if name == "slo_quantile" else f"--set {name}"
        raise InputError(str(first["msg"]).removeprefix("Value error, "), field=option) from None


def _trace(args: argparse.Namespace) -> tuple[tuple[Request, ...], str, str]:
    """The requests of the trace to replay, its printed label and its name in the JSON line."""
    if args.trace is None:
        path, label = default_data_dir() / DEFAULT_TRACE, DEFAULT_TRACE_LABEL
    else:
        path, label = args.trace, f"trace {args.trace.name}"
    requests = load_azure_code_trace(path)
    if not requests:
        raise InputError("no requests", source=path)
    return requests, label, path.stem


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except InputError as exc:
        return input_error_exit(PROG, exc)


@dataclass(frozen=True)
class Replays:
    """Every policy's replay of one invocation, and the reference points."""

    static: Run
    p_static: int
    d_static: int
    p_start: int  # the prefill count both autoscalers start from
    hpa_runs: list[Run]
    hpa_matched: Run | None  # the cheapest HPA setting with at least gpufleet's attainment
    gf: Run
    bounds_ref: list[Bound]

    @property
    def hpa(self) -> Run:
        return self.hpa_runs[0]  # the KServe-documented target


def _run(args: argparse.Namespace) -> int:
    global SLO
    # Every input is checked before the first replay starts.
    overrides, settings = _settings(args)
    if args.start_prefill is not None and args.start_prefill > MAX_REPLICAS:
        raise InputError(
            f"at most {MAX_REPLICAS}, got {args.start_prefill}", field="--start-prefill"
        )
    SLO = Slo(ttft_p90_s=args.ttft_slo, itl_p90_s=args.itl_slo)

    started = time.perf_counter()
    requests, trace_label, trace_name = _trace(args)
    replays = _replay_all(args, requests, overrides, settings)
    elapsed = time.perf_counter() - started
    _print_table(args, requests, trace_label, replays)
    comparisons = compare(replays.gf, replays.static, replays.hpa, replays.hpa_matched)
    for key, c in comparisons.items():
        print(f"gpufleet {key}: {c['text']}")
    met: dict[str, bool | None] = {
        "attainment>=0.99": replays.gf.attainment >= ATTAINMENT_TARGET,
        "gpu_hours<=0.7x_static": comparisons["vs_static"]["met"],
        "gpu_hours<=0.85x_hpa_baseline_at_equal_or_better_attainment": comparisons[
            "vs_hpa_baseline"
        ]["met"],
        "gpu_hours<=0.85x_cheapest_hpa_at_equal_or_better_attainment": comparisons[
            "vs_hpa_matched"
        ]["met"],
    }
    print(
        "targets: "
        + ", ".join(
            f"{k} {'met' if v else ('n/a' if v is None else 'MISSED')}" for k, v in met.items()
        )
        + f"  ({elapsed:.1f}s)"
    )
    summary = {
        "bench": "autoscaler",
        "trace": trace_name,
        "requests": len(requests),
        **_summary(args, overrides, replays, comparisons),
        "targets": met,
        "targets_met": all(v is True for v in met.values()),
        "elapsed_s": round(elapsed, 1),
    }
    print(json.dumps(summary, sort_keys=True))
    return 0


def _replay_all(
    args: argparse.Namespace,
    requests: tuple[Request, ...],
    overrides: Mapping[str, float],
    settings: AutoscalerSettings,
) -> Replays:
    """Replay the trace under (a) static-peak, (c) gpufleet and (b) every HPA target."""
    cold = args.cold_start
    gpu = args.gpu
    bounds = {"prefill": PoolBounds(1, MAX_REPLICAS), "decode": PoolBounds(1, MAX_REPLICAS)}

    # (a) static, sized for the peak.
    sized = size_static(requests, gpu, cold)
    p_static, d_static = sized.prefill, sized.decode
    found = (
        f"smallest fixed fleet >= {ATTAINMENT_TARGET:.0%}"
        if sized.reached
        else f"best fixed fleet; attainment stopped improving below {ATTAINMENT_TARGET:.0%}"
    )
    static = Run(
        "static-peak",
        sized.result,
        0,
        f"prefill={p_static} decode={d_static} ({found}, {sized.runs} sizing runs)",
    )

    # Autoscaled runs start from the static fleet, as if taking over a peak-provisioned
    # deployment; the first tick has no metrics, so both autoscalers hold it at first.
    # `--start-prefill` starts them from another prefill count instead (sensitivity).
    p_start = p_static if args.start_prefill is None else args.start_prefill

    def fresh_model() -> ServingModel:
        return ServingModel(_config(gpu, p_start, d_static, cold), requests)

    # (c) gpufleet, default settings (slo_quantile and --set overrides from the command line).
    model = fresh_model()
    gf_ctl = PolicyController(model, SLO, bounds, settings)
    gf_result = replay(model, gf_ctl, period_s=PERIOD_S)
    gf_detail = ", ".join(
        [f"slo_quantile={args.slo_quantile}", *(f"{k}={v:g}" for k, v in overrides.items())]
    )
    gf = Run("gpufleet", gf_result, len(gf_ctl.decisions), gf_detail)

    # (b) HPA on running requests per replica. Prefill target 2 is KServe's documented example
    # (`vllm:num_requests_running`, target 2; serving.md §6). Decode target: the batch one
    # replica sustains within the ITL SLO at the trace's mean context, at 85 % (llm-d §3.2);
    # a target of 2 would pin a hundred-sequence decode replica at two sequences.
    # Lower prefill targets are also run, to compare GPU-hours at matched attainment.
    profile = replica_profile(gpu)
    mean_ctx = sum(r.prompt_tokens + r.output_tokens / 2 for r in requests) / len(requests)
    decode_batch = decode_batch_at_slo(
        profile.capacity(), SLO.itl_p90_s, SLO.itl_p90_s, mean_ctx, AutoscalerSettings()
    )
    decode_target = max(1.0, 0.85 * decode_batch)
    hpa_runs: list[Run] = []
    for prefill_target in HPA_PREFILL_TARGETS:
        targets = {"prefill": prefill_target, "decode": decode_target}
        ctl = HpaController(targets, bounds)
        result = replay(fresh_model(), ctl, period_s=PERIOD_S)
        hpa_runs.append(
            Run(
                f"hpa-running@{prefill_target:g}",
                result,
                ctl.events,
                f"running/replica target prefill={prefill_target:g} decode={decode_target:.0f}",
            )
        )
    matched = [r for r in hpa_runs if r.attainment >= gf.attainment]
    hpa_matched = min(matched, key=lambda r: r.gpu_hours) if matched else None

    bounds_ref = minute_bounds(requests, gpu, cold, d_static, p_static + 3)
    return Replays(static, p_static, d_static, p_start, hpa_runs, hpa_matched, gf, bounds_ref)


def _print_table(
    args: argparse.Namespace, requests: tuple[Request, ...], trace_label: str, replays: Replays
) -> None:
    """The trace, then one row per policy and per reference point."""
    static, hpa = replays.static, replays.hpa
    print(
        f"{trace_label}: {len(requests)} requests over "
        f"{requests[-1].arrival_s / 60:.1f} min; {args.gpu}, cold start {args.cold_start:.0f}s, "
        f"SLO TTFT<={SLO.ttft_p90_s}s ITL<={SLO.itl_p90_s * 1e3:.0f}ms, control period "
        f"{PERIOD_S:.0f}s"
    )
    header = f"{'policy':<18} {'attain':>7} {'GPU-h':>6} {'/static':>7} {'/hpa':>6} " + (
        f"{'TTFTp90':>8} {'TTFTp99':>8} {'TPOTp90':>8} {'events':>6}  detail"
    )
    print(header)
    print("-" * len(header))
    for run in [static, *replays.hpa_runs, replays.gf]:
        ttft = sorted(o.ttft_s for o in run.result.outcomes)
        tpot = sorted(o.tpot_s for o in run.result.outcomes)
        print(
            f"{run.name:<18} {run.attainment:>7.4f} {run.gpu_hours:>6.2f} "
            f"{run.gpu_hours / static.gpu_hours:>7.3f} {run.gpu_hours / hpa.gpu_hours:>6.3f} "
            f"{_q(ttft, 0.9):>7.3f}s {_q(ttft, 0.99):>7.3f}s {_q(tpot, 0.9) * 1e3:>6.1f}ms "
            f"{run.scale_events:>6}  {run.detail}"
        )
    print("reference points (per-minute needs from static runs; approximate, not policies):")
    for b in replays.bounds_ref:
        print(
            f"{b.name:<18} {b.attainment:>7.4f} {b.gpu_hours:>6.2f} "
            f"{b.gpu_hours / static.gpu_hours:>7.3f} {b.gpu_hours / hpa.gpu_hours:>6.3f}  "
            f"{b.detail}"
        )


def _summary(
    args: argparse.Namespace,
    overrides: Mapping[str, float],
    replays: Replays,
    comparisons: Mapping[str, Mapping[str, object]],
) -> dict[str, object]:
    """The JSON line's fields about the setup and the replays."""

    def brief(run: Run) -> dict[str, float]:
        return {"attainment": round(run.attainment, 4), "gpu_hours": round(run.gpu_hours, 3)}

    hpa_matched = replays.hpa_matched
    return {
        "gpu": args.gpu,
        "cold_start_s": args.cold_start,
        "period_s": PERIOD_S,
        "start_prefill": replays.p_start,
        "slo": {"ttft_p90_s": SLO.ttft_p90_s, "itl_p90_s": SLO.itl_p90_s},
        "static": {
            "prefill": replays.p_static,
            "decode": replays.d_static,
            **brief(replays.static),
        },
        "hpa": {"prefill_target": HPA_PREFILL_TARGETS[0], **brief(replays.hpa)},
        "hpa_all": {r.name: brief(r) for r in replays.hpa_runs},
        "hpa_matched": ({"name": hpa_matched.name, **brief(hpa_matched)} if hpa_matched else None),
        "gpufleet": {
            "slo_quantile": args.slo_quantile,
            "overrides": dict(overrides),
            **brief(replays.gf),
        },
        "comparisons": {
            k: {f: v for f, v in c.items() if f != "text"} for k, c in comparisons.items()
        },
        "gpufleet_vs_static_gpu_hours": comparisons["vs_static"]["gpu_hours_ratio"],
        "gpufleet_vs_hpa_gpu_hours": comparisons["vs_hpa_baseline"]["gpu_hours_ratio"],
        "gpufleet_vs_hpa_matched_gpu_hours": comparisons["vs_hpa_matched"]["gpu_hours_ratio"],
        "reference": {
            b.name: {"attainment": round(b.attainment, 4), "gpu_hours": round(b.gpu_hours, 3)}
            for b in replays.bounds_ref
        },
    }


def compare(
    gf: Run, static: Run, hpa: Run, hpa_matched: Run | None
) -> dict[str, dict[str, object]]:
    """gpufleet against (a) static-peak, (b) the HPA baseline and (b') the cheapest HPA setting
    with at least gpufleet's attainment, each with its GPU-hour target and whether it is met
    (the >= 99 % attainment target is reported separately).

    The issue's rule for (b) is "<= 0.85x the GPU-hours at equal or better attainment". Read
    literally against the baseline (KServe's target 2) it needs gpufleet's attainment to be at
    least the baseline's; read as a matched comparison it compares with the cheapest HPA setting
    that reaches at least gpufleet's attainment (so HPA is never the one with less), and only
    the ratio counts (`None` = not applicable: no HPA setting reaches gpufleet's attainment).
    """

    def entry(other: Run | None, target: float, need_at_least: bool) -> dict[str, object]:
        if other is None:
            return {
                "name": None,
                "gpu_hours_ratio": None,
                "target": target,
                "attainment_equal_or_better": None,
                "met": None,
                "text": f"no HPA setting reaches gpufleet's attainment {gf.attainment:.4f}",
            }
        ratio = gf.gpu_hours / other.gpu_hours
        at_least = gf.attainment >= other.attainment
        rule = " with gpufleet's attainment >= its" if need_at_least else ""
        ok = ratio <= target and (at_least or not need_at_least)
        return {
            "name": other.name,
            "gpu_hours_ratio": round(ratio, 3),
            "target": target,
            "attainment_equal_or_better": at_least,
            "met": ok,
            "text": f"{ratio:.3f}x the GPU-hours of {other.name} ({other.attainment:.4f} / "
            f"{other.gpu_hours:.2f} GPU-h; gpufleet {gf.attainment:.4f} / {gf.gpu_hours:.2f}); "
            f"target <= {target}x{rule}: "
            f"{'met' if ok else 'MISSED'}",
        }

    return {
        "vs_static": entry(static, 0.7, need_at_least=False),
        "vs_hpa_baseline": entry(hpa, 0.85, need_at_least=True),
        "vs_hpa_matched": entry(hpa_matched, 0.85, need_at_least=False),
    }


def _q(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


if __name__ == "__main__":
    raise SystemExit(main())
