"""What-if: the core's decision for a manifest on the live snapshot, with nothing written.

The manifest's pods are built as the operator would build them and added, unbound, to the
scheduler's cache state; the scheduler's `ViewBuilder` turns that into the core's snapshot and
pending gangs (with the GPUQueues, their quotas and namespace selectors), and the scheduler's
snapshot steps follow (`scheduler.decision_view`: over-committed nodes and nodes being
reconfigured closed, gangs a PodDisruptionBudget protects never victims; then the service each
queued gang has received). `gpufleet.core.place` decides with the live policy over every gang
the scheduler would offer now (`scheduler.offer.heads`: the manifest's and those already
waiting, which compete for the same GPUs). The answer is the decision for the
manifest's gangs: where, on which type, at whose expense, after which MIG repartitions, or why
they would wait.
"""

from __future__ import annotations

import functools

from gpufleet.admin.errors import ProblemError
from gpufleet.admin.live import LiveFleet, protected
from gpufleet.admin.models.common import JobRef
from gpufleet.admin.models.jobs import ReasonPublic
from gpufleet.admin.models.whatif import (
    GangOutcomePublic,
    MigChangePublic,
    PlacedReplicaPublic,
    VictimPublic,
    WhatIfPublic,
)
from gpufleet.admin.workloads import job_ref, manifest_pods
from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.model.contract.assignment import format_layout
from gpufleet.model.servingjob import ServingJob
from gpufleet.model.trainingjob import TrainingJob
from gpufleet.scheduler import pods
from gpufleet.scheduler.cluster_view import ClusterView
from gpufleet.scheduler.decision_view import decision_view
from gpufleet.scheduler.offer import heads
from gpufleet.scheduler.victims import victims_still_shown


def what_if(
    live: LiveFleet, job: TrainingJob | ServingJob, policy: Policy, policy_name: str
) -> WhatIfPublic:
    namespace = job.metadata.namespace or "default"
    name = job.metadata.name
    if not name:
        raise ProblemError(422, "metadata.name is required: the job's pods are named after it")
    ref = JobRef(namespace=namespace, kind=job.kind, name=name)
    extra = manifest_pods(job, namespace, live.scheduler_name)
    observed = live.observe(extra)
    if (namespace, job.kind, name) in observed.jobs:
        raise ProblemError(
            409, f"{job.kind} {namespace}/{name} exists already; a what-if is for a new job"
        )
    # The scheduler's phase 1 after the cache is read: the same steps (budgets read rather
    # than learned from refused evictions), then the service a queue's gangs have received.
    state = observed.state
    view = decision_view(observed.view, state, policy, functools.partial(protected, live))
    view = live.attained.attach(view, policy)
    ours = sorted({pods.gang_id(p) for p in extra})
    offered, _ = heads(view, state, victims_still_shown(state, view.facts))
    gangs: list[Gang] = [pg.gang for pg in offered]
    decision = place(view.snapshot, gangs, policy) if gangs else Decision()
    outcomes = [_outcome(gid, decision, view) for gid in ours]
    return WhatIfPublic(
        job=ref,
        placed=all(o.placed for o in outcomes),
        gangs=outcomes,
        engine=decision.stats.engine,
        policy=policy_name,
    )


def _victims(decision: Decision, gang: str, view: ClusterView) -> list[VictimPublic]:
    by_gang: dict[str, list[str]] = {}
    for p in decision.preemptions:
        if p.for_gang != gang:
            continue
        base = p.gang_id.split("#")[0]  # a split or opportunistic part of a gang
        by_gang.setdefault(base, []).extend(view.running_pods.get(p.gang_id, ()))
    out = []
    for base, keys in sorted(by_gang.items()):
        first = view.facts.get(keys[0]) if keys else None
        job = job_ref(first.pod) if first is not None else None
        out.append(VictimPublic(gang=base, job=job, pods=sorted(set(keys))))
    return out


def _outcome(gang: str, decision: Decision, view: ClusterView) -> GangOutcomePublic:
    placement = decision.placement(gang)
    if placement is None:
        pending = decision.pending_for(gang)
        if pending is not None:
            waiting = ReasonPublic(reason=pending.reason.value, message=pending.message)
        elif gang in view.held:
            waiting = ReasonPublic(reason="GangNotReady", message=view.held[gang])
        else:
            waiting = ReasonPublic(reason="NotOffered", message="the scheduler would not offer it")
        return GangOutcomePublic(
            gang=gang, placed=False, gpus=0, replicas=[], preempts=[], mig_changes=[],
            waiting=waiting,
        )  # fmt: skip
    used = {(r.node, g) for r in placement.replicas for g in r.gpus}
    changes = [
        MigChangePublic(
            node=r.node,
            gpu=r.gpu,
            layout=None if r.new_layout is None else format_layout(r.new_layout),
        )
        for r in decision.repartitions
        if (r.node, r.gpu) in used
    ]
    return GangOutcomePublic(
        gang=gang,
        placed=True,
        gpu_type=placement.gpu_type,
        gpus=sum(1 if r.mig is not None else len(r.gpus) for r in placement.replicas),
        replicas=[
            PlacedReplicaPublic(
                node=r.node, gpus=list(r.gpus), mig_slice=str(r.mig) if r.mig else None
            )
            for r in placement.replicas
        ],
        power_cap_w=placement.power_cap_w,
        preempts=_victims(decision, gang, view),
        mig_changes=changes,
    )
