"""When a gang's job was submitted, as pods carry it: the place in line of a gang whose pods
were recreated (after an eviction or a move) with the requeue timestamp `creation`
(`Policy.requeue_timestamp`).

The operator writes its TrainingJob's `creationTimestamp` on every worker pod it creates
(`submitted_annotations`), so the scheduler needs nothing but the pods (it does not read the
jobs), and any controller may do the same for its pods. Reading is lenient, as for the wishes:
a missing or unreadable value reads as unknown (`read_submitted` returns None), and the
scheduler then counts from the gang's earliest pod's creation.

Only TrainingJob workers carry it, not a ServingJob's replicas (operator/serving_children.py).
They are a Deployment's pods, each a gang of one, all built from the pool's one template: the
job's creation time would be on every replica alike, so a replica the autoscaler adds long after
the job was created (new demand, not a requeued gang) would be in line ahead of every job its
queue received since; and the Deployment recreates an evicted replica as a new pod that nothing
tells apart from a scale-up (besides, serving replicas are not preemptible unless their job
says so). A serving replica is thus in line from its own pod's creation, with either requeue
timestamp.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time, parse_time

__all__ = ["read_submitted", "submitted_annotations"]


def submitted_annotations(submitted: datetime | None) -> dict[str, str]:
    """The annotation of when the job was submitted (none when unknown)."""
    return {} if submitted is None else {names.SUBMITTED_AT: format_time(submitted)}


def read_submitted(annotations: Mapping[str, str]) -> datetime | None:
    """When a pod's annotations say its job was submitted; None when absent or unreadable."""
    when = parse_time(annotations.get(names.SUBMITTED_AT))
    return when if when is not None and when.tzinfo is not None else None
