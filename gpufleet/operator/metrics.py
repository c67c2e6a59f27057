"""Prometheus metrics of the operator: how long each reconcile pass takes, and how many fail,
per kind (TrainingJob, ServingJob). A pass that raises (kopf retries it) counts as an error."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from prometheus_client import Counter, Histogram

P = ParamSpec("P")
R = TypeVar("R")

RECONCILE_SECONDS = Histogram(
    "gpufleet_operator_reconcile_seconds",
    "Wall time of one reconcile pass of a job",
    ["kind"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
RECONCILE_ERRORS = Counter(
    "gpufleet_operator_reconcile_errors_total", "Reconcile passes that raised", ["kind"]
)


def timed(kind: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Time every call of a reconcile function of `kind` and count those that raise."""
    seconds = RECONCILE_SECONDS.labels(kind)
    errors = RECONCILE_ERRORS.labels(kind)

    def wrap(reconcile: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(reconcile)
        def timed_reconcile(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                return reconcile(*args, **kwargs)
            except Exception:
                errors.inc()
                raise
            finally:
                seconds.observe(time.perf_counter() - started)

        return timed_reconcile

    return wrap
