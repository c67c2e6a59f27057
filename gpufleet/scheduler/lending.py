"""The live side of lending asleep standbys' GPUs (model/contract/lending.py has the contract).

Three steps of the cycle:
- reclaim (after heal): a borrowing gang whose standby the operator recalled, or which is no
  longer asleep, is preempted whole (pods deleted with their grace period, cause recorded as a
  preemption, so its TrainingJob is requeued); a standby's `lent-to` mark goes once no pod
  borrows from it;
- decide: the asleep, unrecalled, unborrowed standbys are taken out of the snapshot and handed to
  the core's `place_with_lending` as lenders: only preemptible gangs of lower priority than
  every lender may land on their GPUs, in a second step without preemption;
- lend (before binding): each standby a borrowing gang uses is marked `lent-to`, conditional on
  the resourceVersion the cache holds (a standby changed meanwhile, e.g. woken, is not lent and
  the gang waits a cycle); the borrowers' bindings record the standbys they borrow from.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from gpufleet.core.decision import GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.lending import Decide, LendingDecision, place_with_lending
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import RunningGang
from gpufleet.model.contract import lending as contract
from gpufleet.model.contract import names
from gpufleet.model.contract.standby import is_asleep
from gpufleet.scheduler import pods
from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang
from gpufleet.scheduler.cycle_report import CycleReport
from gpufleet.scheduler.deletions import Deletions
from gpufleet.scheduler.pods import PodFacts

log = logging.getLogger("gpufleet.scheduler")

RECLAIM_MESSAGE = "preempted: the standby serving replica it borrowed GPUs from is waking"


def lenders(view: ClusterView) -> tuple[RunningGang, ...]:
    """Running gangs the core may lend: every pod an asleep, unrecalled standby of gpufleet's,
    not being deleted, on whole GPUs none of which is on loan already."""
    borrowed = {lender for loan in view.loans.values() for lender in loan.values()}
    out: list[RunningGang] = []
    for gang in view.snapshot.running:
        keys = view.running_pods.get(gang.id, ())
        if not keys or "#" in gang.id or any(r.mig is not None for r in gang.replicas):
            continue
        members = [view.facts.get(k) for k in keys]
        if all(f is not None and _lendable(f, borrowed) for f in members):
            out.append(gang)
    return tuple(out)


def _lendable(f: PodFacts, borrowed: set[str]) -> bool:
    return (
        f.ours
        and not f.deleting
        and is_asleep(f.pod)
        and not contract.recalled(f.pod)
        and f.key not in borrowed
    )


def decide(
    view: ClusterView, gangs: Sequence[Gang], policy: Policy, placer: Decide
) -> LendingDecision:
    """The cycle's decision with the lendable standbys' GPUs lent (module docstring)."""
    lent = lenders(view)
    if not lent:
        return LendingDecision(placer(view.snapshot, gangs, policy))
    ids = {g.id for g in lent}
    snapshot = view.snapshot
    others = tuple(g for g in snapshot.running if g.id not in ids)
    return place_with_lending(replace(snapshot, running=others), gangs, policy, lent, placer)


class Lending:
    """Marks standbys lent before their borrowers bind; reclaims them when recalled."""

    def __init__(self, binder: Binder, deletions: Deletions) -> None:
        self.binder = binder
        self.deletions = deletions
        # Writes sent that the watch may not show yet, so a cycle does not repeat them:
        # pod key -> uid of a borrower deleted, resourceVersion of a standby unmarked.
        self._deleted: dict[str, str] = {}
        self._unlent: dict[str, str] = {}

    def lend(
        self,
        outcome: LendingDecision,
        view: ClusterView,
        by_id: Mapping[str, PendingGang],
        held: Collection[str],
        report: CycleReport,
    ) -> tuple[set[str], dict[str, dict[str, str]]]:
        """Mark the standbys each borrowing gang uses (those not `held` back already); (gangs
        that must wait because a mark was refused, pod key -> the `borrows` annotation its
        binding adds)."""
        if not outcome.borrowed:
            return set(), {}
        owner: dict[tuple[str, int], str] = {}  # (node, GPU) -> lender pod key
        for gang in lenders(view):
            for key, replica in zip(view.running_pods[gang.id], gang.replicas, strict=False):
                owner.update({(replica.node, g): key for g in replica.gpus})
        placements = {p.gang_id: p for p in outcome.decision.placements}
        waits: set[str] = set()
        extra: dict[str, dict[str, str]] = {}
        for gid in sorted({b for _, b in outcome.borrowed} - set(held)):
            placement, pg = placements.get(gid), by_id.get(gid)
            if placement is None or pg is None:
                continue
            per_pod = _borrows(placement, pg, owner)
            standbys = sorted({k for keys in per_pod.values() for k in keys})
            refused = self._mark(standbys, gid, view)
            if refused:
                log.info("cycle=%d gang %s waits: %s", report.cycle, gid, refused)
                waits.add(gid)
                continue
            extra.update({k: contract.borrows_annotation(v) for k, v in per_pod.items()})
            report.lent.extend(f"{s}->{gid}" for s in standbys)
        return waits, extra

    def _mark(self, standbys: Sequence[str], gang: str, view: ClusterView) -> str | None:
        """Mark each standby lent to `gang`; the first refusal, if any."""
        for key in standbys:
            f = view.facts.get(key)
            rv = None if f is None else f.pod["metadata"].get("resourceVersion")
            error = self.binder.patch_pod(key, contract.lend_patch(gang, rv))
            if error is not None:
                return f"standby {key} not lent: {error}"
        return None

    def reclaim(self, view: ClusterView, report: CycleReport) -> set[str]:
        """Preempt the borrowing gangs whose standbys want their GPUs back; clear the lent
        mark of standbys nobody borrows from. The gangs preempted now (settling)."""
        facts = view.facts
        borrowers: dict[str, set[str]] = defaultdict(set)  # lender key -> borrowing pod keys
        reclaimed: dict[str, list[str]] = defaultdict(list)  # gang -> why
        for f in facts.values():
            if f.node is None or f.terminal:
                continue
            for key in contract.borrowed_from(f.pod):
                lender = facts.get(key)
                if lender is None or lender.node != f.node or lender.terminal:
                    continue
                if not set(pods.assigned_gpus(f.pod) or ()) & set(
                    pods.assigned_gpus(lender.pod) or ()
                ):
                    continue
                borrowers[key].add(f.key)
                if not f.deleting and (contract.recalled(lender.pod) or not is_asleep(lender.pod)):
                    reclaimed[f.gang].append(key)
        unlent: dict[str, str] = {}
        for f in facts.values():
            if contract.lent_to(f.pod) is not None and not borrowers.get(f.key):
                rv = str(f.pod["metadata"].get("resourceVersion"))
                sent = self._unlent.get(f.key) == rv  # sent already, not yet shown
                if sent or self.binder.patch_pod(f.key, contract.unlend_patch()) is None:
                    unlent[f.key] = rv
        self._unlent = unlent
        if not reclaimed:
            self._deleted.clear()
            return set()
        members = [f for f in facts.values() if f.gang in reclaimed]
        uids = {f.key: str(f.pod["metadata"].get("uid")) for f in members}
        self._deleted = {k: u for k, u in self._deleted.items() if uids.get(k) == u}
        keys = sorted(
            f.key
            for f in members
            if f.node is not None
            and not f.terminal
            and not f.deleting
            and self._deleted.get(f.key) != uids[f.key]
        )
        if not keys:
            return set(reclaimed)
        self.deletions.remember(keys)
        failed = set(self.binder.preempt_pods(keys, names.PREEMPTED_REASON, RECLAIM_MESSAGE))
        self._deleted.update((k, uids[k]) for k in keys if k not in failed)
        gangs = sorted({facts[k].gang for k in keys})
        for gang in gangs:
            log.info(
                "cycle=%d gang %s preempted whole: standby %s recalled",
                report.cycle, gang, ", ".join(sorted(set(reclaimed[gang]))),
            )  # fmt: skip
        if failed:
            log.warning("cycle=%d reclaim: %d pod deletion(s) failed", report.cycle, len(failed))
        report.reclaimed.extend(gangs)
        return set(reclaimed)


def _borrows(
    placement: GangPlacement, pg: PendingGang, owner: Mapping[tuple[str, int], str]
) -> dict[str, set[str]]:
    """Pod key -> the standbys whose GPUs its replica of `placement` runs on."""
    out: dict[str, set[str]] = {}
    for i, replica in enumerate(placement.replicas[: len(pg.pods)]):
        keys = {owner[(replica.node, g)] for g in replica.gpus if (replica.node, g) in owner}
        if keys:
            out[pg.pods[i]] = keys
    return out
