"""What the operator makes of a job, for the admin API: the pods of a manifest, the job of a pod.

A what-if must offer the core exactly the gangs the scheduler will see once the manifest is
applied, so the pods are built by the operator's own pure builders (the same calls its
reconcile makes), never re-derived here; the scheduler's `ViewBuilder` then reads them like any
other pod. This is the admin API's one use of the operator package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.admin.models.common import JobRef
from gpufleet.model.contract import names
from gpufleet.model.contract.names import SERVINGJOB_LABEL, TRAININGJOB_LABEL
from gpufleet.model.servingjob import ServingJob
from gpufleet.model.trainingjob import TrainingJob
from gpufleet.operator import children, serving_children
from gpufleet.operator.objects import ServingJobObject, TrainingJobObject

Obj = dict[str, Any]
# A uid for the owner references of pods that will never exist.
_WHAT_IF_UID = "00000000-0000-0000-0000-000000000000"


def job_of_pod(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the TrainingJob or ServingJob that owns `pod`, from its labels."""
    labels = pod["metadata"].get("labels") or {}
    if TRAININGJOB_LABEL in labels:
        return "TrainingJob", str(labels[TRAININGJOB_LABEL])
    if SERVINGJOB_LABEL in labels:
        return "ServingJob", str(labels[SERVINGJOB_LABEL])
    return None


def job_ref(pod: Mapping[str, Any]) -> JobRef | None:
    """The job that owns `pod`, if any."""
    owner = job_of_pod(pod)
    if owner is None:
        return None
    return JobRef(
        namespace=str(pod["metadata"].get("namespace", "default")), kind=owner[0], name=owner[1]
    )


def job_selector(kind: str, name: str) -> tuple[str, str]:
    """The label (key, value) every pod of the job carries."""
    return (TRAININGJOB_LABEL if kind == "TrainingJob" else SERVINGJOB_LABEL), name


def manifest_pods(
    job: TrainingJob | ServingJob, namespace: str, scheduler_name: str = names.SCHEDULER_NAME
) -> list[Obj]:
    """The pending pods the operator creates first for `job`, unbound, for the scheduler named
    `scheduler_name`."""
    doc: Obj = job.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["metadata"] = {**doc.get("metadata", {}), "namespace": namespace, "uid": _WHAT_IF_UID}
    if isinstance(job, TrainingJob):
        training = TrainingJobObject.of(doc)
        count = children.start_replicas(training.spec)
        made = [
            children.worker_pod(training, i, scheduler_name=scheduler_name) for i in range(count)
        ]
    else:
        serving = ServingJobObject.of(doc)
        made = []
        for pool_name, pool in serving.pools().items():
            low, _ = serving_children.pool_bounds(pool)
            deployment = serving_children.deployment(
                serving, pool_name, low, scheduler_name=scheduler_name
            )
            template = deployment["spec"]["template"]
            for i in range(low):
                made.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            **template.get("metadata", {}),
                            "name": f"{deployment['metadata']['name']}-what-if-{i}",
                            "namespace": namespace,
                        },
                        "spec": template["spec"],
                    }
                )
    for pod in made:
        pod["status"] = {"phase": "Pending"}
    return made
