"""Workload samples for robustness runs: what one run of every policy replays, and its history.

* **Alibaba packing orders** (the FGD paper's evaluation, ATC'23): the pods of one pod list in a
  random order (seeded), re-timed with the list's own arrival times in order (the k-th pod of the
  order arrives at the k-th earliest creation time), never departing, until their requests reach
  `overcommit` x the fleet's GPUs. The first `history` pods of the order are not replayed: they
  are the past a live operator would have persisted, the only source of the workload prior.
A sample never hands a policy anything from its own replay ahead of time: the history is disjoint
from the replayed pods and, in the re-timed order, earlier.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.sim.traces.common import TraceJob

__all__ = ["NEVER", "Replay", "packing_order"]

NEVER = 1e15  # run time of a pod that never departs within a packing replay (seconds)


@dataclass(frozen=True)
class Replay:
    """Jobs to replay, and the jobs before them that may seed the workload estimate."""

    jobs: list[TraceJob]
    history: list[TraceJob]


def packing_order(
    pods: Sequence[TraceJob],
    seed: int,
    fleet_gpus: float,
    *,
    history: int = 1000,
    overcommit: float = 1.2,
) -> Replay:
    """A random order of `pods` re-timed with their arrival times in order (see module)."""
    if not pods:
        raise ValueError("no pods to order")
    if history < 0 or overcommit <= 0 or fleet_gpus <= 0:
        raise ValueError("history must be >= 0; overcommit and fleet_gpus positive")
    times = sorted(p.arrival_s for p in pods)
    order = list(pods)
    random.Random(f"packing-order:{seed}").shuffle(order)
    past, rest = order[:history], order[history:]
    jobs: list[TraceJob] = []
    requested = 0.0
    for pod, t in zip(rest, times, strict=False):
        if requested >= overcommit * fleet_gpus:
            break
        jobs.append(replace(pod, arrival_s=t - times[0], work_s=NEVER))
        requested += pod.gpu_share
    return Replay(jobs, past)
