"""The live loop and a gang placed on queue quota that another gang's victim gives back
(core/preempt.py `quota_waits`): two 8-GPU nodes; queues a (nominal 8, lends at most 3), b
(nominal 8) and x (nominal 0). x's `v` borrows five GPUs on h0 (0-4); b's gangs, not
preemptible, hold h0's 5-7 and h1's 2-4; a's `ra`, not preemptible, holds h1's 0-1. The
account is full (a's 5 kept + x's 5 + b's 6 = 16) while h1's 5-7 are idle. a's `pa` (5 GPUs)
reclaims v and takes all its GPUs; b's `pb` (1 GPU) then fits the account on h1's free GPUs
without a victim of its own, on the quota v gives back. pb is held, unbound, until v's pods
are gone (before, it was bound at once and the queues were over their account while v ran in
its grace period), and bound with pa then."""

from __future__ import annotations

from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from test_scheduler_cycle import gang, make

from gpufleet.model.contract import names

QUOTAS = {"a": (8, 3), "b": (8, None), "x": (0, None)}


def _queue(name: str) -> dict[str, Any]:
    nominal, lending = QUOTAS[name]
    quota: dict[str, Any] = {"gpuType": "H100-80GB", "nominal": nominal}
    if lending is not None:
        quota["lendingLimit"] = lending
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {"quotas": [quota]},
    }


def _running(name: str, queue: str, node: str, gpus: str, preemptible: bool) -> dict[str, Any]:
    b = PodBuilder(f"{name}-0").gpus(len(gpus.split(","))).gang(name, 1, 0)
    b.annotate(names.QUEUE, queue).annotate(names.PRIORITY, "0")
    if not preemptible:
        b.annotate(names.PREEMPTIBLE, "false")
    return b.bound(node, gpus=gpus).obj()


def test_a_gang_on_quota_a_victim_gives_back_is_bound_only_once_the_victim_is_gone() -> None:
    v = _running("v", "x", "h0", "0,1,2,3,4", preemptible=True)
    pods = [
        v,
        _running("rb1", "b", "h0", "5,6,7", preemptible=False),
        _running("ra", "a", "h1", "0,1", preemptible=False),
        _running("rb2", "b", "h1", "2,3,4", preemptible=False),
        *gang("pa", 1, 5, **{names.QUEUE: "a", names.PRIORITY: "10"}),
        *gang("pb", 1, 1, **{names.QUEUE: "b", names.PRIORITY: "5"}),
    ]
    sched, cache, binder, _ = make([NodeBuilder("h0").obj(), NodeBuilder("h1").obj()], pods)
    cache.replace_queues([_queue(q) for q in QUOTAS])
    cache.replace_namespaces([{"metadata": {"name": "default"}}])
    report = sched.run_cycle()
    assert report.preempted == ["default/v"]  # v alone: pb evicts nothing
    assert binder.bound == {}
    waits = "WaitingForPreemption: waiting for default/v, preempted for another gang"
    assert report.pending["default/pb"].startswith(waits)
    # v's pod still shown (its grace period): pb is neither bound nor decided again.
    binder.evicted.clear()
    report = sched.run_cycle()
    assert report.bound == [] and binder.evicted == []
    assert report.pending["default/pb"].startswith(waits)
    cache.pod_event("DELETED", v)
    assert sorted(sched.run_cycle().bound) == ["default/pa", "default/pb"]
    gpus = binder.bound["default/pb-0"]
    assert gpus.node == "h1" and gpus.annotations[names.ASSIGNED_GPUS] in {"5", "6", "7"}
