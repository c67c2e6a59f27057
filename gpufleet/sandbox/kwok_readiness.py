"""kwok stages that stand in for the kubelet's readiness rule on the sandbox's fake nodes.

A kubelet reports a pod Ready only when its containers are ready and the pod condition of every
entry of `spec.readinessGates` is True, and recomputes Ready when such a condition changes
(Kubernetes "Pod readiness gates", KEP-580). kwok's stock `pod-ready` stage sets Ready (and the
gates' conditions) True once, when the pod starts, and never looks again; these two stages
follow the gates afterwards: a running pod with a gate that is not True becomes not Ready, and
becomes Ready again once every gate is True. The EndpointSlice controller of the sandbox's
kube-controller-manager then lists the pod as a (not) ready endpoint of its Services, as on a
real cluster.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["STAGES"]

# jq over the pod: "true" when every readiness gate's condition is True (no gates: true).
_GATES_TRUE: Final = (
    ". as $p | [($p.spec.readinessGates // [])[] | .conditionType as $t"
    ' | ([($p.status.conditions // [])[] | select(.type == $t) | .status] | first // "False")]'
    ' | all(. == "True")'
)
_READY: Final = '.status.conditions.[] | select( .type == "Ready" ) | .status'
_CONTAINERS_READY: Final = '.status.conditions.[] | select( .type == "ContainersReady" ) | .status'


def _stage(name: str, gates: str, ready: str, reason: str) -> dict[str, Any]:
    selector = [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": ".spec.readinessGates", "operator": "Exists"},
        {"key": _CONTAINERS_READY, "operator": "In", "values": ["True"]},
        {"key": _GATES_TRUE, "operator": "In", "values": [gates]},
        {"key": _READY, "operator": "NotIn", "values": [ready]},
    ]
    condition = (
        f'conditions:\n- type: Ready\n  status: "{ready}"\n  reason: {reason}\n'
        "  lastTransitionTime: {{ Now | Quote }}\n"
    )
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": selector},
            "next": {"statusTemplate": condition},
        },
    }


STAGES: Final = (
    _stage("pod-readiness-gate-closed", "false", "False", "ReadinessGatesNotReady"),
    _stage("pod-readiness-gate-open", "true", "True", "ReadinessGatesReady"),
)
