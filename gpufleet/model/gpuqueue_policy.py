"""The objects installed beside the GPUQueue CRD: its admission policy and the default queue.

A CRD's CEL rules see one object only. What a queue must satisfy against *another* queue is
checked by a ValidatingAdmissionPolicy (CEL in the API server, no webhook to run) whose
parameters are the existing GPUQueues: the binding selects all of them, and the API server
evaluates the rules once per existing queue, refusing the object when any evaluation fails. So
each rule compares the queue being written with one other queue:
- a child's nominal quota for a resource must not exceed its parent's (the sum of the
  siblings' quotas needs all siblings at once; the scheduler reports it on the parent's status,
  condition Oversubscribed);
- a parent may not lower its nominal quota below one of its children's;
- a queue may not name as parent a queue whose parent is this queue (a two-queue cycle; one
  queue as its own parent is refused by the CRD itself; longer cycles make the queues on them
  unusable, which the scheduler reports on their status and their jobs' QueueNotFound).
A missing parent is not refused: queues may be created in any order, and the child takes no
jobs until its parent exists.

The default queue (`DEFAULT_QUEUE`, which jobs naming no queue use) has no quota: its jobs
borrow whatever no other queue uses, and give it back when the owners' jobs wait.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import yaml

from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.model.gpuqueue import DEFAULT_QUEUE

__all__ = [
    "CHART_TEMPLATE",
    "POLICY_NAME",
    "chart_template",
    "default_queue",
    "queue_policy_documents",
]

POLICY_NAME: Final = "gpuqueues.gpufleet.io"
# The chart's copy, written and checked by `python -m gpufleet.model.crdgen`.
CHART_TEMPLATE: Final = Path("helm/gpufleet/templates/gpuqueues.yaml")

# CEL: quota p (of one queue) and quota q (of another) are for the same resource.
_SAME = (
    "p.gpuType == q.gpuType && "
    "(has(p.migProfile) ? p.migProfile : '') == (has(q.migProfile) ? q.migProfile : '')"
)


def _covers(upper: str, lower: str) -> str:
    """CEL: every nonzero nominal quota of `lower` is at most `upper`'s for the resource."""
    return (
        f"!has({lower}.spec.quotas) || {lower}.spec.quotas.all(q, q.nominal == 0 || "
        f"(has({upper}.spec.quotas) && {upper}.spec.quotas.exists(p, {_SAME} && "
        "p.nominal >= q.nominal)))"
    )


def _over(upper: str, lower: str) -> str:
    """CEL: the names of `lower`'s resources whose nominal quota exceeds `upper`'s."""
    return (
        f"{lower}.spec.quotas.filter(q, q.nominal > 0 && !(has({upper}.spec.quotas) && "
        f"{upper}.spec.quotas.exists(p, {_SAME} && p.nominal >= q.nominal)))"
        ".map(q, q.gpuType + (has(q.migProfile) ? '/' + q.migProfile : '')).join(', ')"
    )


def _validations() -> list[dict[str, Any]]:
    is_parent = "has(object.spec.parent) && params.metadata.name == object.spec.parent"
    is_child = "has(params.spec.parent) && params.spec.parent == object.metadata.name"
    # The API server reports the first rule that fails: the cycle, the more basic error, first.
    return [
        {
            "expression": (
                f"!({is_parent}) || !has(params.spec.parent) || "
                "params.spec.parent != object.metadata.name"
            ),
            "messageExpression": (
                "'spec.parent: parent cycle ' + object.metadata.name + ' -> ' + "
                "params.metadata.name + ' -> ' + object.metadata.name"
            ),
            "reason": "Invalid",
        },
        {
            "expression": f"!({is_parent}) || {_covers('params', 'object')}",
            "messageExpression": (
                "'spec.quotas: the nominal quota exceeds parent ' + params.metadata.name + "
                f'"\'s for " + {_over("params", "object")}'
            ),
            "reason": "Invalid",
        },
        {
            "expression": f"!({is_child}) || {_covers('object', 'params')}",
            "messageExpression": (
                "'spec.quotas: the nominal quota is below child ' + params.metadata.name + "
                f'"\'s for " + {_over("object", "params")}'
            ),
            "reason": "Invalid",
        },
    ]


def queue_policy_documents() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (see the module docstring)."""
    labels = {"app.kubernetes.io/part-of": "gpufleet"}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            # A policy the API server cannot evaluate yet (just after installation its parameter
            # kind is not yet synced) admits, as the CRD's own rules still apply; a rule that
            # evaluates to false always refuses.
            "failurePolicy": "Ignore",
            "paramKind": {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "GPUQueue"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [API_GROUP],
                        "apiVersions": [API_VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["gpuqueues"],
                    }
                ]
            },
            "validations": _validations(),
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            "policyName": POLICY_NAME,
            # Every existing queue is a parameter; none (the first queue) admits.
            "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"},
            "validationActions": ["Deny"],
        },
    }
    return [policy, binding]


def default_queue() -> dict[str, Any]:
    """The queue jobs use when they name none: no quota, weight 1."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "GPUQueue",
        "metadata": {"name": DEFAULT_QUEUE, "labels": {"app.kubernetes.io/part-of": "gpufleet"}},
        "spec": {"weight": 1.0},
    }


def chart_template() -> str:
    """The chart's template of these objects. Like the CRDs in the chart's `crds/`, each is
    created when missing and never deleted or replaced by helm (`resource-policy: keep`, and a
    `lookup` that leaves out an object the cluster already has): the admin owns the default
    queue once it exists, and a cluster that had them (the sandbox creates them with the CRDs)
    takes the chart without conflicts."""
    parts = ["# Generated by `python -m gpufleet.model.crdgen` from gpufleet/model; do not edit.\n"]
    for doc in [*queue_policy_documents(), default_queue()]:
        doc = {**doc, "metadata": {**doc["metadata"]}}
        doc["metadata"]["annotations"] = {"helm.sh/resource-policy": "keep"}
        api, kind, name = doc["apiVersion"], doc["kind"], doc["metadata"]["name"]
        body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)
        parts.append(
            f'{{{{- if not (lookup "{api}" "{kind}" "" "{name}") }}}}\n---\n{body}{{{{- end }}}}\n'
        )
    return "".join(parts)
