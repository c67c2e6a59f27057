"""GPUQueue objects -> the core's queue tree; the core's queue figures -> GPUQueue status.

The scheduler watches GPUQueues like nodes and pods. Each cycle hands the core the tree of the
queues that exist (`QueueTrees.tree`, rebuilt only when an object changed); a gang whose pods
name a queue that does not exist waits with QueueNotFound until it is created (see the README:
queues and jobs may be created in any order, so a missing queue is a wait, not a refusal).
A queue object whose spec cannot be read (it passed the API server's schema, so only an older
or hand-edited object) is left out and its gangs wait the same way.

After a cycle, `QueueStatusWriter` writes each queue's figures (core/queue_report.py) through
the status subresource, only for queues whose figures changed, so a quiet cluster causes no
writes. The GPUs held for a gang waiting for its preemption victims to exit (shown to the core
as a running gang, `<gang>#nominated`: nominated.py), and those reserved for a moved gang until
it is bound there (`<gang>#moving`: mover.py; its old pods, while they run, are its usage) are
no usage: they are left out of the figures (used, borrowed, lent, running jobs, shares) and
shown apart, as `held`, for the gang's queue and its ancestors: a moved gang is counted once.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from gpufleet.core.demand import Gang
from gpufleet.core.label_selector import LabelSelector, Requirement
from gpufleet.core.queue_report import QueueFigures, queue_report
from gpufleet.core.queues import (
    CYCLE,
    QueueSpec,
    QueueTree,
    Quota,
    resource_key,
    split_resource,
)
from gpufleet.core.quota import running_charge
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.gpuqueue import GPUQueueConditionType, GPUQueueReason, GPUQueueSpec
from gpufleet.scheduler.cache import is_kept

log = logging.getLogger("gpufleet.scheduler.queue_objects")

Obj = dict[str, Any]
# Writes one queue's status: (name, status body) -> None; raises on failure.
StatusPatch = Callable[[str, Obj], None]

__all__ = [
    "QueueStatusWriter",
    "QueueTrees",
    "held_for_queues",
    "namespace_selector",
    "queue_spec",
    "status_bodies",
    "status_body",
    "without_holds",
]


def queue_spec(obj: Mapping[str, Any]) -> QueueSpec:
    """The core's view of one GPUQueue object. ValueError when its spec cannot be read."""
    name = str(obj["metadata"]["name"])
    try:
        spec = GPUQueueSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        raise ValueError(f"GPUQueue {name}: {exc.errors()[0]['msg']}") from exc
    quotas = {
        resource_key(q.gpu_type, q.mig_profile): Quota(
            q.nominal, q.borrowing_limit, q.lending_limit
        )
        for q in spec.quotas or []
    }
    low, high = (0, None)
    if spec.priority_range is not None:
        low, high = spec.priority_range.min, spec.priority_range.max
    return QueueSpec(name, spec.parent, spec.weight, quotas, low, high, namespace_selector(spec))


def namespace_selector(spec: GPUQueueSpec) -> LabelSelector | None:
    """The core's matcher for the queue's namespaceSelector (None: every namespace)."""
    selector = spec.namespace_selector
    if selector is None:
        return None
    expressions = [
        Requirement(e.key, e.operator, frozenset(e.values or ()))
        for e in selector.match_expressions or []
    ]
    return LabelSelector.build(selector.match_labels, expressions)


class QueueTrees:
    """The tree of the current GPUQueue objects, rebuilt only when one of them changed."""

    def __init__(self) -> None:
        self._objects: tuple[Mapping[str, Any], ...] = ()
        self._tree = QueueTree.build(())

    def tree(self, objects: Iterable[Mapping[str, Any]]) -> QueueTree:
        current = tuple(sorted(objects, key=lambda o: str(o["metadata"]["name"])))
        same = len(current) == len(self._objects) and all(
            a is b for a, b in zip(current, self._objects, strict=True)
        )
        if not same:
            specs: list[QueueSpec] = []
            for obj in current:
                try:
                    specs.append(queue_spec(obj))
                except ValueError as exc:
                    log.warning("%s; its jobs wait with QueueNotFound", exc)
            self._tree = QueueTree.build(specs)
            self._objects = current
        return self._tree


def _condition(kind: str, ok: bool, reason: str, message: str, now: str) -> Obj:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


def _entry(resource: str) -> Obj:
    gpu_type, profile = split_resource(resource)
    entry: Obj = {"gpuType": gpu_type}
    if profile is not None:
        entry["migProfile"] = profile
    return entry


def status_body(figures: QueueFigures, now: str, held: Mapping[str, int] | None = None) -> Obj:
    """The status subresource body of one queue (`now`: the conditions' transition time;
    `held`: resource -> GPUs or slices held for its waiting gangs, `held_for_queues`)."""
    held = held or {}
    rows: list[Obj] = []
    for row in figures.resources:
        entry = _entry(row.resource)
        entry.update(
            nominal=row.nominal,
            used=row.used,
            borrowed=row.borrowed,
            lent=row.lent,
            pending=row.pending,
            held=held.get(row.resource, 0),
        )
        rows.append(entry)
    shown = {row.resource for row in figures.resources}
    for resource in sorted(r for r, n in held.items() if n and r not in shown):
        # Held on a resource the queue has no quota, usage or demand of otherwise.
        entry = _entry(resource)
        entry.update(nominal=0, used=0, borrowed=0, lent=0, pending=0, held=held[resource])
        rows.append(entry)
    if figures.unusable is None:
        active = _condition(
            GPUQueueConditionType.ACTIVE, True, GPUQueueReason.READY, "takes jobs", now
        )
    else:
        reason = (
            GPUQueueReason.PARENT_CYCLE
            if figures.unusable.startswith(CYCLE)
            else GPUQueueReason.PARENT_NOT_FOUND
        )
        active = _condition(GPUQueueConditionType.ACTIVE, False, reason, figures.unusable, now)
    over = figures.oversubscribed
    oversubscribed = _condition(
        GPUQueueConditionType.OVERSUBSCRIBED,
        bool(over),
        GPUQueueReason.CHILDREN_EXCEED_PARENT if over else GPUQueueReason.CHILDREN_FIT,
        (
            "children's nominal quotas add up to more than this queue's for " + ", ".join(over)
            if over
            else "children's nominal quotas fit this queue's"
        ),
        now,
    )
    return {
        "resources": rows,
        "fairShare": round(figures.fair_share, 4),
        "attainedShare": round(figures.attained_share, 4),
        "runningJobs": figures.running,
        "pendingJobs": figures.pending,
        "conditions": [active, oversubscribed],
    }


def held_for_queues(snapshot: Snapshot) -> dict[str, Counter[str]]:
    """Queue -> resource -> the GPUs (or slices) held for the waiting gangs of the queue and
    its children (`cache.is_kept`: nominated gangs' holds, moved gangs' reservations), counted
    as `used` counts a running gang's."""
    out: dict[str, Counter[str]] = {}
    tree = snapshot.queues
    if tree is None:
        return out
    for gang in snapshot.running:
        if not is_kept(gang.id) or gang.queue is None or not tree.usable(gang.queue):
            continue
        charge = running_charge(gang)
        for name in tree.path(gang.queue):
            out.setdefault(name, Counter())[charge.resource] += charge.amount
    return out


def without_holds(snapshot: Snapshot) -> Snapshot:
    """`snapshot` without the holds of nominated gangs and the reservations of moved gangs
    among its running gangs: neither is usage, nor a running job."""
    if not any(is_kept(g.id) for g in snapshot.running):
        return snapshot
    return replace(snapshot, running=tuple(g for g in snapshot.running if not is_kept(g.id)))


def status_bodies(snapshot: Snapshot, pending: Sequence[Gang], now: str) -> dict[str, Obj]:
    """Queue -> the status body of each queue of `snapshot`, `pending` its waiting gangs: the
    status writer's, and the admin API's queue route's, figures."""
    held = held_for_queues(snapshot)
    report = queue_report(without_holds(snapshot), pending)
    return {
        name: status_body(figures, now, held.get(name)) for name, figures in sorted(report.items())
    }


def _comparable(body: Obj) -> Obj:
    """The body without transition times, to tell whether anything changed."""
    conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in body["conditions"]
    ]
    return {**body, "conditions": conditions}


class QueueStatusWriter:
    """Writes GPUQueue status after a cycle, for the queues whose figures changed."""

    def __init__(
        self, patch: StatusPatch, now: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self._patch = patch
        self._now = now
        self._written: dict[str, Obj] = {}  # queue -> comparable body last written
        # (queue, condition type) -> (status, when it last changed), so a condition keeps its
        # transition time while its status stays.
        self._since: dict[tuple[str, str], tuple[str, str]] = {}

    def write(self, snapshot: Snapshot, pending: Sequence[Gang]) -> list[str]:
        """Write what changed; the names of the queues written."""
        bodies = status_bodies(snapshot, pending, format_time(self._now()))
        for gone in set(self._written) - set(bodies):
            del self._written[gone]
        self._since = {k: v for k, v in self._since.items() if k[0] in bodies}
        written: list[str] = []
        for name, body in bodies.items():
            for condition in body["conditions"]:
                slot = (name, condition["type"])
                before = self._since.get(slot)
                if before is not None and before[0] == condition["status"]:
                    condition["lastTransitionTime"] = before[1]
                self._since[slot] = (condition["status"], condition["lastTransitionTime"])
            key = _comparable(body)
            if self._written.get(name) == key:
                continue
            try:
                self._patch(name, body)
            except Exception as exc:  # the next cycle writes it again
                log.warning("cannot write the status of GPUQueue %s: %s", name, exc)
                continue
            self._written[name] = key
            written.append(name)
        return written
