"""GPUQueues' figures computed live: the status each queue's GPUQueue shows, from the view.

The figures come from the function the scheduler's status writer uses
(`queue_objects.status_bodies`) on the admin API's view of the cluster, so a route and a
queue's status agree once the scheduler has written its cycle. The view is the cache's, without
what the scheduler keeps in memory: standalone, the GPUs reserved for moved gangs are not known
(they show in no queue's `held`).
"""

from __future__ import annotations

from typing import Any

from gpufleet.admin.live import Observed
from gpufleet.admin.models.queues import QueuePublic
from gpufleet.model.contract.timestamps import format_time
from gpufleet.scheduler.queue_objects import status_bodies


def queues_public(observed: Observed) -> list[QueuePublic]:
    """Every queue of the view, sorted by name (none without GPUQueues)."""
    view = observed.view
    tree = view.snapshot.queues
    if tree is None:
        return []
    pending = [pg.gang for pg in view.pending]
    bodies = status_bodies(view.snapshot, pending, format_time(observed.at))
    out: list[QueuePublic] = []
    for name, body in bodies.items():
        doc: dict[str, Any] = {
            **body,
            "conditions": [
                {k: v for k, v in c.items() if k != "lastTransitionTime"}
                for c in body["conditions"]
            ],
        }
        out.append(
            QueuePublic.model_validate({"name": name, "parent": tree.queues[name].parent, **doc})
        )
    return out
