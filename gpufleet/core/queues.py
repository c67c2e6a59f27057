"""The queue tree the core enforces: each queue's quotas, weight, priority range and parent.

A *resource* is what a quota counts: whole GPUs of one type (`"H100-80GB"`) or MIG slices of one
profile on one type (`"A100-80GB/3g.40gb"`). A queue's `Quota` for a resource has a nominal
amount (guaranteed, reclaimed by preemption when others borrowed it), a borrowing limit (how far
above nominal the queue's subtree may go; None: no limit) and a lending limit (how much of its
unused nominal others may borrow; None: all of it). A resource a queue names no quota for has
nominal 0, no borrowing limit and nothing to lend: the queue may only borrow it.

Queues form a forest through `parent`; a queue's usage is that of its own gangs plus its
children's, and its quota bounds that sum. `QueueTree.build` checks the forest: a queue whose
parent does not exist or that sits on a parent cycle is unusable (its gangs wait with
QueueNotFound), as are its descendants; children whose nominal quotas add up to more than the
parent's are reported but stay usable (the parent's own limits still bound the sum).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from gpufleet.core.label_selector import LabelSelector

__all__ = [
    "CYCLE",
    "MIG_SEPARATOR",
    "QueueSpec",
    "QueueTree",
    "Quota",
    "resource_key",
    "split_resource",
]

MIG_SEPARATOR: Final = "/"
# How the reason of a queue on a parent cycle starts (QueueTree.unusable).
CYCLE: Final = "parent cycle"


def resource_key(gpu_type: str, mig_profile: str | None = None) -> str:
    """The resource a replica uses: its GPU type, or `<type>/<profile>` for a MIG slice."""
    return gpu_type if mig_profile is None else f"{gpu_type}{MIG_SEPARATOR}{mig_profile}"


def split_resource(resource: str) -> tuple[str, str | None]:
    """(GPU type, MIG profile or None) of a resource key."""
    gpu_type, sep, profile = resource.partition(MIG_SEPARATOR)
    return gpu_type, (profile if sep else None)


@dataclass(frozen=True, slots=True)
class Quota:
    """A queue's quota for one resource (whole GPUs, or MIG slices)."""

    nominal: int = 0
    borrowing_limit: int | None = None  # above nominal; None = no limit
    lending_limit: int | None = None  # of the unused nominal; None = all of it

    def __post_init__(self) -> None:
        if self.nominal < 0:
            raise ValueError("nominal quota must be >= 0")
        if self.borrowing_limit is not None and self.borrowing_limit < 0:
            raise ValueError("borrowing limit must be >= 0")
        if self.lending_limit is not None and not 0 <= self.lending_limit <= self.nominal:
            raise ValueError("lending limit must be between 0 and the nominal quota")

    @property
    def ceiling(self) -> float:
        """Most the queue's subtree may use: nominal plus the borrowing limit."""
        return float("inf") if self.borrowing_limit is None else self.nominal + self.borrowing_limit

    @property
    def kept(self) -> int:
        """Nominal the queue never lends: others may not use it even while it is idle."""
        return 0 if self.lending_limit is None else self.nominal - self.lending_limit


NO_QUOTA: Final = Quota()


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One queue as the core sees it (the GPUQueue object's spec)."""

    name: str
    parent: str | None = None
    weight: float = 1.0
    quotas: Mapping[str, Quota] = field(default_factory=dict)
    priority_min: int = 0
    priority_max: int | None = None  # None = no upper bound
    # The namespaces whose gangs it takes, by their labels; None: every namespace.
    namespace_selector: LabelSelector | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a queue needs a name")
        if self.weight <= 0:
            raise ValueError(f"queue {self.name}: weight must be positive")
        if self.priority_max is not None and self.priority_max < self.priority_min:
            raise ValueError(f"queue {self.name}: priority_max < priority_min")
        object.__setattr__(self, "quotas", MappingProxyType(dict(self.quotas)))

    def quota(self, resource: str) -> Quota:
        return self.quotas.get(resource, NO_QUOTA)

    def admits_priority(self, priority: int) -> bool:
        high = self.priority_max
        return priority >= self.priority_min and (high is None or priority <= high)

    def namespace_refusal(
        self, namespace: str | None, labels: Mapping[str, str] | None
    ) -> str | None:
        """Why the queue does not take gangs from `namespace` (whose labels are `labels`, None
        when unknown), or None when it does. A gang without a namespace (the simulator's) is
        not checked; one from a namespace whose labels are unknown is refused until they are
        known, so a restrictive selector never lets a gang through by accident."""
        selector = self.namespace_selector
        if selector is None or namespace is None or not selector.requirements:
            return None
        if labels is None:
            return (
                f"queue {self.name} takes jobs from some namespaces only, and the labels of "
                f"namespace {namespace} are not known yet"
            )
        failed = selector.failed(labels)
        if not failed:
            return None
        return (
            f"queue {self.name} does not take jobs from namespace {namespace}: its labels fail "
            + ",".join(r.describe() for r in failed)
            + f" (namespaceSelector {selector.describe()})"
        )

    def priority_range(self) -> str:
        high = "" if self.priority_max is None else str(self.priority_max)
        return f"{self.priority_min}..{high}"


@dataclass(frozen=True)
class QueueTree:
    """A checked forest of queues. Build it with `QueueTree.build`."""

    queues: Mapping[str, QueueSpec]
    # Unusable queue -> why (missing parent, parent cycle, or an unusable ancestor).
    unusable: Mapping[str, str]
    # Parent -> resources whose children's nominal quotas add up to more than its own.
    oversubscribed: Mapping[str, tuple[str, ...]]
    children: Mapping[str | None, tuple[str, ...]]  # None: the top-level queues
    _paths: Mapping[str, tuple[str, ...]] = field(repr=False, compare=False)

    @classmethod
    def build(cls, specs: Iterable[QueueSpec]) -> QueueTree:
        queues: dict[str, QueueSpec] = {}
        for spec in specs:
            if spec.name in queues:
                raise ValueError(f"duplicate queue {spec.name}")
            queues[spec.name] = spec
        unusable = _unusable(queues)
        children: dict[str | None, list[str]] = {}
        for name in sorted(queues):
            if name not in unusable:
                children.setdefault(queues[name].parent, []).append(name)
        paths: dict[str, tuple[str, ...]] = {}
        for name in sorted(queues):
            if name in unusable:
                continue
            path = [name]
            parent = queues[name].parent
            while parent is not None:
                path.append(parent)
                parent = queues[parent].parent
            paths[name] = tuple(path)
        oversubscribed: dict[str, tuple[str, ...]] = {}
        for parent, kids in children.items():
            if parent is None:
                continue
            resources = sorted({r for k in kids for r in queues[k].quotas})
            over = tuple(
                r
                for r in resources
                if sum(queues[k].quota(r).nominal for k in kids) > queues[parent].quota(r).nominal
            )
            if over:
                oversubscribed[parent] = over
        return cls(
            MappingProxyType(queues),
            MappingProxyType(unusable),
            MappingProxyType(oversubscribed),
            MappingProxyType({k: tuple(v) for k, v in children.items()}),
            MappingProxyType(paths),
        )

    def usable(self, name: str) -> bool:
        return name in self._paths

    def path(self, name: str) -> tuple[str, ...]:
        """The queue and its ancestors, the queue first. KeyError for an unusable queue."""
        return self._paths[name]

    def kids(self, name: str | None) -> tuple[str, ...]:
        return self.children.get(name, ())

    def resources(self) -> frozenset[str]:
        """Every resource some usable queue names a quota for."""
        return frozenset(r for n in self._paths for r in self.queues[n].quotas)

    def why_unusable(self, name: str) -> str:
        """Why a queue cannot take gangs ('does not exist' when it is not in the tree)."""
        if name not in self.queues:
            return f"queue {name} does not exist"
        return f"queue {name} is unusable: {self.unusable[name]}"


def _unusable(queues: Mapping[str, QueueSpec]) -> dict[str, str]:
    """Queues whose ancestry is broken, with the reason; descendants inherit it."""
    out: dict[str, str] = {}
    for name in sorted(queues):
        seen: list[str] = [name]
        current = queues[name].parent
        while current is not None:
            if current not in queues:
                out[name] = f"parent {current} does not exist"
                if seen[-1] != name:
                    out[name] = f"ancestor {seen[-1]}'s parent {current} does not exist"
                break
            if current in seen:
                cycle = [*seen[seen.index(current) :], current]
                out[name] = f"{CYCLE} " + " -> ".join(cycle)
                break
            seen.append(current)
            current = queues[current].parent
    return out
