"""Kubernetes HPA as a serving controller: the baseline the autoscaler and mixed benches replay.

`HpaController` has the `Controller` shape of `replay.py`: one per-replica metric per pool
(`vllm:num_requests_running` averaged over ready replicas, KServe's documented example metric,
reference/serving.md §6) with HPA's real defaults (§5).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gpufleet.sim.serving.replay import PoolBounds, PoolView

__all__ = ["HpaController"]


class HpaController:
    """Kubernetes HPA (autoscaling/v2) on one per-replica metric per pool, with its defaults.

    desired = ceil(current x metric / target), skipped inside the 0.1 tolerance; scale-up limited
    to max(+100 %, +4 pods) per 15 s with no stabilization; scale-down to the highest
    recommendation of the last 300 s (serving.md §5). A missing metric keeps the current count.
    """

    def __init__(self, targets: Mapping[str, float], bounds: Mapping[str, PoolBounds]) -> None:
        self.targets = dict(targets)
        self.bounds = dict(bounds)
        self.tolerance = 0.1
        self.down_window_s = 300.0
        self.up_period_s = 15.0
        self.history: dict[str, list[tuple[float, int]]] = {k: [] for k in targets}
        self.changes: dict[str, list[tuple[float, int, int]]] = {k: [] for k in targets}
        self.events = 0

    def __call__(self, now: float, pools: Mapping[str, PoolView]) -> Mapping[str, int]:
        out: dict[str, int] = {}
        for name, view in pools.items():
            current = view.current_replicas
            b = self.bounds[name]
            rec = current
            latest = view.window[-1] if view.window else None
            if latest is not None and latest.num_running is not None and view.ready_replicas:
                # HPA averages a per-pod metric over ready pods (unready pods are ignored).
                per_pod = latest.num_running / view.ready_replicas
                ratio = per_pod / self.targets[name]
                if abs(ratio - 1.0) > self.tolerance:
                    rec = math.ceil(view.ready_replicas * ratio)
                    # Pods still starting keep their slot when scaling up (HPA counts them).
                    rec = max(rec, current) if ratio > 1 else rec
            rec = max(b.min_replicas, min(b.max_replicas, rec))
            hist = [(t, n) for t, n in self.history[name] if t > now - self.down_window_s]
            hist.append((now, rec))
            self.history[name] = hist
            desired = current
            if rec > current:
                added = sum(
                    to - fr for t, fr, to in self.changes[name] if t > now - self.up_period_s
                )
                base = current - added
                limit = max(2 * base, base + 4)
                desired = min(rec, limit)
            else:
                desired = min(current, max(n for _, n in hist))
            if desired != current:
                self.changes[name].append((now, current, desired))
                self.events += 1
            out[name] = desired
        return out
