"""A small queue scene for the replay's idle-GPU tests: queue `c` at a hard limit of 4 V100s
(no borrowing) beside queue `a` with the other 12, and one-GPU-per-replica trace jobs of one
model (a multi-replica job asks for one node)."""

from __future__ import annotations

from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.sim.tenants import TenantSetup
from gpufleet.sim.traces.common import TraceJob

__all__ = ["MODEL", "V100", "limited_setup", "trace_job"]

MODEL = "ResNet-50 (batch size 64)"
V100 = "V100-32GB"


def trace_job(jid: str, queue: str, arrival: float, work: float, gpus: int) -> TraceJob:
    """A job of `gpus` one-GPU replicas of `queue`, on one node when it has more than one."""
    return TraceJob(
        jid, arrival, work, replicas=gpus, gpus_per_replica=1, model=MODEL, queue=queue,
        same_node=gpus > 1,
    )  # fmt: skip


def limited_setup() -> TenantSetup:
    """`c` may use 4 V100s and never borrow; `a` has the other 12."""
    specs = [
        QueueSpec("a", quotas={V100: Quota(12)}),
        QueueSpec("c", quotas={V100: Quota(4, borrowing_limit=0)}),
    ]
    return TenantSetup(QueueTree.build(specs), {"a": 0.75, "c": 0.25}, None)
