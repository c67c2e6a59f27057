"""Simulation report plots people can read (issue 14, item 6).

Aspects: each policy keeps its colour in every figure; the energy bars carry their values; the
utilisation plot gives each policy its own panel and time axis, so a run 8x longer than the others
does not squeeze them into a sliver.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.colors import to_rgba

from gpufleet.sim.report import energy_figure, jct_cdf_figure, policy_colour, utilisation_figure
from gpufleet.sim.results import JobRecord, SimResult


def _result(policy: str, hours: float, kwh: float) -> SimResult:
    end = hours * 3600.0
    job = JobRecord("j", 0.0, 1.0, "q", first_start_s=0.0, completion_s=end / 2)
    timeline = [(t * end / 10, float(t % 4), float(t % 4), 100.0) for t in range(11)]
    return SimResult(
        policy=policy,
        fleet_gpus=4,
        jobs=[job],
        start_s=0.0,
        end_s=end,
        energy_j=kwh * 3.6e6,
        busy_gpu_s=0.0,
        allocated_gpu_s=0.0,
        waiting_s=0.0,
        unallocated_waiting_gpu_s=0.0,
        timeline=timeline,
    )


RESULTS = [_result("balanced", 100.0, 1234.0), _result("kube", 800.0, 98765.0)]


def test_energy_bars_have_policy_colours_and_values() -> None:
    fig = energy_figure(RESULTS)
    ax = fig.axes[0]
    assert [p.get_facecolor() for p in ax.patches] == [
        to_rgba(policy_colour("balanced")),
        to_rgba(policy_colour("kube")),
    ]
    assert [t.get_text() for t in ax.texts] == ["1,234", "98,765"]
    plt.close(fig)


def test_utilisation_has_one_panel_per_policy_on_its_own_time_axis() -> None:
    fig = utilisation_figure(RESULTS)
    panels = fig.axes
    assert len(panels) == 2
    assert [ax.get_xlim() for ax in panels] == [(0.0, 100.0), (0.0, 800.0)]
    assert [ax.lines[0].get_color() for ax in panels] == [
        policy_colour("balanced"),
        policy_colour("kube"),
    ]
    assert panels[0].get_title(loc="left").startswith("balanced")
    plt.close(fig)


def test_jct_cdf_colours_follow_the_policy() -> None:
    fig = jct_cdf_figure(RESULTS)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert [line.get_color() for line in ax.lines] == [
        policy_colour("balanced"),
        policy_colour("kube"),
    ]
    plt.close(fig)
