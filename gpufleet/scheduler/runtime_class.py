"""A pod spec as the operator will make it and the API server's admission will leave it, for
pods not yet made.

The operator makes a job's pods from its pod template and appends the tolerations of its
setting `operator.pod_tolerations` the template lacks (operator/podtemplate.py). RuntimeClass
admission then sets a pod's `overhead` to its RuntimeClass's `overhead.podFixed`, merges the
class's `scheduling.nodeSelector` into the pod's `nodeSelector` (refusing the pod when a key
has another value) and adds the class's `scheduling.tolerations`; DefaultTolerationSeconds
(on by default) gives a pod that does not tolerate the not-ready and unreachable taints'
NoExecute effect 300 s of each; ExtendedResourceToleration (off by default) adds, for each
extended resource the pod asks (nvidia.com/gpu), a toleration of any NoSchedule taint of that
key. Pods already made carry all of it (the scheduler's node checks read them as stored); a
move's new pods are not made yet when the mover reserves their nodes, so it applies the same to
their job's pod template (`operator_made`, `admitted`, `defaulted`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]

# DefaultTolerationSeconds' taints and seconds (kube-apiserver's defaults).
_NOT_READY = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_NOT_READY_S = 300


def _requested(spec: Obj) -> set[str]:
    """The resource names the pod spec's containers (init containers too) ask for."""
    out: set[str] = set()
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            out.update(resources.get(part) or {})
    return out


def _extended_resource_toleration(toleration: Obj, requested: set[str]) -> bool:
    """Whether `toleration` is the one ExtendedResourceToleration adds for a resource in
    `requested`: of any NoSchedule taint keyed by the resource's name, with no value."""
    key = toleration.get("key")
    return (
        key in requested
        and "/" in str(key)
        and toleration.get("operator") == "Exists"
        and toleration.get("effect") == "NoSchedule"
        and not toleration.get("value")
        and "tolerationSeconds" not in toleration
    )


def operator_made(
    template: Obj, operator_tolerations: Sequence[Obj] | None, old: Obj
) -> dict[str, Any]:
    """`template` (a job's pod template's spec) with the tolerations the operator appends as it
    makes a pod of it (`operator_tolerations`: its `operator.pod_tolerations`), and those
    ExtendedResourceToleration adds as the API server admits it; `old`: the spec of one of the
    job's pods made earlier. The latter plugin may be on or off in the API server, which the
    scheduler cannot read: a toleration of its form for an extended resource the old pod asks
    (the new pods ask the same: the operator adds their GPUs from the job's spec) is kept from
    the old pod. When `operator_tolerations` is None (the scheduler runs without the operator,
    so their setting is not known), every toleration of the old pod is kept: this may pass a
    node the new pods do not tolerate (one dropped from the template since), which the rebind's
    checks then catch. Any other toleration of the old pod, one its template or RuntimeClass
    had when it was made and has dropped since, is not kept."""
    own = list(template.get("tolerations") or [])
    kept = old.get("tolerations") or []
    if operator_tolerations is not None:
        requested = _requested(old) | _requested(template)
        extra = [*operator_tolerations]
        extra += [t for t in kept if _extended_resource_toleration(t, requested)]
    else:
        extra = list(kept)
    own += [dict(t) for t in extra if dict(t) not in own]
    return {**template, "tolerations": own} if own else dict(template)


def defaulted(spec: Obj) -> dict[str, Any]:
    """`spec` with the tolerations DefaultTolerationSeconds adds: the NoExecute effect of the
    not-ready and unreachable taints for 300 s, each unless a toleration of that key (or of
    every key) and that effect (or every effect) is there already."""
    tolerations = list(spec.get("tolerations") or [])
    for key in _NOT_READY:
        if not any(
            t.get("key") in (key, None, "") and t.get("effect") in ("NoExecute", None, "")
            for t in tolerations
        ):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": _NOT_READY_S,
                }
            )
    return {**spec, "tolerations": tolerations}


def admitted(spec: Obj, runtime_class: Obj | None) -> dict[str, Any] | str:
    """`spec` (a pod spec) with the overhead, node selector and tolerations of the
    RuntimeClass it names (`runtime_class`, the object read from the API server: None when it
    is gone), as admission sets them; or why admission would refuse such a pod (its
    RuntimeClass gone, a node selector key its RuntimeClass gives another value)."""
    out = {k: v for k, v in spec.items() if k != "overhead"}
    name = spec.get("runtimeClassName")
    if not name:
        return out
    if runtime_class is None:
        return f"its RuntimeClass {name} is gone: the API server would refuse its pods"
    fixed = (runtime_class.get("overhead") or {}).get("podFixed")
    if fixed:
        out["overhead"] = dict(fixed)
    scheduling = runtime_class.get("scheduling") or {}
    own = dict(spec.get("nodeSelector") or {})
    for key, value in (scheduling.get("nodeSelector") or {}).items():
        if key in own and own[key] != value:
            return (
                f"its RuntimeClass {name} selects nodes with {key}={value}, its pod template "
                f"{key}={own[key]}: the API server would refuse its pods"
            )
        own[key] = value
    if own:
        out["nodeSelector"] = own
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [t for t in scheduling.get("tolerations") or [] if t not in tolerations]
    if tolerations:
        out["tolerations"] = tolerations
    return out
