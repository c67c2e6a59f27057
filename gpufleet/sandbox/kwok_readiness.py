"""kwok stages that stand in for the kubelet's readiness rule on the sandbox's fake nodes.

A kubelet reports a pod Ready only when its containers are ready and the pod condition of every
entry of `spec.readinessGates` is True, and recomputes Ready when such a condition changes
(Kubernetes "Pod readiness gates", KEP-580). It is also the source of truth of the statuses of
its pods: when the API server's copy differs from what it would report, it writes its own again
(the status manager's reconcile, `needsReconcile` in the kubelet's status_manager.go). That is
how a running pod becomes Ready again after the node-lifecycle controller marked it not Ready
(it does so for every pod of a node whose heartbeats stop, including all of them when the API
server or etcd is down longer than its grace period) and the node's kubelet is heard again.

kwok's stock `pod-ready` stage sets Ready (and the gates' conditions) True once, when the pod
starts, and never looks again; these two stages follow afterwards: a running pod with a gate
that is not True becomes not Ready, and a running pod whose containers are ready and whose gates
(if any) are all True becomes Ready again. kwok applies stages only to pods of the nodes it
manages, so a pod stays not Ready while its node's kubelet is down (the node no longer carries
kwok's annotation), as on a real node. The EndpointSlice controller of the sandbox's
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


def _stage(name: str, gates: str, ready: str, reason: str | None) -> dict[str, Any]:
    selector = [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": _CONTAINERS_READY, "operator": "In", "values": ["True"]},
        {"key": _GATES_TRUE, "operator": "In", "values": [gates]},
        {"key": _READY, "operator": "NotIn", "values": [ready]},
    ]
    condition = (
        f'conditions:\n- type: Ready\n  status: "{ready}"\n'
        + (f"  reason: {reason}\n" if reason else "")
        + "  lastTransitionTime: {{ Now | Quote }}\n"
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
    # A kubelet gives a Ready pod no reason; this also undoes the node-lifecycle controller's
    # mark on pods without gates, which the kubelet's status reconcile would overwrite.
    _stage("pod-ready-again", "true", "True", None),
)
