"""A pod spec as the API server's RuntimeClass admission will leave it, for pods not yet made.

Admission sets a pod's `overhead` to its RuntimeClass's `overhead.podFixed`, merges the
class's `scheduling.nodeSelector` into the pod's `nodeSelector` (refusing the pod when a key
has another value) and adds the class's `scheduling.tolerations`. Pods already made carry all
of it (the scheduler's node checks read them as stored); a move's new pods are not made yet
when the mover reserves their nodes, so it applies the same to their job's pod template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]


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
