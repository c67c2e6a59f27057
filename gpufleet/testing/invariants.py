"""Invariants of a cluster scheduled by gpufleet, checked from the API server's objects alone.

Used by the integration tests and the benchmark after every disruptive step (operator killed,
node lost, gangs competing), and usable against a live cluster:
- no node has more GPUs or MIG slices in use than it advertises;
- no whole GPU or MIG instance is recorded on two live pods of one node, but for one pairing:
  an asleep standby and a preemptible pod of lower priority borrowing it
  (`model.contract.lending.loan_gpus`), whose borrowed GPUs are counted once;
- every gpufleet gang has none or at least its gang size of pods bound (pods already being
  deleted aside);
- no TrainingJob has two live pods for one rank.

A gang is bound one Binding per pod, so an observer polling the cluster sees it partly bound
while its bindings are in flight, and a leader killed between two of them leaves it so until the
next leader's first cycle completes or restarts it. `PartialGangClock` says when a partly bound
gang has lasted too long, by the operators' Lease (`read_term`).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract import lending, names
from gpufleet.scheduler import pods
from gpufleet.scheduler.lease import DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE

Obj = Mapping[str, Any]
JOB_LABEL = names.TRAININGJOB_LABEL


def _live(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and not pods.is_terminal(pod)


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _loans(all_pods: Iterable[Obj]) -> dict[str, dict[int, str]]:
    """Borrowing pod key -> {GPU: lender key} of every valid loan (model.contract.lending)."""
    listed = list(all_pods)
    by_key = {pods.pod_key(p): p for p in listed}
    out: dict[str, dict[int, str]] = {}
    for pod in listed:
        if lending.borrowed_from(pod) and (lent := lending.loan_gpus(pod, by_key)):
            out[pods.pod_key(pod)] = lent
    return out


def capacity_violations(nodes: Iterable[Obj], all_pods: Iterable[Obj]) -> list[str]:
    """Nodes whose GPU or MIG resources are over-committed by bound, unfinished pods (a GPU
    lent by an asleep standby counts once)."""
    allocatable = {
        n["metadata"]["name"]: (n.get("status") or {}).get("allocatable") or {} for n in nodes
    }
    pod_list = list(all_pods)
    loans = _loans(pod_list)
    used: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in pod_list:
        node = pods.node_name(pod)
        if node is None or pods.is_terminal(pod):
            continue
        request = pods.gpu_request(pod)
        if request.gpus:
            lent = len(loans.get(pods.pod_key(pod), {}))
            used[node][names.WHOLE_GPU_RESOURCE] += request.gpus - lent
        if request.mig_profile:
            used[node][names.MIG_RESOURCE_PREFIX + request.mig_profile] += 1
    out = []
    for node, counts in sorted(used.items()):
        if node not in allocatable:
            continue  # orphans of a deleted node hold no real GPU; they are being removed
        for resource, n in sorted(counts.items()):
            have = _int(allocatable.get(node, {}).get(resource, 0))
            if n > have:
                out.append(f"{node}: {n} x {resource} in use, {have} allocatable")
    return out


def double_bookings(all_pods: Iterable[Obj]) -> list[str]:
    """GPUs or MIG instances that two live pods on one node both hold, but for a standby and
    its borrower on the GPUs of a valid loan."""
    pod_list = list(all_pods)
    loans = _loans(pod_list)
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pod in pod_list:
        node = pods.node_name(pod)
        if node is None or pods.is_terminal(pod):
            continue
        mig = pods.assigned_mig(pod)
        if mig is not None:
            holders[(node, f"gpu{mig[0]}/{mig[1]}")].append(pods.pod_key(pod))
            continue
        lent = loans.get(pods.pod_key(pod), {})
        for g in pods.assigned_gpus(pod) or ():
            if g not in lent:  # a GPU on loan is the standby's, recorded there
                holders[(node, f"gpu{g}")].append(pods.pod_key(pod))
    return [
        f"{node} {what} held by {', '.join(sorted(keys))}"
        for (node, what), keys in sorted(holders.items())
        if len(keys) > 1
    ]


def partial_gangs(all_pods: Iterable[Obj]) -> list[str]:
    """gpufleet gangs with some of their live pods bound but fewer than the gang size (an
    elastic gang's pods beyond its size are room to grow and may stay unbound)."""
    return list(partly_bound(all_pods).values())


def partly_bound(all_pods: Iterable[Obj]) -> dict[str, str]:
    """`partial_gangs` by gang id: gang id -> the violation's text."""
    gangs: dict[str, list[Obj]] = defaultdict(list)
    for pod in all_pods:
        ours = (pod.get("spec") or {}).get("schedulerName") == names.SCHEDULER_NAME
        if ours and _live(pod) and (pod["metadata"].get("labels") or {}).get(names.GANG_LABEL):
            gangs[pods.gang_id(pod)].append(pod)
    out = {}
    for gid, members in sorted(gangs.items()):
        bound = sum(1 for p in members if pods.node_name(p))
        size = min(len(members), pods.gang_size(members[0]))
        if 0 < bound < size:
            out[gid] = f"gang {gid}: {bound} live pods bound, the gang needs {size}"
    return out


def duplicate_workers(all_pods: Iterable[Obj]) -> list[str]:
    """TrainingJob ranks with more than one live pod."""
    seen: Counter[tuple[str, str, str]] = Counter()
    for pod in all_pods:
        labels = pod["metadata"].get("labels") or {}
        if JOB_LABEL in labels and _live(pod):
            ns = pod["metadata"].get("namespace", "default")
            seen[(ns, labels[JOB_LABEL], labels.get(names.RANK_LABEL, "?"))] += 1
    return [
        f"{ns}/{job} rank {rank}: {n} pods" for (ns, job, rank), n in sorted(seen.items()) if n > 1
    ]


def violations(nodes: Iterable[Obj], all_pods: Iterable[Obj]) -> list[str]:
    node_list, pod_list = list(nodes), list(all_pods)
    return (
        capacity_violations(node_list, pod_list)
        + double_bookings(pod_list)
        + partial_gangs(pod_list)
        + duplicate_workers(pod_list)
    )


def read_cluster(core: client.CoreV1Api) -> tuple[list[Obj], list[Obj]]:
    """Nodes and pods as JSON, straight from the API server."""
    raw_nodes: Any = core.list_node(_preload_content=False)
    raw_pods: Any = core.list_pod_for_all_namespaces(_preload_content=False)
    return json.loads(raw_nodes.data)["items"], json.loads(raw_pods.data)["items"]


def check(core: client.CoreV1Api) -> list[str]:
    return violations(*read_cluster(core))


# --- partly bound gangs over time: who could have completed them, and since when ------------


@dataclass(frozen=True, slots=True)
class Term:
    """One leader's tenure as the operators' Lease shows it: its holder, when it acquired the
    Lease and when it last renewed it (seconds since the epoch, by the holder's clock)."""

    holder: str
    acquired: float
    renewed: float


# No leader election to read (a scheduler run on its own): a leader that is always there.
ALWAYS_LEADING = Term("", -math.inf, math.inf)
# How long a new leader may take from acquiring the Lease to its first cycle's writes (its
# informers list the cluster first): see bench/README.md, "Chaos under load".
TAKEOVER_S = 20.0


def _epoch(text: Any) -> float | None:
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S%z"):
        try:
            return datetime.strptime(str(text).replace("Z", "+0000"), fmt).timestamp()
        except ValueError:
            continue
    return None


def read_term(
    coordination: client.CoordinationV1Api,
    namespace: str = DEFAULT_LEASE_NAMESPACE,
    name: str = DEFAULT_LEASE_NAME,
) -> Term | None:
    """The current holder's term of the operators' Lease; None when nobody holds it (no Lease
    yet, or released by a leader that stopped)."""
    try:
        raw: Any = coordination.read_namespaced_lease(name, namespace, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    spec = json.loads(raw.data).get("spec") or {}
    acquired, renewed = _epoch(spec.get("acquireTime")), _epoch(spec.get("renewTime"))
    if not spec.get("holderIdentity") or acquired is None or renewed is None:
        return None
    return Term(spec["holderIdentity"], acquired, renewed)


@dataclass(slots=True)
class _Seen:
    since: float  # first seen partly bound (this stretch)
    last: float  # last seen partly bound
    text: str
    cleared: bool = False
    reported: bool = False


class PartialGangClock:
    """Which partly bound gangs have lasted too long, judged against the Lease.

    A gang seen partly bound from `since` is overdue once it is still (or was last seen) partly
    bound after
        deadline = max(since, acquired + takeover) + grace
    where `acquired` is when the current holder took the Lease, provided that holder renewed
    it at or after the deadline. So:
    - under a leader that has led for a while, `grace` after the gang was first seen (bindings
      in flight; 3 s by default), as before;
    - a gang the new leader inherited (left by a leader killed between two bindings, or seen
      during the new leader's start) is its to complete or restart within `takeover` of taking
      the Lease (informers listed, first cycle run), plus `grace` for those writes;
    - the clock judges only a holder seen alive at the deadline (a renewal at or after it): a
      killed leader still named by its unexpired Lease can complete nothing, and nobody else
      may act until the Lease expires; its gangs pass to the next holder, whose takeover counts
      from its acquireTime. A live leader renews every few seconds, so a gang it leaves partly
      bound is reported at its next renewal, also when the gang cleared in between (a
      process that renews after the deadline was alive throughout).
    Without leader election, `ALWAYS_LEADING`: `grace` after first seen.
    """

    def __init__(self, grace: float = 3.0, takeover: float = TAKEOVER_S) -> None:
        self.grace = grace
        self.takeover = takeover
        self._seen: dict[str, _Seen] = {}
        self._term: tuple[str, float] | None = None

    @property
    def watching(self) -> bool:
        """Whether some gang is partly bound, or was and is not judged yet."""
        return bool(self._seen)

    def deadline(self, since: float, term: Term) -> float:
        return max(since, term.acquired + self.takeover) + self.grace

    def observe(self, partial: Mapping[str, str], term: Term | None, now: float) -> list[str]:
        """Record one look at the cluster at `now` (`partial`: gang id -> text, as
        `partly_bound` gives; `term`: the Lease's current holder, None when nobody holds it);
        the texts of the gangs overdue."""
        key = None if term is None else (term.holder, term.acquired)
        if key != self._term:  # a new holder: the old one is not there to judge for cleared gangs
            self._seen = {g: s for g, s in self._seen.items() if not s.cleared}
            self._term = key
        for gid, text in partial.items():
            seen = self._seen.get(gid)
            if seen is None or seen.cleared:
                self._seen[gid] = _Seen(now, now, text)
            else:
                seen.last, seen.text = now, text
        for gid, seen in self._seen.items():
            seen.cleared = gid not in partial
        overdue = []
        for gid, seen in sorted(self._seen.items()):
            if term is None:
                if seen.cleared:
                    del self._seen[gid]  # no holder to judge
                continue
            deadline = self.deadline(seen.since, term)
            if seen.cleared and (seen.reported or seen.last <= deadline):
                del self._seen[gid]  # reported while it lasted, or cleared in time
            elif seen.last > deadline and term.renewed >= deadline:
                overdue.append(seen.text)  # while it lasts; once when it cleared unreported
                seen.reported = True
                if seen.cleared:
                    del self._seen[gid]
        return overdue


class SettledChecker:
    """The cluster invariants for polling loops: everything at once, but partly bound gangs
    only once `PartialGangClock` finds them overdue. `term` reads the Lease's holder
    (`read_term`); without it, `ALWAYS_LEADING`."""

    def __init__(
        self,
        core: client.CoreV1Api,
        grace: float = 3.0,
        takeover: float = TAKEOVER_S,
        term: Callable[[], Term | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = core
        self.clock_of_gangs = PartialGangClock(grace, takeover)
        self.term = term or (lambda: ALWAYS_LEADING)
        self.clock = clock

    def check(self) -> list[str]:
        term = self.term()
        nodes, all_pods = read_cluster(self.core)
        overdue = self.clock_of_gangs.observe(partly_bound(all_pods), term, self.clock())
        others = (
            capacity_violations(nodes, all_pods)
            + double_bookings(all_pods)
            + duplicate_workers(all_pods)
        )
        return others + overdue


def final_check(
    core: client.CoreV1Api,
    grace: float = 3.0,
    every: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> list[str]:
    """The invariants at the end of a run (one live leader), with the polling loops' rule for
    partly bound gangs: one read can catch a gang between two of its bindings, so a gang it
    shows partly bound is read again until it is whole (or gone) or has been partly bound for
    `grace` seconds. Every other violation of any of these reads counts."""
    checker = SettledChecker(core, grace, clock=clock)
    found: dict[str, None] = {}
    started = clock()
    while True:
        found.update(dict.fromkeys(checker.check()))
        if not checker.clock_of_gangs.watching or clock() - started > grace:
            return list(found)
        sleep(every)
