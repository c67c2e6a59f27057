"""The scheduler's in-memory view of the cluster, with assumed bindings overlaid.

Informers write nodes, pods, the MIG config map, GPUQueues and namespaces' labels in; every
cycle reads a consistent copy. A binding is *assumed* before it is written to the API server, so
the next cycle already counts those GPUs as used even if the watch has not yet delivered the
bound pod; a failed write *forgets* the assumption. An assumption ends when the watch shows the
pod bound (the pod then carries the same annotations), when the pod disappears, or when it
expires: a TTL after its binding was answered, never while the binding is still being written.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from gpufleet.core.decision import GangPlacement
from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import MigState
from gpufleet.model.migparted import MIG_APPLIED_ANNOTATION
from gpufleet.scheduler import pods

Obj = dict[str, Any]

# The suffix of the running gang under which a nominated gang's held GPUs are shown to the
# core (nominated.py); here, not there, so that the queue status (queue_objects.py, which the
# view builder imports) can tell a hold from usage.
HELD_SUFFIX = "#nominated"


def is_hold(gang_id: str) -> bool:
    """Whether a running gang's id (or a preemption's victim) is a nominated gang's hold."""
    return gang_id.endswith(HELD_SUFFIX)


# The suffix of the running gang under which a moved gang's reserved placement is shown to the
# core until the gang is bound there (mover.py); here for the same reason as HELD_SUFFIX.
RESERVED_SUFFIX = "#moving"


def is_kept(gang_id: str) -> bool:
    """Whether a running gang's id stands for GPUs kept for a gang that does not run there yet
    (a nominated gang's hold, a moved gang's reservation): no usage, in the queue status."""
    return is_hold(gang_id) or gang_id.endswith(RESERVED_SUFFIX)


# The DisruptionTarget reason the API server writes on every pod evicted through its API.


@dataclass(frozen=True, slots=True)
class Assumption:
    node: str
    annotations: Mapping[str, str]
    expires: float


@dataclass(frozen=True, slots=True)
class Nomination:
    """A gang that preempted victims waits until their pods are gone (and, placed on GPUs of
    gangs moved for it, until the moved gangs' deleted pods are gone too)."""

    # (pod key, uid): the operator recreates an evicted (or moved) worker under the same name
    # at once, so only the uid tells the victim from its replacement.
    victims: frozenset[tuple[str, str]]
    expires: float
    # Why it waits, when not for victims of its own (a gang given GPUs of another gang's
    # victims: `GangPlacement.waits_for`, or of gangs moved for it: `mover.py`); None: the
    # usual preemptor's message.
    message: str | None = None
    # The placement the decision planned for it: its GPUs are held for it while it waits, and
    # it is bound there once the pods are gone if they are still free (nominated.py); None:
    # nothing held, it is decided afresh.
    placement: GangPlacement | None = None
    # The pods are all gone (set by `SchedulerCache.state`): the gang is no longer kept from
    # the core; a nomination with a placement stays until it expires or the gang is bound, so
    # the loop finds the placement (one without is dropped).
    ready: bool = False


@dataclass(frozen=True, slots=True)
class MigRequest:
    """A MIG config gpufleet asked a node for; gangs needing it wait until it is applied."""

    config: str
    gangs: frozenset[str]
    expires: float


@dataclass
class CachedState:
    """A copy handed to one cycle."""

    nodes: list[Obj]
    pods: list[Obj]
    mig_configs: dict[str, Any]
    nominations: dict[str, Nomination] = field(default_factory=dict)
    # The GPUQueue objects; None when queues are not watched (no quotas, no fair share).
    queues: list[Obj] | None = None
    mig_requests: dict[str, MigRequest] = field(default_factory=dict)
    # Namespace -> its labels, for the queues' namespace selectors. Never mutated: the cache
    # replaces the whole mapping when a namespace's labels change.
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


class SchedulerCache:
    def __init__(
        self,
        assume_ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        owner_labels: tuple[str, ...] = (names.TRAININGJOB_LABEL, names.SERVINGJOB_LABEL),
    ) -> None:
        self._lock = threading.Lock()
        # (label, namespace, label value) -> pod keys: the operator reads a job's pods from
        # here, so the process watches pods once (kopf would filter every pod event in Python
        # again). The first label is the one `owned_pods` reads.
        self._owner_labels = owner_labels
        self._by_owner: dict[tuple[str, str, str], set[str]] = {}
        self._deleted_hooks: list[Callable[[Obj], None]] = []
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, Obj] = {}
        self._mig_configs: dict[str, Any] = {}
        self._queues: dict[str, Obj] | None = None  # None until the queue informer lists
        self._namespace_labels: Mapping[str, Mapping[str, str]] = {}
        self._assumed: dict[str, Assumption] = {}
        # pod key -> (pod, assumption, the pod as shown bound): `state()` hands out the same
        # copy while neither changes, so the snapshot builder can reuse what it read of it.
        self._shown: dict[str, tuple[Obj, Assumption, Obj]] = {}
        self._nominations: dict[str, Nomination] = {}
        self._mig_requests: dict[str, MigRequest] = {}
        self._ttl = assume_ttl
        self._clock = clock
        self.changed = threading.Event()  # set on every update; the loop waits on it

    # --- informer callbacks ------------------------------------------------------------------

    def replace_nodes(self, items: list[Obj]) -> None:
        with self._lock:
            self._nodes = {n["metadata"]["name"]: n for n in items}
        self.changed.set()

    def node_event(self, kind: str, obj: Obj) -> None:
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(obj["metadata"]["name"], None)
            else:
                self._nodes[obj["metadata"]["name"]] = obj
        self.changed.set()

    def replace_pods(self, items: list[Obj]) -> None:
        with self._lock:
            self._pods = {pods.pod_key(p): p for p in items}
            self._by_owner = {}
            for key, pod in self._pods.items():
                self._index(key, pod, add=True)
            for key in list(self._assumed):
                self._settle(key)
        self.changed.set()

    def pod_event(self, kind: str, obj: Obj) -> None:
        key = pods.pod_key(obj)
        with self._lock:
            if kind == "DELETED":
                old = self._pods.pop(key, None)
                self._index(key, obj, add=False)
            else:
                old = self._pods.get(key)
                self._pods[key] = obj
                self._index(key, obj, add=True)
            relevant = kind != "MODIFIED" or _matters(old, obj, self._assumed.get(key))
            self._settle(key)
            hooks = list(self._deleted_hooks) if kind == "DELETED" else []
        for hook in hooks:
            hook(obj)
        if relevant:
            self.changed.set()

    def _index(self, key: str, pod: Obj, add: bool) -> None:
        labels = pod["metadata"].get("labels") or {}
        for label in self._owner_labels:
            owner = labels.get(label)
            if owner is None:
                continue
            slot = (label, pod["metadata"].get("namespace", "default"), owner)
            if add:
                self._by_owner.setdefault(slot, set()).add(key)
            elif slot in self._by_owner:
                self._by_owner[slot].discard(key)
                if not self._by_owner[slot]:
                    del self._by_owner[slot]

    def on_pod_deleted(self, hook: Callable[[Obj], None]) -> None:
        """Call `hook(pod)` (outside the lock) for every pod the watch reports deleted."""
        with self._lock:
            self._deleted_hooks.append(hook)

    def owned_pods(self, namespace: str, owner: str) -> list[Obj]:
        """Pods labelled `<first owner label>=<owner>` in `namespace` (a TrainingJob's), as the
        API server shows them."""
        return self.labelled_pods(self._owner_labels[0], namespace, owner)

    def labelled_pods(self, label: str, namespace: str, value: str) -> list[Obj]:
        """Pods labelled `<label>=<value>` in `namespace` (`label` one of the owner labels)."""
        with self._lock:
            keys = self._by_owner.get((label, namespace, value), set())
            return [self._pods[k] for k in sorted(keys) if k in self._pods]

    def replace_queues(self, items: list[Obj]) -> None:
        with self._lock:
            self._queues = {q["metadata"]["name"]: q for q in items}
        self.changed.set()

    def queue_event(self, kind: str, obj: Obj) -> None:
        with self._lock:
            if self._queues is None:
                self._queues = {}
            if kind == "DELETED":
                self._queues.pop(obj["metadata"]["name"], None)
            else:
                # A status write (the scheduler's own) changes nothing it decides on: the
                # object is kept, so the queue tree built from it is reused.
                old = self._queues.get(obj["metadata"]["name"])
                if old is not None and old.get("spec") == obj.get("spec"):
                    return
                self._queues[obj["metadata"]["name"]] = obj
        self.changed.set()

    def replace_namespaces(self, items: list[Obj]) -> None:
        labels = {n["metadata"]["name"]: dict(n["metadata"].get("labels") or {}) for n in items}
        with self._lock:
            self._namespace_labels = labels
        self.changed.set()

    def namespace_event(self, kind: str, obj: Obj) -> None:
        """Only a namespace's labels matter to the scheduler (queue namespace selectors): any
        other change (status, annotations) neither copies the mapping nor wakes the loop."""
        name = obj["metadata"]["name"]
        labels = dict(obj["metadata"].get("labels") or {})
        with self._lock:
            current = self._namespace_labels
            if kind == "DELETED":
                if name not in current:
                    return
                self._namespace_labels = {k: v for k, v in current.items() if k != name}
            else:
                if current.get(name) == labels:
                    return
                self._namespace_labels = {**current, name: labels}
        self.changed.set()

    def replace_configmaps(self, items: list[Obj]) -> None:
        for item in items:
            self.configmap_event("ADDED", item)

    def configmap_event(self, kind: str, obj: Obj) -> None:
        if obj["metadata"]["name"] != names.MIG_CONFIGMAP_NAME:
            return
        doc: dict[str, Any] = {}
        if kind != "DELETED":
            text = (obj.get("data") or {}).get(names.MIG_CONFIGMAP_KEY, "")
            try:
                doc = yaml.safe_load(text) or {}
            except yaml.YAMLError:
                doc = {}
        with self._lock:
            self._mig_configs = doc
        self.changed.set()

    def _settle(self, key: str) -> None:
        """Drop an assumption the cluster has confirmed (pod bound) or made moot (pod gone)."""
        if key not in self._assumed:
            return
        pod = self._pods.get(key)
        if pod is None or pods.node_name(pod):
            del self._assumed[key]

    # --- assume / forget -------------------------------------------------------------------

    def assume(
        self, key: str, node: str, annotations: Mapping[str, str], in_flight: bool = False
    ) -> None:
        """Count `key` bound to `node` with `annotations` from now on. An assumption made
        `in_flight` does not expire before `answered` says its binding was answered: a batch
        of thousands of bindings on a loaded API server takes longer than the TTL, and an
        assumption that expired first gave its GPUs out a second time (1,000-node run)."""
        expires = math.inf if in_flight else self._clock() + self._ttl
        with self._lock:
            self._assumed[key] = Assumption(node, dict(annotations), expires)

    def answered(self, keys: Iterable[str]) -> None:
        """The bindings of `keys` were answered: their assumptions expire a TTL from now
        (the watch confirms them before that; failed ones are forgotten)."""
        with self._lock:
            expires = self._clock() + self._ttl
            for key in keys:
                assumption = self._assumed.get(key)
                if assumption is not None and assumption.expires == math.inf:
                    self._assumed[key] = replace(assumption, expires=expires)

    def forget(self, key: str) -> None:
        with self._lock:
            self._assumed.pop(key, None)

    def assumed(self) -> dict[str, Assumption]:
        with self._lock:
            return dict(self._assumed)

    def uids(self, keys: Iterable[str]) -> dict[str, str]:
        """Pod key -> uid of the pods `keys` as they are now."""
        with self._lock:
            return {
                k: str(self._pods[k]["metadata"].get("uid", "")) for k in keys if k in self._pods
            }

    def nominate(
        self,
        gang: str,
        victims: frozenset[str],
        uids: Mapping[str, str] | None = None,
        message: str | None = None,
        placement: GangPlacement | None = None,
    ) -> None:
        """`gang` waits until the pods `victims` are gone: the pods with these keys and the
        `uids` taken before they were evicted (a worker evicted and recreated under the same
        name meanwhile is not a victim), or, without `uids`, the pods as they are now;
        `message`: why it waits, when not the preemptor's usual one; `placement`: the GPUs
        held for it meanwhile (nominated.py)."""
        known = self.uids(victims) if uids is None else uids
        marked = frozenset((k, known[k]) for k in victims if k in known)
        expires = self._clock() + self._ttl
        with self._lock:
            self._nominations[gang] = Nomination(marked, expires, message, placement)

    def nominate_also(
        self,
        gang: str,
        pods: Collection[tuple[str, str]],
        message: str,
        for_s: float = 0.0,
        placement: GangPlacement | None = None,
    ) -> None:
        """`gang` waits until the pods `pods` ((pod key, uid), taken before they were deleted)
        are gone as well as those it waits for already (its nomination, if any), and says
        `message`; the wait lasts `for_s` seconds from now, or the usual time if longer, and
        never ends sooner than the nomination it extends. `placement` replaces the GPUs held
        for it (None: none). Without a nomination and `pods`, nothing to wait for: the gang is
        offered to the next decision."""
        with self._lock:
            was = self._nominations.get(gang)
            if was is None and not pods:
                return
            expires = self._clock() + max(self._ttl, for_s)
            if was is not None:
                expires = max(expires, was.expires)
            victims = frozenset(pods) | (frozenset() if was is None else was.victims)
            self._nominations[gang] = Nomination(victims, expires, message, placement)

    def nominated_placement(self, gang: str) -> GangPlacement | None:
        """The placement held for `gang` while it waits (None: not nominated, or none)."""
        with self._lock:
            nomination = self._nominations.get(gang)
            return None if nomination is None else nomination.placement

    def release_hold(self, gang: str, message: str) -> bool:
        """Hold nothing more for `gang` (another gang took its GPUs: nominated.py): it waits
        for the pods it waits for, saying `message`, then is decided afresh. Whether it held
        a placement."""
        with self._lock:
            nomination = self._nominations.get(gang)
            if nomination is None or nomination.placement is None:
                return False
            self._nominations[gang] = replace(nomination, placement=None, message=message)
            return True

    def request_mig(self, node: str, config: str, gangs: frozenset[str]) -> None:
        with self._lock:
            self._mig_requests[node] = MigRequest(config, gangs, self._clock() + 4 * self._ttl)

    # --- reading -----------------------------------------------------------------------------

    def pod(self, key: str) -> Obj | None:
        with self._lock:
            return self._pods.get(key)

    def node(self, name: str) -> Obj | None:
        with self._lock:
            return self._nodes.get(name)

    def state(self) -> CachedState:
        """A copy for one cycle: assumed pods appear bound; finished waits are dropped."""
        now = self._clock()
        with self._lock:
            for key in [k for k, a in self._assumed.items() if a.expires < now]:
                del self._assumed[key]
            effective: list[Obj] = []
            shown_before, self._shown = self._shown, {}
            for key, pod in self._pods.items():
                assumption = self._assumed.get(key)
                if assumption is None:
                    effective.append(pod)
                    continue
                before = shown_before.get(key)
                if before is not None and before[0] is pod and before[1] is assumption:
                    shown = before[2]
                else:
                    shown = copy.copy(pod)
                    shown["metadata"] = {
                        **pod["metadata"],
                        "annotations": {
                            **(pod["metadata"].get("annotations") or {}),
                            **assumption.annotations,
                        },
                    }
                    shown["spec"] = {**pod["spec"], "nodeName": assumption.node}
                self._shown[key] = (pod, assumption, shown)
                effective.append(shown)
            for gang, nomination in list(self._nominations.items()):
                alive = any(
                    key in self._pods and self._pods[key]["metadata"].get("uid", "") == uid
                    for key, uid in nomination.victims
                )
                if nomination.expires < now or not (alive or nomination.placement):
                    del self._nominations[gang]
                elif not alive and not nomination.ready:  # held for at most a TTL more
                    expires = min(nomination.expires, now + self._ttl)
                    self._nominations[gang] = replace(nomination, ready=True, expires=expires)
            for node_name, request in list(self._mig_requests.items()):
                node = self._nodes.get(node_name)
                if node is None or request.expires < now or mig_applied(node, request.config):
                    del self._mig_requests[node_name]
            return CachedState(
                nodes=list(self._nodes.values()),
                pods=effective,
                mig_configs=self._mig_configs,
                nominations=dict(self._nominations),
                mig_requests=dict(self._mig_requests),
                queues=None if self._queues is None else list(self._queues.values()),
                namespace_labels=self._namespace_labels,
            )


def _matters(old: Obj | None, new: Obj, assumed: Assumption | None) -> bool:
    """Whether a pod update can change a scheduling decision, so the loop should cycle.

    Status-only updates do not: kwok (a kubelet) marking a bound pod Running, or the "why
    pending" condition gpufleet itself writes; nor does the watch confirming a binding this
    process assumed. When 1,000 pods are bound these are 2,000 events, and a cycle for each
    batch of them would take CPU from the API server that is answering the bindings. Every
    cycle still reads the whole cache, and the loop resyncs every few seconds regardless.
    """
    if old is None:
        return True
    node = pods.node_name(new)
    if node != pods.node_name(old):
        return assumed is None or assumed.node != node
    if pods.is_terminal(new) != pods.is_terminal(old):
        return True
    om, nm = old["metadata"], new["metadata"]
    if bool(om.get("deletionTimestamp")) != bool(nm.get("deletionTimestamp")):
        return True
    if om.get("annotations") != nm.get("annotations") or om.get("labels") != nm.get("labels"):
        return True
    return bool((old.get("spec") or {}).get("schedulingGates")) != bool(
        (new.get("spec") or {}).get("schedulingGates")
    )


def mig_applied(node: Obj, config: str) -> bool:
    """Whether the MIG manager finished applying `config` on `node`."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(names.MIG_CONFIG_LABEL) != config:
        return False
    if labels.get(names.MIG_STATE_LABEL) not in (MigState.SUCCESS, MigState.FAILED):
        return False
    applied = (meta.get("annotations") or {}).get(MIG_APPLIED_ANNOTATION)
    # The sandbox's manager records what it applied; a real one only flips the state label.
    return applied is None or applied == config
