"""Scaling curves of elastic jobs refined by what they report (core/scaling.py).

Aspects: no reports keep the prior (normalised); one report sets the unit and changes nothing
else; reports at several sizes correct the curve there, linearly in between and constantly
beyond; bad priors are refused; properties: the refined curve starts at 1, passes through every
report relative to the smallest reported size, and equals the prior where the reports agree
with it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.core.scaling import linear, refine


def test_no_reports_keep_the_prior() -> None:
    assert refine((2.0, 3.0, 4.0), {}) == pytest.approx((1.0, 1.5, 2.0))


def test_one_report_sets_the_unit_only() -> None:
    assert refine(linear(4), {2: 500.0}) == pytest.approx(linear(4))


def test_reports_correct_the_curve() -> None:
    # Linear prior; the job did 100 at one replica and 150 at three: 0.5 of the predicted gain.
    refined = refine(linear(4), {1: 100.0, 3: 150.0})
    # Correction 1 at 1 replica, 0.5 at 3, halfway (0.75) at 2, held at 0.5 beyond.
    assert refined == pytest.approx((1.0, 1.5, 1.5, 2.0))


def test_reports_outside_the_curve_are_ignored() -> None:
    assert refine(linear(2), {5: 10.0, 1: -3.0}) == pytest.approx(linear(2))


def test_bad_prior_is_refused() -> None:
    with pytest.raises(ValueError, match="positive throughput at one replica"):
        refine((0.0, 1.0), {1: 1.0})


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    prior_steps=st.lists(st.floats(0.1, 1.0), min_size=1, max_size=7),
    reports=st.dictionaries(st.integers(1, 8), st.floats(0.5, 100.0), max_size=4),
)
def test_refined_curve_passes_through_the_reports(
    prior_steps: list[float], reports: dict[int, float]
) -> None:
    prior = [1.0]
    for step in prior_steps:
        prior.append(prior[-1] + step)
    refined = refine(prior, reports)
    assert refined[0] == pytest.approx(1.0)
    inside = {r: t for r, t in reports.items() if r <= len(prior)}
    if inside:
        r0 = min(inside)
        for r, t in inside.items():
            assert refined[r - 1] / refined[r0 - 1] == pytest.approx(t / inside[r0], rel=1e-6)
    else:
        assert refined == pytest.approx(tuple(prior))
