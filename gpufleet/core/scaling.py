"""Scaling curves of elastic jobs: throughput at each replica count, refined by what the job
reports.

A curve is a tuple `f` with `f[r - 1]` the job's throughput at r replicas relative to one
replica (`f[0] == 1`), as `Gang.scaling` takes it. The job's owner states a prior curve (the
spec; linear when it states none), and the job reports its throughput while it runs (an
annotation or a metric, in whatever unit it likes). `refine` keeps the prior's shape where
nothing was observed and follows the observations where they exist: the ratio of observed to
predicted throughput is interpolated linearly between observed sizes and held beyond them, as
Pollux refits its throughput model from what each job reports.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

__all__ = ["linear", "refine"]


def linear(replicas: int) -> tuple[float, ...]:
    """The curve of a job that scales perfectly up to `replicas` replicas."""
    return tuple(float(r) for r in range(1, replicas + 1))


def refine(prior: Sequence[float], observed: Mapping[int, float]) -> tuple[float, ...]:
    """The prior curve corrected by observed throughputs (absolute, any unit) per replica count.

    The observations fix the unit: with the smallest observed count r0 taken at the prior's
    value, each observed count r gets the correction `observed[r] / (observed[r0] x prior[r] /
    prior[r0])`, linear in between, constant outside, and the curve is renormalised to 1 at one
    replica. Counts outside the prior and non-positive observations are ignored.
    """
    if not prior or prior[0] <= 0:
        raise ValueError("a scaling curve starts with a positive throughput at one replica")
    seen = sorted((r, t) for r, t in observed.items() if 1 <= r <= len(prior) and t > 0)
    if not seen:
        return tuple(v / prior[0] for v in prior)
    r0, t0 = seen[0]
    unit = t0 / prior[r0 - 1]  # observed units per prior unit
    points = [(r, t / (unit * prior[r - 1])) for r, t in seen]
    out: list[float] = []
    for r in range(1, len(prior) + 1):
        out.append(prior[r - 1] * _interpolate(points, r))
    return tuple(v / out[0] for v in out)


def _interpolate(points: Sequence[tuple[int, float]], x: int) -> float:
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]
