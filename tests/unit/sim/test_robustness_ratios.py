"""The target ratios of one robustness sample (bench/robustness.py `ratios`).

Aspects: the strongest baseline is the lowest average JCT of those run; a run of gpufleet's
policies only (no baseline) still gives the energy ratio, with NaN for the baseline ratios,
which the summary leaves out.
"""

from __future__ import annotations

import math

from tests.benchscripts import bench_module

robustness = bench_module("robustness")
SAMPLE = robustness.Sample("philly", "2017-11-06", "hetero-mix-b.yaml", 8)


def jct(hours: float) -> dict[str, float]:
    return {"avg_jct_h": hours}


def test_strongest_is_the_lowest_baseline() -> None:
    runs = {"balanced": jct(2.0), "energy": jct(2.2), "gavel": jct(4.0), "tiresias": jct(2.5)}
    out = robustness.ratios(SAMPLE, runs)
    assert out["jct_vs_strongest"] == 2.0 / 2.5
    assert out["energy_jct_vs_balanced"] == 2.2 / 2.0
    assert out["strongest_is"] == robustness.STRONGEST.index("tiresias")


def test_without_baselines_only_the_energy_ratio() -> None:
    out = robustness.ratios(SAMPLE, {"balanced": jct(3.30), "energy": jct(3.39)})
    assert out["energy_jct_vs_balanced"] == 3.39 / 3.30
    assert math.isnan(out["jct_vs_strongest"]) and math.isnan(out["strongest_is"])
    row = {"key": SAMPLE.key, "ratios": out}
    assert set(robustness.aggregate([row])) == {"energy_jct_vs_balanced"}
