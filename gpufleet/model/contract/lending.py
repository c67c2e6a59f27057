"""Lending an asleep standby's GPUs to preemptible work, as pods record it.

A standby serving replica asleep (vLLM sleep mode level 1: weights in CPU memory, GPU memory
freed) keeps its pod, its GPU assignment and its device allocation, so the GPU it holds is idle
but taken. The scheduler lends it (`core.lending`): a borrowing pod is bound onto GPUs a standby
holds and records which standbys it borrows from (`gpufleet.io/borrows`, namespace/name of each
standby, written through its Binding with its GPUs). The contract, each side's part:

- scheduler, before binding a borrower: writes `gpufleet.io/lent-to` (the borrowing gang) on each
  standby it borrows from, conditional on the standby's resourceVersion, so a standby the
  operator changed meanwhile (woken) is not lent; it removes the mark once no pod borrows from
  the standby any more;
- operator, to wake a standby marked lent: writes `gpufleet.io/recall` instead of waking it and
  leaves it asleep (out of its Service); it wakes it on a later pass once the mark is gone;
- scheduler, on a recalled standby (or one no longer asleep): preempts each borrowing gang whole
  (its pods deleted with their grace period, the cause recorded as a preemption), and removes
  `lent-to` when the last borrowing pod is gone.

`loan_gpus` is the one rule of a valid loan, shared by the scheduler's ledger and the invariant
checker: two live pods may hold one GPU only as an asleep standby and a borrower naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import assigned_gpus
from gpufleet.model.contract.standby import is_asleep
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.contract.wishes import GangWishes

__all__ = [
    "borrowed_from",
    "borrows_annotation",
    "lend_patch",
    "lent_to",
    "loan_gpus",
    "pod_key",
    "recall_patch",
    "recalled",
    "unlend_patch",
]

Obj = Mapping[str, Any]


def _annotations(pod: Obj) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name')}"


def borrowed_from(pod: Obj) -> tuple[str, ...]:
    """The standbys (pod keys) the pod says it borrows GPUs from; () for other pods."""
    raw = _annotations(pod).get(names.BORROWS) or ""
    return tuple(k for k in (x.strip() for x in raw.split(",")) if k.count("/") == 1)


def borrows_annotation(lenders: Iterable[str]) -> dict[str, str]:
    """The binding annotation of a pod borrowing from `lenders` (pod keys)."""
    return {names.BORROWS: ",".join(sorted(set(lenders)))}


def lent_to(pod: Obj) -> str | None:
    """The borrowing gang the scheduler lent the standby's GPUs to, if it did."""
    return _annotations(pod).get(names.LENT_TO) or None


def recalled(pod: Obj) -> bool:
    """Whether the operator asked for the standby's GPUs back."""
    return bool(_annotations(pod).get(names.RECALL))


def lend_patch(gang: str, resource_version: str | None) -> dict[str, Any]:
    """Merge patch marking a standby lent to `gang`; with the resourceVersion the scheduler
    read, the API server refuses it (409) if the standby changed since."""
    meta: dict[str, Any] = {"annotations": {names.LENT_TO: gang}}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}


def unlend_patch() -> dict[str, Any]:
    """Merge patch removing the lent mark (no pod borrows from the standby any more)."""
    return {"metadata": {"annotations": {names.LENT_TO: None}}}


def recall_patch(now: datetime) -> dict[str, Any]:
    """Merge patch asking for a lent standby's GPUs back."""
    return {"metadata": {"annotations": {names.RECALL: format_time(now)}}}


def _live(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed")


def _node(pod: Obj) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


def _whole_gpus(pod: Obj) -> frozenset[int]:
    annotations = _annotations(pod)
    if annotations.get(names.ASSIGNED_MIG):
        return frozenset()  # MIG slices are never lent
    return frozenset(assigned_gpus(annotations) or ())


def loan_gpus(borrower: Obj, pods_by_key: Mapping[str, Obj]) -> dict[int, str]:
    """GPU index -> lender pod key for each of `borrower`'s GPUs held on loan; empty when the
    pod is no valid borrower. A loan is valid when the borrower is live, preemptible and bound
    on the node of each standby it names, and each named standby is live, marked asleep, of
    strictly higher priority, and holds the borrowed whole GPUs (a recalled standby is still
    lent until its borrowers are gone). The borrower's other GPUs are its own."""
    lenders = borrowed_from(borrower)
    node = _node(borrower)
    if not lenders or node is None or not _live(borrower):
        return {}
    wishes = GangWishes.read(_annotations(borrower))
    if not wishes.preemptible:
        return {}
    mine = _whole_gpus(borrower)
    out: dict[int, str] = {}
    for key in lenders:
        lender = pods_by_key.get(key)
        if lender is None or _node(lender) != node or not _live(lender) or not is_asleep(lender):
            continue
        if GangWishes.read(_annotations(lender)).priority <= wishes.priority:
            continue
        for gpu in mine & _whole_gpus(lender):
            out.setdefault(gpu, key)
    return out
