"""Elastic scaling as objects carry it: the throughput a job reports and the curve its pods carry.

A running elastic job reports its throughput on its TrainingJob, annotation
`gpufleet.io/throughput`, as comma-separated `replicas=throughput` pairs in its own unit
("4=1520.5": 1520.5 samples/s at four replicas). The count is part of the report because the
scheduler resizes the job: a bare number read after a resize would be booked at the wrong size.
The operator records the latest report per count in the job's status, refines the job's scaling
curve from them and writes the curve on every worker pod (`gpufleet.io/scaling`,
"1,1.9,2.6,3.1": throughput at 1, 2, ... replicas relative to one), where the scheduler reads
it. Reading the pod annotation is lenient, as for the wishes: an unreadable curve reads as none
(linear). A malformed report is an error the operator shows on the job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gpufleet.model.contract import names

__all__ = ["parse_throughput", "read_scaling", "scaling_annotations"]

DIGITS = 4  # the curve's precision on pods and in the status


def scaling_annotations(curve: Sequence[float]) -> dict[str, str]:
    """The pod annotation of a job's scaling curve (none for no curve)."""
    if not curve:
        return {}
    return {names.SCALING: ",".join(f"{round(v, DIGITS):g}" for v in curve)}


def read_scaling(annotations: Mapping[str, str]) -> tuple[float, ...]:
    """The curve a pod's annotations state; () when absent or not a curve (positive values
    starting at 1)."""
    raw = annotations.get(names.SCALING, "")
    try:
        curve = tuple(float(v) for v in raw.split(",")) if raw else ()
    except ValueError:
        return ()
    if not curve or abs(curve[0] - 1.0) > 1e-6 or not all(math.isfinite(v) for v in curve):
        return ()
    if min(curve) <= 0:
        return ()
    return curve


def parse_throughput(raw: str, max_replicas: int) -> dict[int, float]:
    """Replica count -> throughput from a `gpufleet.io/throughput` value. Raises ValueError
    saying what is wrong: a pair that is not `replicas=throughput`, a count outside
    1..max_replicas, a throughput that is not a positive number, a count given twice."""
    out: dict[int, float] = {}
    for item in raw.split(","):
        count, sep, value = item.strip().partition("=")
        if not sep or not (count.strip().isascii() and count.strip().isdigit()):
            raise ValueError(
                f"{names.THROUGHPUT}: expected replicas=throughput pairs such as '4=1520.5', "
                f"got {item.strip()[:40]!r}"
            )
        replicas = int(count)
        if not 1 <= replicas <= max_replicas:
            raise ValueError(
                f"{names.THROUGHPUT}: replica count {replicas} is outside 1..{max_replicas} "
                "(elastic.maxReplicas)"
            )
        try:
            throughput = float(value)
        except ValueError:
            throughput = math.nan
        if not math.isfinite(throughput) or throughput <= 0:
            raise ValueError(
                f"{names.THROUGHPUT}: the throughput at {replicas} replicas must be a positive "
                f"number, got {value.strip()[:40]!r}"
            )
        if replicas in out:
            raise ValueError(f"{names.THROUGHPUT}: replica count {replicas} is given twice")
        out[replicas] = throughput
    return out
