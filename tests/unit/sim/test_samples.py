"""Alibaba packing orders for robustness runs (sim/samples.py).

Aspects: an order is a seeded permutation of the pod list re-timed with the list's arrival times
in order; it stops once requests reach the overcommit share of the fleet; the history that may
seed the workload estimate is disjoint from the replayed pods; bad arguments are refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.sim.samples import NEVER, packing_order
from gpufleet.sim.traces.common import TraceJob

PODS = [
    TraceJob(
        f"p{i}",
        arrival_s=100.0 + 7.0 * i,
        work_s=50.0,
        replicas=1,
        gpus_per_replica=1 + i % 2,
        model="m",
    )
    for i in range(40)
]


def test_order_is_seeded_permutation_retimed_in_order() -> None:
    a = packing_order(PODS, 1, fleet_gpus=1000.0, history=0)
    b = packing_order(PODS, 1, fleet_gpus=1000.0, history=0)
    c = packing_order(PODS, 2, fleet_gpus=1000.0, history=0)
    assert [j.job_id for j in a.jobs] == [j.job_id for j in b.jobs]
    assert [j.job_id for j in a.jobs] != [j.job_id for j in c.jobs]
    assert sorted(j.job_id for j in a.jobs) == sorted(p.job_id for p in PODS)
    # The k-th pod of the order arrives at the k-th earliest arrival (from zero), never departs.
    assert [j.arrival_s for j in a.jobs] == [7.0 * i for i in range(40)]
    assert all(j.work_s == NEVER for j in a.jobs)


def test_order_stops_at_the_overcommit_and_history_is_disjoint() -> None:
    replay = packing_order(PODS, 3, fleet_gpus=10.0, history=5, overcommit=1.2)
    requested = [j.gpu_share for j in replay.jobs]
    assert sum(requested[:-1]) < 12.0 <= sum(requested)
    assert len(replay.history) == 5
    assert not {j.job_id for j in replay.history} & {j.job_id for j in replay.jobs}
    # The history keeps its own times; the replay starts at the list's first arrival.
    assert replay.jobs[0].arrival_s == 0.0


@pytest.mark.parametrize(
    ("pods", "kwargs"),
    [
        ([], {}),
        (PODS, {"history": -1}),
        (PODS, {"overcommit": 0.0}),
    ],
)
def test_bad_arguments_are_refused(pods: list[TraceJob], kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        packing_order(pods, 0, 10.0, **kwargs)
