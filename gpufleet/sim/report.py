"""Reports of a simulation comparison: JSON, a Markdown table and PNG plots.

Plots (matplotlib, non-interactive backend): the CDF of job completion times per policy (log time
axis), energy per policy (values on the bars), and busy GPUs over time in one panel per policy
(each on its own time axis, since makespans differ by up to 8x); for robustness runs, box plots
of each target's ratio over samples and of every policy against the run's baseline. Each policy
keeps one colour in every figure (`policy_colour`). Jobs the simulator dropped because no node
of the fleet could ever hold them are listed under `dropped` in `results.json` and in `results.md`.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from gpufleet.sim.holdable import DroppedJob
from gpufleet.sim.results import SimResult, summarise

__all__ = [
    "COLUMNS",
    "dropped_summary",
    "energy_figure",
    "fmt_cell",
    "jct_cdf_figure",
    "markdown_table",
    "policy_colour",
    "utilisation_figure",
    "write_box_plots",
    "write_plots",
    "write_report",
]

# One colour per policy in every figure (matplotlib's tab10 order); others get grey.
POLICY_COLOURS: dict[str, str] = {
    "performance": "tab:blue",
    "balanced": "tab:orange",
    "energy": "tab:green",
    "kube": "tab:red",
    "fifo-binpack": "tab:purple",
    "best-fit": "tab:purple",
    "gavel": "tab:brown",
    "tiresias": "tab:pink",
}


def policy_colour(name: str) -> str:
    """The colour a policy has in every figure."""
    return POLICY_COLOURS.get(name, "tab:gray")


class TargetLike(Protocol):
    """What the box plots need to know about a target."""

    name: str
    trace: str
    worst: float | None
    median: float | None


# (summary key, column title, format) in table order.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("policy", "policy", "{}"),
    ("completed", "jobs done", "{}"),
    ("avg_jct_h", "avg JCT (h)", "{:.2f}"),
    ("median_jct_h", "median JCT (h)", "{:.3f}"),
    ("p99_jct_h", "p99 JCT (h)", "{:.1f}"),
    ("avg_queueing_h", "avg queueing (h)", "{:.2f}"),
    ("makespan_h", "makespan (h)", "{:.1f}"),
    ("utilisation", "GPU util", "{:.1%}"),
    ("unallocated_gpus_waiting", "unalloc. GPUs while waiting", "{:.1f}"),
    ("energy_kwh", "energy (kWh)", "{:,.0f}"),
    ("avg_power_kw", "avg power (kW)", "{:.1f}"),
    ("preemptions", "preemptions", "{}"),
    ("moves", "moves", "{}"),
    ("wall_s", "sim time (s)", "{:.1f}"),
)


def fmt_cell(fmt: str, value: Any) -> str:
    """One table cell; NaN prints as n/a."""
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return fmt.format(value)


def markdown_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """A GitHub-flavoured Markdown table of the headline metrics, one row per policy."""
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    rows = [
        "| " + " | ".join(fmt_cell(fmt, s[key]) for key, _, fmt in COLUMNS) + " |"
        for s in summaries
    ]
    return "\n".join([head, rule, *rows]) + "\n"


def _cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def write_plots(results: Sequence[SimResult], out: Path) -> list[Path]:
    """JCT CDF, energy per policy and utilisation over time, as PNG files in `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    for name, figure in (
        ("jct_cdf.png", jct_cdf_figure(results)),
        ("energy.png", energy_figure(results)),
        ("utilisation.png", utilisation_figure(results)),
    ):
        paths.append(out / name)
        figure.savefig(paths[-1], dpi=120)
        plt.close(figure)
    return paths


def jct_cdf_figure(results: Sequence[SimResult]) -> Any:
    """The CDF of job completion times per policy, on a log time axis."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        jct = [j.jct_s / 3600.0 for j in r.jobs if j.completion_s is not None]
        if jct:
            xs, ys = _cdf([max(x, 1e-3) for x in jct])
            ax.plot(xs, ys, label=r.policy, color=policy_colour(r.policy))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def energy_figure(results: Sequence[SimResult]) -> Any:
    """Energy per policy: a bar in the policy's colour with its value written on it."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [r.policy for r in results]
    kwh = [r.energy_j / 3.6e6 for r in results]
    bars = ax.bar(names, kwh, color=[policy_colour(n) for n in names])
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in kwh], fontsize=8, padding=2)
    ax.margins(y=0.12)  # room for the labels above the tallest bar
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_ylabel("energy (kWh)")
    ax.set_title("GPU energy per policy")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def utilisation_figure(results: Sequence[SimResult]) -> Any:
    """Busy GPUs over time, one panel per policy on its own time axis: makespans differ by up
    to 8x between policies, which squeezes the shorter runs into a sliver of a shared axis."""
    import matplotlib.pyplot as plt

    shown = [r for r in results if r.timeline]
    fig, axes = plt.subplots(
        max(len(shown), 1), 1, figsize=(7, 1.6 + 1.3 * len(shown)), sharey=True, squeeze=False
    )
    for ax, r in zip(axes[:, 0], shown, strict=False):
        pts = _decimate(r.timeline, 2000)
        hours = [(t - r.start_s) / 3600.0 for t, *_ in pts]
        busy = [b / r.fleet_gpus for _, b, _, _ in pts]
        ax.step(hours, busy, where="post", color=policy_colour(r.policy))
        ax.set_xlim(0.0, max(hours[-1], 1e-6))
        ax.set_ylim(0.0, 1.05)
        ax.set_title(f"{r.policy}: over {hours[-1]:,.1f} h", fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("simulated time (h; each panel its own scale)")
    fig.supylabel("busy GPUs / fleet GPUs")
    fig.suptitle("GPU utilisation over time")
    fig.tight_layout()
    return fig


def _decimate(
    points: Sequence[tuple[float, float, float, float]], limit: int
) -> list[tuple[float, float, float, float]]:
    """At most about `limit` points, keeping the first and last."""
    if len(points) <= limit:
        return list(points)
    step = math.ceil(len(points) / limit)
    kept = list(points[::step])
    if kept[-1] is not points[-1]:
        kept.append(points[-1])
    return kept


def dropped_summary(dropped: Sequence[DroppedJob], examples: int = 3) -> str:
    """One line about the dropped jobs: how many, and the first few with their reasons."""
    shown = "; ".join(f"{d.job_id}: {d.reason}" for d in dropped[:examples])
    more = f"; and {len(dropped) - examples} more" if len(dropped) > examples else ""
    return (
        f"{len(dropped)} job(s) dropped, no node of the fleet can ever hold them "
        f"({shown}{more}; all listed in results.json)"
    )


def write_report(
    results: Sequence[SimResult],
    out: Path,
    meta: Mapping[str, Any],
    plots: bool = True,
    dropped: Sequence[DroppedJob] = (),
) -> dict[str, Any]:
    """Write `results.json`, `results.md` and the plots into `out`; return the JSON document."""
    out.mkdir(parents=True, exist_ok=True)
    summaries = [summarise(r) for r in results]
    doc: dict[str, Any] = {
        "meta": dict(meta),
        "policies": summaries,
        "dropped": {"count": len(dropped), "jobs": [asdict(d) for d in dropped]},
    }
    (out / "results.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    lines = [f"# Simulation: {meta.get('trace', '?')} on {meta.get('fleet', '?')}", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", markdown_table(summaries)]
    if dropped:
        lines += [f"{len(dropped)} job(s) dropped: no node of the fleet can ever hold them.", ""]
        lines += [f"- {d.job_id} ({d.gpus:g} GPUs): {d.reason}" for d in dropped]
        lines += [""]
    (out / "results.md").write_text("\n".join(lines))
    if plots:
        doc["plots"] = [p.name for p in write_plots(results, out)]
    return doc


def write_box_plots(
    rows: Sequence[Mapping[str, Any]], targets: Sequence[TargetLike], out: Path
) -> list[Path]:
    """Box plots of a robustness run: each target's ratio per sample family (with its limits),
    and every policy's ratio to the run's baseline per trace (one colour per policy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    shown = [t for t in targets if any(t.name in r["ratios"] for r in rows)]
    if shown:
        fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 5), squeeze=False)
        for ax, target in zip(axes[0], shown, strict=True):
            families: dict[str, list[float]] = {}
            for row in rows:
                value = row["ratios"].get(target.name)
                if value is not None and math.isfinite(value):
                    families.setdefault(_family(row), []).append(value)
            names = sorted(families)
            _boxes(ax, [families[n] for n in names], names, ["tab:orange"] * len(names))
            if target.worst is not None:
                ax.axhline(
                    target.worst, color="tab:red", linestyle="--", label="limit, every sample"
                )
            if target.median is not None:
                ax.axhline(target.median, color="tab:red", linestyle=":", label="limit, median")
            ax.set_title(target.name.replace("_", " "))
            ax.set_ylabel("ratio (lower is better)")
            ax.legend(fontsize=8)
        fig.tight_layout()
        paths.append(out / "targets.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    for trace, metric, baseline in (
        ("alibaba", "unallocated_gpus_waiting", "fifo-binpack"),
        ("philly", "avg_jct_h", None),
    ):
        per_policy: dict[str, list[float]] = {}
        for row in rows:
            if row["sample"]["trace"] != trace:
                continue
            runs = row["runs"]
            if baseline is not None:
                ref = runs.get(baseline, {}).get(metric)
            else:  # the strongest of the gang-aware baselines in the same sample
                refs = [runs[p][metric] for p in ("fifo-binpack", "gavel", "tiresias") if p in runs]
                ref = min(refs) if refs else None
            if not ref:
                continue
            for policy, summary in runs.items():
                value = summary.get(metric)
                if value is not None and math.isfinite(value):
                    per_policy.setdefault(policy, []).append(value / ref)
        if not per_policy:
            continue
        names = sorted(per_policy, key=_policy_order)
        fig, ax = plt.subplots(figsize=(8, 5))
        _boxes(ax, [per_policy[n] for n in names], names, [policy_colour(n) for n in names])
        ax.axhline(1.0, color="black", linewidth=0.8)
        what = "best fit's" if baseline else "the strongest baseline's"
        label = metric.replace("_", " ")
        ax.set_ylabel(f"{label} / {what} (same sample)")
        if max(max(v) for v in per_policy.values()) > 8:
            ax.set_yscale("log")
        ax.set_title(f"{trace}: every policy over {len(rows)} samples")
        fig.tight_layout()
        paths.append(out / f"policies_{trace}.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def _family(row: Mapping[str, Any]) -> str:
    sample = row["sample"]
    fleet = str(sample["fleet"]).removesuffix(".yaml")
    return f"{sample['variant']}\n{fleet}"


_ORDER = ("performance", "balanced", "energy", "kube", "fifo-binpack", "gavel", "tiresias")


def _policy_order(name: str) -> tuple[int, str]:
    return (_ORDER.index(name) if name in _ORDER else len(_ORDER), name)


def _boxes(ax: Any, data: list[list[float]], labels: list[str], colours: list[str]) -> None:
    """Box plots with the samples drawn over them and each median written on its box."""
    parts = ax.boxplot(data, patch_artist=True, showfliers=False)
    for patch, colour in zip(parts["boxes"], colours, strict=True):
        patch.set_facecolor(colour)
        patch.set_alpha(0.45)
    for i, values in enumerate(data, start=1):
        xs = [i + 0.12 * ((j % 5) - 2) / 2 for j in range(len(values))]
        ax.scatter(xs, values, s=10, color="black", zorder=3)
        median = statistics.median(values)
        ax.annotate(
            f"{median:.2f}", (i + 0.28, median), fontsize=8, va="center", ha="left", color="black"
        )
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
