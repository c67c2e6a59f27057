"""Node eligibility: which GPU nodes a pending gang's pods may use at all, and why not the rest.

Small named filters in the manner of kube-scheduler's predicates (and KAI's), each saying why
a node is out:

- `NodeUnschedulable`: a cordoned node (out for every gang: the core's node-level
  `schedulable`, which also covers NotReady nodes and MIG reconfigurations; named here so that
  the pending reason counts it);
- `TaintToleration`: a `NoSchedule` or `NoExecute` taint the pods do not tolerate
  (`PreferNoSchedule` is only a preference and never excludes);
- `NodeAffinity`: the pods' `nodeSelector` and required node affinity (`In`, `NotIn`,
  `Exists`, `DoesNotExist`, `Gt`, `Lt`; terms ORed, expressions ANDed);
- `NodeResourcesFit`: one replica's CPU, memory and ephemeral-storage requests against the
  node's allocatable minus what the pods bound there request.

The scheduler offers the core a gang with `allowed_nodes` set to the nodes that pass (None when
all do, so that the common case costs the core nothing), and the pending reason names the
filters and counts. Several replicas, or several gangs of one decision, on one node could still
exceed its CPU or memory: `overcommitted` finds such gangs in a decision, and the loop holds
them back for a cycle. A placement bound without the core (a nominated gang's at the end of its
wait, a moved gang's reserved one: nominated.py, mover.py) passes the same checks (`asks`,
`misfit`), and what it takes is taken from the nodes' free resources first (`deduct`); while
a nominated gang waits, what its pods will ask of its planned nodes is kept from the gangs of
its priority or below, and while a moved gang's old pods exit, what its pods will ask of its
reserved placement's nodes from every gang (`reserve`, `Outcome.reserved`). Pure
functions of pod and node dicts; the per-node and per-pod parsing is memoised by object
identity, as in `cluster_view.py`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from kubernetes.utils.quantity import parse_quantity

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.scheduler.pods import Pod, PodFacts

Obj = Mapping[str, Any]

RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")
_EXCLUDING_EFFECTS: Final = ("NoSchedule", "NoExecute")

# Filter names, as kube-scheduler names the plugins that do the same.
UNSCHEDULABLE: Final = "NodeUnschedulable"
TAINTS: Final = "TaintToleration"
AFFINITY: Final = "NodeAffinity"
RESOURCES_FIT: Final = "NodeResourcesFit"


@dataclass(frozen=True, slots=True)
class Resources:
    """CPU in millicores, memory and ephemeral storage in bytes."""

    cpu: int = 0
    memory: int = 0
    ephemeral: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu + other.cpu, self.memory + other.memory, self.ephemeral + other.ephemeral
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu - other.cpu, self.memory - other.memory, self.ephemeral - other.ephemeral
        )

    def short_of(self, free: Resources) -> list[str]:
        """The resources of which `free` holds less than these requests."""
        pairs = zip(RESOURCES, (self.cpu, self.memory, self.ephemeral), _values(free), strict=True)
        return [name for name, want, have in pairs if want > 0 and want > have]

    @property
    def empty(self) -> bool:
        return not (self.cpu or self.memory or self.ephemeral)


def _values(r: Resources) -> tuple[int, int, int]:
    return r.cpu, r.memory, r.ephemeral


def _amount(name: str, value: Any) -> int:
    """A quantity as an integer: millicores for CPU, bytes otherwise (rounded up)."""
    try:
        q: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    except ValueError:
        return 0
    if name == "cpu":
        q *= 1000
    return int(q.to_integral_value(rounding="ROUND_CEILING")) if q > 0 else 0


def _resources(values: Mapping[str, Any] | None) -> Resources:
    values = values or {}
    cpu, memory, eph = (_amount(n, values[n]) if n in values else 0 for n in RESOURCES)
    return Resources(cpu, memory, eph)


def pod_requests(pod: Pod) -> Resources:
    """What the pod asks its node for: the sum over containers, or the largest init container
    if larger (they run one at a time before the others), plus the pod's overhead."""
    spec = pod.get("spec") or {}
    total = Resources()
    for c in spec.get("containers") or []:
        total += _resources((c.get("resources") or {}).get("requests"))
    for c in spec.get("initContainers") or []:
        r = _resources((c.get("resources") or {}).get("requests"))
        total = Resources(
            max(total.cpu, r.cpu), max(total.memory, r.memory), max(total.ephemeral, r.ephemeral)
        )
    return total + _resources(spec.get("overhead"))


# -- what a pod asks of its node ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Obj) -> bool:
        """Kubernetes' rule: an empty effect matches every effect, an empty key with `Exists`
        every key; `Exists` ignores the value, `Equal` compares it."""
        if self.effect and self.effect != taint.get("effect"):
            return False
        if self.key and self.key != taint.get("key"):
            return False
        if self.operator == "Exists":
            return True
        return bool(self.key) and self.value == (taint.get("value") or "")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement (`matchExpressions` item, or a `matchFields` one)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False  # matchFields: the key is a node field (metadata.name)

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        if self.field:
            actual: str | None = name if self.key == "metadata.name" else None
        else:
            actual = labels.get(self.key)
        match self.operator:
            case "In":
                return actual is not None and actual in self.values
            case "NotIn":
                return actual is None or actual not in self.values
            case "Exists":
                return actual is not None
            case "DoesNotExist":
                return actual is None
            case "Gt" | "Lt":
                return _compare(actual, self.values, self.operator)
        return False


def _compare(actual: str | None, values: tuple[str, ...], operator: str) -> bool:
    if actual is None or len(values) != 1:
        return False
    try:
        have, bound = int(actual), int(values[0])
    except ValueError:
        return False
    return have > bound if operator == "Gt" else have < bound


@dataclass(frozen=True, slots=True)
class Constraints:
    """Everything a pod asks of a node, hashable so that gangs with the same ask share work."""

    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    # Required node affinity: None = no requirement; else terms ORed, requirements ANDed.
    terms: tuple[tuple[Requirement, ...], ...] | None = None
    requests: Resources = field(default_factory=Resources)

    def tolerates(self, taint: Obj) -> bool:
        return any(t.tolerates(taint) for t in self.tolerations)


def _requirements(term: Obj) -> tuple[Requirement, ...]:
    out = [
        Requirement(e.get("key", ""), e.get("operator", ""), tuple(e.get("values") or ()))
        for e in term.get("matchExpressions") or []
    ]
    out += [
        Requirement(e.get("key", ""), e.get("operator", ""), tuple(e.get("values") or ()), True)
        for e in term.get("matchFields") or []
    ]
    return tuple(out)


def constraints(pod: Pod) -> Constraints:
    """The `Constraints` of a pod's spec."""
    spec = pod.get("spec") or {}
    tolerations = tuple(
        Toleration(
            t.get("key") or "",
            t.get("operator") or "Equal",
            t.get("value") or "",
            t.get("effect") or "",
        )
        for t in spec.get("tolerations") or []
    )
    selector = tuple(sorted((spec.get("nodeSelector") or {}).items()))
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    terms = None
    if required is not None:
        terms = tuple(_requirements(t) for t in required.get("nodeSelectorTerms") or [])
    return Constraints(tolerations, selector, terms, pod_requests(pod))


# -- the filters ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the filters read of one node."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Obj, ...]
    unschedulable: bool
    allocatable: Resources

    @classmethod
    def of(cls, node: Obj) -> NodeFacts:
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        return cls(
            meta["name"],
            meta.get("labels") or {},
            tuple(spec.get("taints") or ()),
            bool(spec.get("unschedulable")),
            _resources((node.get("status") or {}).get("allocatable")),
        )


def _taint_text(taint: Obj) -> str:
    value = taint.get("value")
    key = f"{taint.get('key')}={value}" if value else str(taint.get("key"))
    return f"{key}:{taint.get('effect')}"


def static_rejection(
    ask: Constraints, node: NodeFacts, cordon: bool = True
) -> tuple[str, str] | None:
    """(filter, detail) of the first filter that does not depend on what runs where and
    excludes the node; None when the node passes them all. `cordon` False: a cordon is not
    judged (a move's checks leave it to the rebind)."""
    if cordon and node.unschedulable:
        return UNSCHEDULABLE, "cordoned"
    for taint in node.taints:
        if taint.get("effect") in _EXCLUDING_EFFECTS and not ask.tolerates(taint):
            return TAINTS, _taint_text(taint)
    for key, value in ask.node_selector:
        if node.labels.get(key) != value:
            return AFFINITY, "nodeSelector"
    if ask.terms is not None and not any(
        all(r.matches(node.labels, node.name) for r in term) for term in ask.terms if term
    ):
        return AFFINITY, "required node affinity"
    return None


def resource_rejection(requests: Resources, free: Resources) -> tuple[str, str] | None:
    short = requests.short_of(free)
    return (RESOURCES_FIT, ", ".join(short)) if short else None


_REASON_TEXT: Final = {
    UNSCHEDULABLE: "{n} cordoned",
    TAINTS: "{n} a taint the job does not tolerate: {detail}",
    AFFINITY: "{n} not match the job's {detail}",
    RESOURCES_FIT: "{n} not have the {detail} to spare",
}
_VERB: Final = {UNSCHEDULABLE: ("is", "are"), TAINTS: ("has", "have"), AFFINITY: ("does", "do")}


@dataclass(frozen=True, slots=True)
class Outcome:
    """Eligibility of one gang: the nodes it may use (None: all) and why the others are out."""

    allowed: frozenset[str] | None
    # (filter, detail) -> nodes it excluded
    rejected: Mapping[tuple[str, str], int] = field(default_factory=dict)
    requests: Resources = field(default_factory=Resources)
    # Node -> what the pods of nominated gangs it may not take from, and of moved gangs, are
    # promised there (`reserve`): not free for this gang's pods.
    reserved: Mapping[str, Resources] = field(default_factory=dict)

    def summary(self) -> str:
        """`12 nodes with a taint the job does not tolerate: nvidia.com/gpu=present:NoSchedule;
        ...` (largest counts first), or "" when no node is out."""
        parts = []
        for (name, detail), n in sorted(self.rejected.items(), key=lambda kv: (-kv[1], kv[0])):
            one, many = _VERB.get(name, ("does", "do"))
            nodes = f"1 node {one}" if n == 1 else f"{n} nodes {many}"
            parts.append(f"{name}: " + _REASON_TEXT[name].format(n=nodes, detail=detail))
        return "; ".join(parts)

    def reason(self, message: str) -> str:
        """A pending reason with the filters that left nodes out appended."""
        summary = self.summary()
        return f"{message} ({summary})" if summary else message


class Eligibility:
    """Per-cycle node filtering for the pending gangs, memoised across cycles.

    Node facts are kept per node object and static verdicts per (constraints, node object), so
    a cycle in which nothing changed costs one dict lookup per gang and GPU node; the free
    CPU and memory of each node is summed again every cycle from the pods' cached requests.
    """

    def __init__(self) -> None:
        self._nodes: dict[int, tuple[Obj, NodeFacts]] = {}
        self._asks: dict[int, tuple[Pod, Constraints]] = {}
        self._verdicts: dict[tuple[Constraints, int], tuple[str, str] | None] = {}
        self._by_name: Mapping[str, NodeFacts] = {}

    @property
    def nodes(self) -> Mapping[str, NodeFacts]:
        """Node name -> its facts, for the nodes of the last `evaluate` (read once per node
        object: a move's checks reuse them rather than reading the nodes again)."""
        return self._by_name

    def _node(self, node: Obj) -> NodeFacts:
        seen = self._nodes.get(id(node))
        if seen is None or seen[0] is not node:
            seen = (node, NodeFacts.of(node))
        return seen[1]

    def _ask(self, pod: Pod) -> Constraints:
        seen = self._asks.get(id(pod))
        if seen is None or seen[0] is not pod:
            seen = (pod, constraints(pod))
        return seen[1]

    def evaluate(
        self,
        nodes: Iterable[Obj],
        facts: Mapping[str, PodFacts],
        gangs: Mapping[str, Pod],
    ) -> tuple[dict[str, Outcome], dict[str, Resources]]:
        """Outcome per gang (`gangs`: gang id -> one of its pods) over `nodes` (the GPU nodes
        the core knows), and the free resources per node."""
        node_objs = {n["metadata"]["name"]: n for n in nodes}
        new_nodes = {id(n): (n, self._node(n)) for n in node_objs.values()}
        self._nodes = new_nodes
        by_name = {f.name: f for _, f in new_nodes.values()}
        self._by_name = by_name
        used: dict[str, Resources] = {}
        new_asks: dict[int, tuple[Pod, Constraints]] = {}
        for f in facts.values():
            if f.node in by_name and not f.terminal:
                ask = self._ask(f.pod)
                new_asks[id(f.pod)] = (f.pod, ask)
                used[f.node] = used.get(f.node, Resources()) + ask.requests
        for pod in gangs.values():
            new_asks[id(pod)] = (pod, self._ask(pod))
        self._asks = new_asks
        free = {n: node.allocatable - used.get(n, Resources()) for n, node in by_name.items()}
        # Gangs that ask the same of their nodes (most do) are judged once.
        by_ask: dict[Constraints, list[str]] = {}
        for gid, pod in gangs.items():
            by_ask.setdefault(new_asks[id(pod)][1], []).append(gid)
        verdicts: dict[tuple[Constraints, int], tuple[str, str] | None] = {}
        outcomes: dict[str, Outcome] = {}
        for ask, gids in by_ask.items():
            allowed: set[str] = set()
            rejected: Counter[tuple[str, str]] = Counter()
            for name, node in by_name.items():
                key = (ask, id(node_objs[name]))
                why = verdicts[key] = (
                    self._verdicts[key] if key in self._verdicts else static_rejection(ask, node)
                )
                if why is None and not ask.requests.empty:
                    why = resource_rejection(ask.requests, free[name])
                if why is not None:
                    rejected[why] += 1
                # Cordoned nodes are out for every gang already (the core's `schedulable`).
                if why is None or why[0] == UNSCHEDULABLE:
                    allowed.add(name)
            restricted = any(name != UNSCHEDULABLE for name, _ in rejected)
            outcome = Outcome(
                frozenset(allowed) if restricted else None, dict(rejected), ask.requests
            )
            outcomes.update(dict.fromkeys(gids, outcome))
        self._verdicts = verdicts
        return outcomes, free


def asks(placement: GangPlacement, outcomes: Mapping[str, Outcome]) -> dict[str, Resources]:
    """Node -> the CPU, memory and ephemeral storage `placement`'s replicas ask of it, each
    replica one pod of its gang's requests (`outcomes`: gang id -> its eligibility)."""
    outcome = outcomes.get(placement.gang_id)
    requests = Resources() if outcome is None else outcome.requests
    out: dict[str, Resources] = {}
    for replica in placement.replicas:
        out[replica.node] = out.get(replica.node, Resources()) + requests
    return out


def _shortfall(want: Mapping[str, Resources], free: Mapping[str, Resources]) -> str | None:
    """Why pods asking `want` of their nodes do not fit together in the nodes' `free` CPU,
    memory and ephemeral storage (the first node short, by name); None when they fit."""
    short = {
        node: names
        for node, r in want.items()
        if (names := r.short_of(free.get(node, Resources())))
    }
    if not short:
        return None
    node, names = sorted(short.items())[0]
    what = ", ".join(names)
    return f"{RESOURCES_FIT}: its pods together need more {what} than {node} has to spare"


def misfit(
    allowed: Collection[str] | None,
    want: Mapping[str, Resources],
    free: Mapping[str, Resources],
) -> str | None:
    """Why pods asking `want` of their nodes (`asks`) may not be bound there as they are: a
    node not among the nodes they may use (`allowed`, `Gang.allowed_nodes`: taints, node
    selector and affinity, one pod's CPU, memory and ephemeral storage; None: all), or the
    pods together short of a node's `free` resources (`overcommitted`'s check); None when they
    pass the filters a placement of the core passes before it is bound."""
    if allowed is not None:
        out = sorted(node for node in want if node not in allowed)
        if out:
            return (
                f"its pods may no longer use {', '.join(out)} (a taint they do not tolerate, "
                "their node selector or affinity, or one pod's CPU, memory or ephemeral storage)"
            )
    return _shortfall(want, free)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The CPU, memory and ephemeral storage a nominated gang's pods will ask of the nodes
    planned for it (`asks`), kept for it while it waits (nominated.py) from gangs of its
    priority or below, as kube-scheduler counts a nominated pod's requests on its node for
    pods of lower or equal priority; and a moved gang's, of its reserved placement's nodes,
    kept from every gang (mover.py: no gang may take a move's reservation)."""

    gang: str
    priority: int
    nodes: Mapping[str, Resources]


def reserve(
    outcome: Outcome,
    gang: str,
    priority: int,
    free: Mapping[str, Resources],
    reservations: Iterable[Reservation],
) -> Outcome:
    """`outcome` of gang `gang` (of `priority`) with the reservations it must leave alone
    (another gang's, of `priority` or above) added to `reserved` (those of an earlier call
    stay: the nominated gangs' and then the moved gangs'), and the nodes where one of its pods
    no longer fits beside them all out of `allowed` (counted as `NodeResourcesFit`); the same
    object when none applies."""
    added = [r for r in reservations if r.gang != gang and r.priority >= priority]
    if not added:
        return outcome
    reserved = dict(outcome.reserved)
    for r in added:
        for node, want in r.nodes.items():
            reserved[node] = reserved.get(node, Resources()) + want
    allowed = outcome.allowed
    rejected = Counter(outcome.rejected)
    out: set[str] = set()
    # Pods asking nothing fit beside any reservation: no node is out, only `reserved` is kept.
    for node, want in () if outcome.requests.empty else reserved.items():
        if allowed is not None and node not in allowed:
            continue
        why = resource_rejection(outcome.requests, free.get(node, Resources()) - want)
        if why is not None:
            out.add(node)
            rejected[why] += 1
    if out:  # None (every node) made a set only when a node is out
        allowed = frozenset((free.keys() if allowed is None else allowed) - out)
    return Outcome(allowed, dict(rejected), outcome.requests, reserved)


def available(free: Mapping[str, Resources], outcome: Outcome | None) -> Mapping[str, Resources]:
    """The nodes' `free` resources less what `outcome`'s gang must leave to nominated and moved
    gangs (`reserve`)."""
    if outcome is None or not outcome.reserved:
        return free
    out = dict(free)
    deduct(out, outcome.reserved)
    return out


def deduct(free: dict[str, Resources], want: Mapping[str, Resources]) -> None:
    """Take what pods bound now ask of their nodes (`want`) from the nodes' `free` resources."""
    for node, r in want.items():
        free[node] = free.get(node, Resources()) - r


def overcommitted(
    decision: Decision,
    outcomes: Mapping[str, Outcome],
    free: Mapping[str, Resources],
    skip: Iterable[str] = (),
) -> dict[str, str]:
    """Gangs of `decision` whose pods, with those of the gangs before them, would ask a node
    for more CPU, memory or ephemeral storage than it has free: gang id -> why. The core
    places GPUs; several replicas on one node can pass the one-replica filter and still not
    fit together. What nominated gangs are promised (`Outcome.reserved`) is not free for a
    gang that may not take it."""
    left = dict(free)
    out: dict[str, str] = {}
    skipped = set(skip)
    for placement in decision.placements:
        outcome = outcomes.get(placement.gang_id)
        if placement.gang_id in skipped or outcome is None or outcome.requests.empty:
            continue
        want = asks(placement, outcomes)
        why = _shortfall(want, available(left, outcome))
        if why is not None:
            out[placement.gang_id] = why
            continue
        deduct(left, want)
    return out


__all__ = [
    "Constraints",
    "Eligibility",
    "NodeFacts",
    "Outcome",
    "Reservation",
    "Resources",
    "Toleration",
    "asks",
    "available",
    "constraints",
    "deduct",
    "misfit",
    "overcommitted",
    "pod_requests",
    "reserve",
    "static_rejection",
]
