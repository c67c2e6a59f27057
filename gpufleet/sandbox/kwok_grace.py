"""kwok stages that delete a terminating pod: at once, or after its grace period on request.

A kubelet sends SIGTERM to a deleted pod's containers and removes the pod once they exit, at
the latest when its grace period (`terminationGracePeriodSeconds`, copied by the API server into
`metadata.deletionGracePeriodSeconds`, with `deletionTimestamp` = deletion + grace) runs out.
kwok's stock `pod-delete` stage removes it at once, as if every container exited on SIGTERM: the
sandbox keeps that for speed, except for pods annotated `HONOUR_GRACE: "true"`, which stay
(terminating, still holding their node's GPUs) until their `deletionTimestamp`, as a container
that ignores SIGTERM or takes its whole grace period to checkpoint would. Tests and benches that
time a preemption against the victims' grace period use it.

Exactly one of the two stages matches a terminating pod (kwok picks at random among matches).
Like kwok's `fast` stage, both ignore finalizers: a pod with one stays until it is removed.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["HONOUR_GRACE", "STAGES"]

HONOUR_GRACE: Final = "sandbox.gpufleet.io/honour-grace-period"
_ANNOTATION: Final = f'.metadata.annotations["{HONOUR_GRACE}"]'


def _stage(name: str, honour: bool) -> dict[str, Any]:
    selector = [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
        {"key": _ANNOTATION, "operator": "In" if honour else "NotIn", "values": ["true"]},
    ]
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": selector},
        "next": {"delete": True},
    }
    if honour:
        # A timestamp read from the object is a delay until that time (kwok's durationFrom).
        spec["delay"] = {
            "durationMilliseconds": 0,
            "durationFrom": {"expressionFrom": ".metadata.deletionTimestamp"},
        }
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


STAGES: Final = (
    _stage("pod-delete", honour=False),
    _stage("pod-delete-after-grace", honour=True),
)
