"""Node actions: cordon, uncordon, drain, and MIG layout changes through the label contract.

A drain cordons the node, then moves every gang holding GPUs on it off as a whole: all pods of
the gang (also those on other nodes) are evicted through the Eviction API, so
PodDisruptionBudgets apply, and only after the budgets were checked for the whole gang at once
(`scheduler.disruption.gang_blocked`, the check preemption uses); a gang a budget protects is
left running and reported blocked. The operator recreates evicted workers and the scheduler
places them elsewhere. A MIG layout is requested the way the MIG manager expects it
(`nvidia.com/mig.config=<name>`, state `pending`), only while no GPU of the node is in use, or
after such a drain.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpufleet import kubepool
from gpufleet.admin.errors import ProblemError
from gpufleet.admin.live import LiveFleet, Observed
from gpufleet.admin.models.nodes import (
    CordonPublic,
    DrainGangPublic,
    DrainOutcome,
    DrainPublic,
    MigLayoutPublic,
    MigLayoutRequest,
)
from gpufleet.admin.workloads import job_ref
from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import MigState
from gpufleet.model.gfd import hardware_for
from gpufleet.model.migparted import MigConfigError, resolve_layouts
from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.disruption import gang_blocked
from gpufleet.scheduler.pods import PodFacts

DRAIN_REASON = "DrainedByGpufleet"


class NodeActions:
    """Writes for the node routes, with the admin API's own identity."""

    def __init__(
        self, api: client.ApiClient, live: LiveFleet, drain_timeout_s: float = 60.0
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.live = live
        self.binder = Binder(self.core, workers=16, explainers=1)
        self.drain_timeout_s = drain_timeout_s

    def close(self) -> None:
        self.binder.close()

    # --- cordon ------------------------------------------------------------------------------

    def cordon(self, name: str, unschedulable: bool) -> CordonPublic:
        body: Any = {"spec": {"unschedulable": unschedulable or None}}
        try:
            kubepool.release(self.core.patch_node(name, body, _preload_content=False))
        except (ApiException, HTTPError, OSError) as exc:
            raise _api_problem(exc, f"node {name}") from exc
        return CordonPublic(node=name, unschedulable=unschedulable)

    # --- drain -------------------------------------------------------------------------------

    def drain(self, name: str, dry_run: bool) -> DrainPublic:
        observed = self.live.observe()
        raw = _node(observed, name)
        facts = observed.view.facts
        gangs = sorted({f.gang for f in facts.values() if f.holds_gpus and f.node == name})
        members: dict[str, list[PodFacts]] = {g: [] for g in gangs}
        for f in facts.values():
            if f.gang in members and not f.terminal and not f.deleting:
                members[f.gang].append(f)
        unschedulable = bool((raw.get("spec") or {}).get("unschedulable"))
        if not dry_run and not unschedulable:
            self.cordon(name, True)  # first, so nothing new lands while gangs move
            unschedulable = True
        try:
            budgets = self.binder.list_budgets(
                {f.key.partition("/")[0] for fs in members.values() for f in fs}
            )
        except (ApiException, HTTPError, OSError) as exc:
            raise ProblemError(503, f"cannot read PodDisruptionBudgets: {exc}") from exc
        spent: dict[str, int] = {}
        out: list[DrainGangPublic] = []
        for gang in gangs:
            pods = sorted(members[gang], key=lambda f: f.key)
            keys = [f.key for f in pods]
            job = job_ref(pods[0].pod) if pods else None
            blocked = gang_blocked([f.pod for f in pods], budgets, spent)
            outcome, reason = DrainOutcome.WOULD_EVICT, None
            if blocked is not None:
                outcome, reason = DrainOutcome.BLOCKED, blocked
            elif not dry_run:
                results = self.binder.evict_pods(keys, DRAIN_REASON, f"node {name} is drained")
                refused = sorted(e for e in results.values() if e is not None)
                outcome = DrainOutcome.PARTIAL if refused else DrainOutcome.EVICTED
                if refused:
                    reason = f"{len(refused)} of {len(keys)} evictions refused: {refused[0]}"
            out.append(
                DrainGangPublic(gang=gang, job=job, pods=keys, outcome=outcome, reason=reason)
            )
        done = {DrainOutcome.EVICTED, DrainOutcome.WOULD_EVICT}
        return DrainPublic(
            node=name,
            dry_run=dry_run,
            unschedulable=unschedulable,
            gangs=out,
            complete=all(g.outcome in done for g in out),
        )

    # --- MIG layout --------------------------------------------------------------------------

    def set_mig_layout(self, name: str, request: MigLayoutRequest) -> MigLayoutPublic:
        observed = self.live.observe()
        raw = _node(observed, name)
        snapshot = observed.view.snapshot
        if not snapshot.has_node(name):
            raise ProblemError(422, f"node {name} is not a GPU node gpufleet knows")
        node = snapshot.node(name)
        gpu = observed.catalog[node.gpu_type]
        if not gpu.mig_capable:
            raise ProblemError(422, f"node {name} has {node.gpu_type} GPUs, which have no MIG")
        configs = dict(observed.state.mig_configs)
        known = sorted((configs.get("mig-configs") or {}).keys())
        if request.layout not in known:
            raise ProblemError(
                422,
                f"unknown MIG layout {request.layout!r}; the MIG manager's config has "
                f"{', '.join(known) or 'none'}",
            )
        try:
            resolve_layouts(configs, request.layout, hardware_for(node.gpu_type), node.gpu_count)
        except (MigConfigError, ValueError) as exc:
            raise ProblemError(422, f"layout {request.layout} does not fit {name}: {exc}") from exc
        busy = _gpu_gangs(observed, name)
        drained: DrainPublic | None = None
        cordoned_here = False
        if busy:
            if not request.drain:
                raise ProblemError(
                    409,
                    f"the GPUs of {name} are in use by {', '.join(busy)}; pass drain=true to "
                    "move them off first",
                )
            cordoned_here = not bool((raw.get("spec") or {}).get("unschedulable"))
            drained = self.drain(name, dry_run=False)
            if not drained.complete or not self._wait_empty(name):
                if cordoned_here:
                    self.cordon(name, False)
                why = (
                    "; ".join(f"{g.gang}: {g.reason}" for g in drained.gangs if g.reason)
                    or f"GPU pods still on the node after {self.drain_timeout_s:.0f}s"
                )
                raise ProblemError(409, f"cannot empty the GPUs of {name}: {why}")
        labels = {
            names.MIG_CONFIG_LABEL: request.layout,
            names.MIG_STATE_LABEL: MigState.PENDING.value,
        }
        body: Any = {"metadata": {"labels": labels}}
        try:
            kubepool.release(self.core.patch_node(name, body, _preload_content=False))
        except (ApiException, HTTPError, OSError) as exc:
            raise _api_problem(exc, f"node {name}") from exc
        finally:
            if cordoned_here:
                self.cordon(name, False)
        return MigLayoutPublic(
            node=name, layout=request.layout, state=MigState.PENDING.value, drained=drained
        )

    def _wait_empty(self, name: str) -> bool:
        deadline = time.monotonic() + self.drain_timeout_s
        while time.monotonic() < deadline:
            if not _gpu_gangs(self.live.observe(), name):
                return True
            time.sleep(0.2)
        return False


def _node(observed: Observed, name: str) -> dict[str, Any]:
    for raw in observed.state.nodes:
        if (raw.get("metadata") or {}).get("name") == name:
            return raw
    raise ProblemError(404, f"node {name} not found")


def _gpu_gangs(observed: Observed, name: str) -> list[str]:
    """Gangs with a pod holding GPUs of node `name`."""
    return sorted({f.gang for f in observed.view.facts.values() if f.holds_gpus and f.node == name})


def _api_problem(exc: Exception, what: str) -> ProblemError:
    if not isinstance(exc, ApiException):
        return ProblemError(503, f"cannot reach the Kubernetes API to change {what}: {exc}")
    if exc.status == 404:
        return ProblemError(404, f"{what} not found")
    if exc.status in (401, 403):
        # The admin API's own identity lacks a permission: the chart's RBAC, not the user's.
        return ProblemError(503, f"the admin API may not change {what}: {exc.reason}")
    return ProblemError(503, f"the Kubernetes API refused a change of {what}: {exc.status}")
