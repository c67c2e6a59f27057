"""Whole-gang PodDisruptionBudget check before a preemption (pure: objects in, verdict out).

The Eviction API checks budgets one pod at a time: a gang of four under a budget allowing one
disruption would lose its first pod and keep three. gpufleet preempts whole gangs or nothing,
so before the first eviction it adds up, per budget, the pods that the preemption would take
and refuses the whole preemption when any budget cannot cover them (or a pod is covered by two
budgets, which the Eviction API refuses with 500). Budgets already drawn on by earlier
preemptions of the same cycle are passed in `spent`.

Like the API server, pods that are Pending, finished or already being deleted do not count
(their eviction skips the budget). Unready pods do count, although the API server may let them
go without using the budget: the check is conservative, never laxer than the API.

What this cannot close: between this check and the evictions another client may use up the
budget (or the disruption controller may lower it); the Eviction API then refuses the rest of
the gang with 429. The loop logs that, stops evicting, lets the preemptor wait, and the victim
gang is left partly evicted for the partly-bound-gang handling to complete or restart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

Obj = Mapping[str, Any]


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector against labels. In policy/v1 an empty selector matches every pod of
    the namespace and a null one none."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def budget_key(pdb: Obj) -> str:
    meta = pdb["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


def _guarded(pod: Obj) -> bool:
    """Whether evicting `pod` draws on a budget (the API server's `canIgnorePDB`, negated)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Pending", "Succeeded", "Failed") and not pod["metadata"].get(
        "deletionTimestamp"
    )


def gang_blocked(
    victims: Sequence[Obj], budgets: Iterable[Obj], spent: MutableMapping[str, int]
) -> str | None:
    """Why evicting every pod of `victims` would break a budget, or None; on None the pods
    are charged to `spent` (budget key -> disruptions used this cycle)."""
    by_namespace: dict[str, list[Obj]] = defaultdict(list)
    for pdb in budgets:
        by_namespace[pdb["metadata"].get("namespace", "default")].append(pdb)
    needed: dict[str, int] = defaultdict(int)
    found: dict[str, Obj] = {}
    for pod in victims:
        if not _guarded(pod):
            continue
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        covering = [
            pdb
            for pdb in by_namespace.get(meta.get("namespace", "default"), [])
            if selector_matches((pdb.get("spec") or {}).get("selector"), labels)
        ]
        if len(covering) > 1:
            names = ", ".join(sorted(budget_key(p) for p in covering))
            return f"pod {meta['name']} is covered by more than one PodDisruptionBudget ({names})"
        if covering:
            key = budget_key(covering[0])
            needed[key] += 1
            found[key] = covering[0]
    reasons: list[str] = []
    for key in sorted(needed):
        pdb = found[key]
        status = pdb.get("status") or {}
        if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 0)):
            reasons.append(f"PodDisruptionBudget {key} is not yet processed")
            continue
        allowed = int(status.get("disruptionsAllowed", 0)) - spent.get(key, 0)
        if needed[key] > allowed:
            reasons.append(
                f"PodDisruptionBudget {key} allows {max(allowed, 0)} disruption(s), "
                f"the gang has {needed[key]} pod(s) under it"
            )
    if reasons:
        return "; ".join(reasons)
    for key, count in needed.items():
        spent[key] = spent.get(key, 0) + count
    return None
