"""Phase 6 of the cycle: the core's new MIG layouts asked of their nodes (`mig.MigRequester`);
the gangs placed on the repartitioned GPUs wait until the MIG manager reports success, and the
node takes no other pod meanwhile (`hide_reconfiguring`)."""

from __future__ import annotations

import logging
from collections import defaultdict

from gpufleet.core.decision import Decision
from gpufleet.model.contract import names
from gpufleet.model.contract.reasons import SchedulerReason, pending_text
from gpufleet.model.mig import MigLayout
from gpufleet.scheduler.cache import CachedState, SchedulerCache
from gpufleet.scheduler.cluster_view import ClusterView, closed_to_new_pods
from gpufleet.scheduler.cycle_report import CycleReport
from gpufleet.scheduler.mig_request import CONFIG_PREFIX, MigRequester

log = logging.getLogger("gpufleet.scheduler")


def hide_reconfiguring(view: ClusterView, state: CachedState) -> ClusterView:
    """The view with every node this process asked for a MIG layout unschedulable until the
    request is applied. The node's `pending` state label does that once the watch delivers it;
    until then the node looks as before the request, and a cycle in between would give its
    GPUs being repartitioned to whole-GPU pods (the chaos run's over-commit)."""
    return closed_to_new_pods(view, state.mig_requests.keys())


def request_layouts(
    decision: Decision,
    view: ClusterView,
    state: CachedState,
    requester: MigRequester,
    cache: SchedulerCache,
    report: CycleReport,
) -> dict[str, str]:
    """Ask each node for its new layouts; gang -> why it waits (every gang placed on them)."""
    if not decision.repartitions:
        return {}
    changes: dict[str, dict[int, MigLayout | None]] = defaultdict(dict)
    for r in decision.repartitions:
        changes[r.node][r.gpu] = r.new_layout
    held: dict[str, str] = {}
    in_use = {
        label
        for n in state.nodes
        if (label := (n["metadata"].get("labels") or {}).get(names.MIG_CONFIG_LABEL))
        and label.startswith(CONFIG_PREFIX)
    }
    whole, slices = view.snapshot.occupied()
    for node_name, gpus in sorted(changes.items()):
        node = view.snapshot.node(node_name)
        layouts = [gpus.get(g.index, g.mig_layout) for g in node.gpus]
        # Every gang with a replica on any GPU being repartitioned, not only on its first
        # one: a replica of whole GPUs spanning a GPU turned from MIG to whole was bound
        # before the node had that GPU (chaos run: 8 whole GPUs in use on 4 allocatable).
        users = frozenset(
            p.gang_id
            for p in decision.placements
            if any(r.node == node_name and not gpus.keys().isdisjoint(r.gpus) for r in p.replicas)
        )
        # A GPU still held by a pod (a victim of this decision being evicted, say) keeps its
        # layout: the MIG manager would reshape it under the pod. Its gangs wait; the core
        # asks again once the holders are gone.
        held_now = [
            g
            for g, layout in gpus.items()
            if (node_name, g) in whole
            or any(
                n == node_name and i == g and (layout is None or mig not in layout)
                for n, i, mig in slices
            )
        ]
        config = ""
        if held_now:
            log.info(
                "cycle=%d MIG layout of %s GPU(s) %s deferred: still in use",
                report.cycle, node_name, held_now,
            )  # fmt: skip
        else:
            try:
                config = requester.request(node_name, layouts, in_use)
            except Exception as exc:
                log.warning("cycle=%d MIG request for %s failed: %s", report.cycle, node_name, exc)
        for gid in users:
            held[gid] = pending_text(
                SchedulerReason.MIG, f"waiting for MIG reconfiguration of node {node_name}"
            )
        if config:
            in_use.add(config)
            cache.request_mig(node_name, config, users)
            report.mig_requests[node_name] = config
    return held
