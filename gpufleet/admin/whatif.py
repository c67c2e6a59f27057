"""What-if: the core's decision for a manifest on the live snapshot, with nothing written.

The manifest's pods are built as the operator would build them and added, unbound, to the
scheduler's cache state; the scheduler's `ViewBuilder` turns that into the core's snapshot and
pending gangs (with the GPUQueues, their quotas and namespace selectors). Then the scheduler's
own steps follow, in the order of its cycle and through the same functions:
- its stateless snapshot steps (`scheduler.decision_view`): over-committed nodes and nodes
  being reconfigured closed, gangs a PodDisruptionBudget protects never victims (the budgets
  read, where the scheduler learns them from the evictions a budget refused), the GPUs planned
  for gangs waiting for their victims to exit held for them (`scheduler.nominated`, from the
  nominations in the scheduler's cache: a gang of higher priority may take them, which evicts
  nothing, so the holds it takes are not among its victims, `nominated.taken`);
- its stateful snapshot steps (`scheduler.stateful_steps.remembered`): the GPUs reserved for
  moved gangs held, the progress of the running gangs that checkpoint (without which the core
  neither prices the work a service-tier eviction throws away nor plans moves), the service
  each queued gang has received, the online workload estimate with the manifest's gangs counted;
- its offer (`scheduler.stateful_steps.offer`): the heads (the manifest's gangs and those
  already waiting, which compete for the same GPUs; the victims of earlier preemptions still
  shown are settling), of many identical gangs only as many as could fit plus one, and not the
  gangs waiting for a reserved placement or bound to their held one.
What the scheduler remembers (`LiveFleet.steps`, `gpufleet.admin.steps`) is read, never
changed: beside the scheduler, from its own trackers; standalone, from what the cluster shows
(the moved gangs' reservations are then unknown). `gpufleet.core.place` decides with the live
policy over the gangs offered. The answer is the decision for the manifest's gangs: where, on
which type, at whose expense, after which MIG repartitions, or why they would wait, in the
words the scheduler would write on their pods (`waiting.pending_messages`: a gang held back
behind an identical one takes that gang's reason; a gang whose moved placement's reservation
was dropped adds why, `gpufleet.admin.steps`), and the running gangs the decision moves
to make room for a gang (the core's `Move`s with `for_gang`: an evacuation of the node
reserved for it, or a relocation so that a reclaim can clear a node for it; the gang is placed
in the same decision after same-type moves, and the scheduler binds it once the moved gangs'
and the victims' pods are gone (`mover.GangMover.start`), else it waits and takes the node in a
following one): from where to where, the price the core
charged (seconds later the moved gang is expected to finish) and the message of the event the
scheduler writes when it moves a gang (`mover.move_message`); and the gangs the same decision
evicts for other gangs whose GPUs (or queue quota) a placed gang takes (the core's
`GangPlacement.waits_for`: the scheduler holds the gang until their pods are gone,
`victims._wait_for_victims`).

The decision is the scheduler's (`scheduler.lending.decide`): with asleep standbys, their GPUs
are lent to preemptible gangs of lower priority. Not taken: the heal phase (nothing is
restarted). Not reported: the moves made for no gang of the manifest (to a faster type, to
refill a type's reserve, or for another waiting gang), and the mover's own checks when it
carries a move out (a disruption budget that refuses the deletion then skips it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from gpufleet.admin.errors import ProblemError
from gpufleet.admin.live import LiveFleet, protected
from gpufleet.admin.models.common import JobRef
from gpufleet.admin.models.jobs import ReasonPublic
from gpufleet.admin.models.whatif import (
    AwaitedVictimPublic,
    GangOutcomePublic,
    MigChangePublic,
    MovePublic,
    PlacedReplicaPublic,
    VictimPublic,
    WhatIfPublic,
)
from gpufleet.admin.workloads import job_ref, manifest_pods
from gpufleet.core.decision import Decision, GangPlacement, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.model.contract.assignment import format_layout
from gpufleet.model.contract.reasons import PendingNote
from gpufleet.model.servingjob import ServingJob
from gpufleet.model.trainingjob import TrainingJob
from gpufleet.scheduler import pods
from gpufleet.scheduler.cluster_view import ClusterView
from gpufleet.scheduler.decision_view import decision_view
from gpufleet.scheduler.lending import decide as decide_lending
from gpufleet.scheduler.mover import move_message
from gpufleet.scheduler.nominated import taken
from gpufleet.scheduler.stateful_steps import offer, remembered
from gpufleet.scheduler.victims import victims_still_shown
from gpufleet.scheduler.waiting import pending_messages


def what_if(
    live: LiveFleet, job: TrainingJob | ServingJob, policy: Policy, policy_name: str
) -> WhatIfPublic:
    namespace = job.metadata.namespace or "default"
    name = job.metadata.name
    if not name:
        raise ProblemError(422, "metadata.name is required: the job's pods are named after it")
    ref = JobRef(namespace=namespace, kind=job.kind, name=name)
    extra = manifest_pods(job, namespace, live.scheduler_name)
    observed = live.observe(extra, policy.requeue_timestamp)
    if (namespace, job.kind, name) in observed.jobs:
        raise ProblemError(
            409, f"{job.kind} {namespace}/{name} exists already; a what-if is for a new job"
        )
    ours = sorted({pods.gang_id(p) for p in extra})
    # The scheduler's phase 1 after the cache is read: the same stateless steps (budgets read
    # rather than learned from refused evictions), then its stateful ones, read not changed.
    state = observed.state
    steps = live.steps.look(ours)
    view = decision_view(observed.view, state, policy, functools.partial(protected, live))
    view = remembered(view, policy, steps, live.attained)
    # Phase 3 (nothing here is being deleted but the victims still shown).
    offered = offer(view, state, victims_still_shown(state, view.facts), policy, steps)
    gangs: list[Gang] = [pg.gang for pg in offered.gangs]
    # As the scheduler decides: asleep standbys' GPUs lent to preemptible gangs of lower
    # priority (scheduler/lending.py).
    decision = decide_lending(view, gangs, policy, place).decision if gangs else Decision()
    # A waiting gang's held GPUs the decision gives to a gang are taken, not evicted.
    decision, _ = taken(decision)
    # Why each gang would wait, as the scheduler would write it on its pods (with why its
    # move's reservation was dropped, if it had one: mover.with_dropped).
    why = pending_messages(offered.waiting, offered.capped, decision, {}, {}, view.eligibility)
    why = steps.explain(why)
    outcomes = [_outcome(gid, decision, view, why.get(gid)) for gid in ours]
    return WhatIfPublic(
        job=ref,
        placed=all(o.placed for o in outcomes),
        gangs=outcomes,
        engine=decision.stats.engine,
        policy=policy_name,
    )


def _evicted(
    decision: Decision, view: ClusterView, chosen: Callable[[Preemption], bool]
) -> list[tuple[str, JobRef | None, list[str], list[str]]]:
    """The gangs of the `chosen` preemptions, parts folded into their gang: (gang, its job,
    its pods, the gangs it is evicted for)."""
    pods_of: dict[str, list[str]] = {}
    for_gangs: dict[str, set[str]] = {}
    for p in decision.preemptions:
        if not chosen(p):
            continue
        base = p.gang_id.split("#")[0]  # a split or opportunistic part of a gang
        pods_of.setdefault(base, []).extend(view.running_pods.get(p.gang_id, ()))
        for_gangs.setdefault(base, set()).add(p.for_gang)
    return [
        (base, _job(view, keys), sorted(set(keys)), sorted(for_gangs[base]))
        for base, keys in sorted(pods_of.items())
    ]


def _job(view: ClusterView, keys: Sequence[str]) -> JobRef | None:
    """The job of the pods `keys` (from the first one's owner)."""
    first = view.facts.get(keys[0]) if keys else None
    return job_ref(first.pod) if first is not None else None


def _victims(decision: Decision, gang: str, view: ClusterView) -> list[VictimPublic]:
    return [
        VictimPublic(gang=base, job=job, pods=pods)
        for base, job, pods, _ in _evicted(decision, view, lambda p: p.for_gang == gang)
    ]


def _awaited(
    decision: Decision, placement: GangPlacement, view: ClusterView
) -> list[AwaitedVictimPublic]:
    """The gangs the decision evicts for other gangs whose GPUs (or queue quota) `placement`
    takes, as the core set them on it (`GangPlacement.waits_for`)."""
    waits = set(placement.waits_for)
    return [
        AwaitedVictimPublic(gang=base, job=job, pods=pods, for_gang=for_gang)
        for base, job, pods, for_gang in _evicted(decision, view, lambda p: p.gang_id in waits)
    ]


def _replicas(placement: GangPlacement) -> list[PlacedReplicaPublic]:
    return [
        PlacedReplicaPublic(node=r.node, gpus=list(r.gpus), mig_slice=str(r.mig) if r.mig else None)
        for r in placement.replicas
    ]


def _moves(decision: Decision, gang: str, view: ClusterView) -> list[MovePublic]:
    """The running gangs the decision moves to make room for `gang` (`Move.for_gang`)."""
    running = {g.id: g for g in view.snapshot.running}
    out = []
    for move in decision.moves:
        if move.for_gang != gang:
            continue
        keys = sorted(set(view.running_pods.get(move.gang_id, ())))
        now = running.get(move.gang_id)
        out.append(
            MovePublic(
                gang=move.gang_id,
                job=_job(view, keys),
                pods=keys,
                from_gpu_type=move.from_type,
                gpu_type=move.placement.gpu_type,
                from_nodes=sorted({r.node for r in now.replicas}) if now is not None else [],
                to_nodes=sorted({r.node for r in move.placement.replicas}),
                replicas=_replicas(move.placement),
                delay_s=max(0.0, -move.gain_s),
                reason=move_message(move),
            )
        )
    return sorted(out, key=lambda m: m.gang)


def _outcome(
    gang: str, decision: Decision, view: ClusterView, why: str | None
) -> GangOutcomePublic:
    placement = decision.placement(gang)
    if placement is None:
        note = PendingNote.parse(why) if why is not None else None
        if note is not None and note.reason is not None:
            waiting = ReasonPublic(reason=note.reason.value, message=note.detail)
        else:
            waiting = ReasonPublic(reason="NotOffered", message="the scheduler would not offer it")
        return GangOutcomePublic(
            gang=gang, placed=False, gpus=0, replicas=[], preempts=[], mig_changes=[],
            waiting=waiting, moves=_moves(decision, gang, view),
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
        replicas=_replicas(placement),
        power_cap_w=placement.power_cap_w,
        preempts=_victims(decision, gang, view),
        mig_changes=changes,
        moves=_moves(decision, gang, view),
        waits_for=_awaited(decision, placement, view),
    )
