"""gpufleet's scheduler on the sandbox: gangs bound whole or not at all, preemption of whole
lower-priority gangs only, and the real kube-scheduler running beside it without either one
taking the other's pods or over-committing a GPU. Invariants are read back from the cluster."""

from __future__ import annotations

from typing import Any

from gpufleet.model.contract import names
from gpufleet.operator.podtemplate import GPU_TOLERATIONS
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, SettledInvariants, training_job, wait_for


def gang_pod(name: str, gang: str, size: int, rank: int, gpus: int, gpu_type: str) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {names.GANG_LABEL: gang, names.RANK_LABEL: str(rank)},
            "annotations": {names.GANG_SIZE: str(size), names.GPU_TYPES: gpu_type},
        },
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            # The sandbox's GPU nodes carry the GPU Operator's taint.
            "tolerations": list(GPU_TOLERATIONS),
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/x:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def plain_pod(name: str, gpus: int, pool: str) -> Any:
    """A pod for the default kube-scheduler, pinned to one node pool."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"gpufleet.io/node-pool": pool},
            "tolerations": list(GPU_TOLERATIONS),
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/x:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def test_competing_gangs_are_never_partly_bound(kube: Kube, ns: str) -> None:
    # Two gangs of 4 x 4 T4 GPUs; the T4 pool has exactly 16: only one can run.
    for rank in range(4):
        for gang in ("a", "b"):
            kube.core.create_namespaced_pod(ns, gang_pod(f"{gang}-{rank}", gang, 4, rank, 4, "T4"))

    watch = SettledInvariants(kube.core)

    def settled() -> str | None:
        # Checked at every poll, not only at the end: no partial gang beyond its bindings.
        assert watch.check() == []
        pods = kube.pods(ns)
        by_gang = {g: [p for p in pods if p["metadata"]["name"][0] == g] for g in "ab"}
        full = [g for g, members in by_gang.items() if len(bound(members)) == 4]
        if len(full) != 1:
            return None
        loser = "b" if full[0] == "a" else "a"
        waiting = [
            c["message"]
            for p in by_gang[loser]
            for c in p["status"].get("conditions", [])
            if c["type"] == "PodScheduled" and c["status"] == "False"
        ]
        return full[0] if len(waiting) == 4 else None

    winner = wait_for(settled, "one gang bound whole, the other waiting with a reason")
    loser = "b" if winner == "a" else "a"
    message = next(
        c["message"]
        for c in kube.pods(ns)[0 if loser == "a" else 4]["status"]["conditions"]
        if c["type"] == "PodScheduled"
    )
    assert message.split(":")[0] in ("InsufficientFreeGpus", "CapacityGivenToOtherGangs")
    for rank in range(4):
        kube.core.delete_namespaced_pod(f"{winner}-{rank}", ns, grace_period_seconds=0)
    wait_for(
        lambda: len(bound([p for p in kube.pods(ns) if p["metadata"]["name"][0] == loser])) == 4,
        "the other gang bound once capacity freed",
    )
    assert invariants.check(kube.core) == []


def test_preemption_evicts_whole_lower_priority_gangs_only(kube: Kube, ns: str) -> None:
    kube.create_job(ns, training_job("low", 4, 4, "L4", priority=1))  # all 16 L4 GPUs
    kube.create_job(ns, training_job("bystander", 1, 1, "T4", priority=0))
    for name in ("low", "bystander"):
        wait_for(lambda n=name: kube.phase(ns, n) == "Running", f"{name} Running")
    bystander = {p["metadata"]["uid"] for p in kube.pods(ns, "gpufleet.io/trainingjob=bystander")}
    low_before = {p["metadata"]["uid"] for p in kube.pods(ns, "gpufleet.io/trainingjob=low")}

    kube.create_job(ns, training_job("high", 1, 4, "L4", priority=10))
    # Evicting the low gang, then a scheduler cycle, bindings and an operator pass: 60 s as in
    # test_scheduler_budgets.py; how fast is not what this test measures.
    wait_for(lambda: kube.phase(ns, "high") == "Running", "high Running", 60)

    watch = SettledInvariants(kube.core)

    def low_requeued() -> bool:
        assert watch.check() == []
        pods = kube.pods(ns, "gpufleet.io/trainingjob=low")
        fresh = {p["metadata"]["uid"] for p in pods} & low_before == set()
        return len(pods) == 4 and fresh and kube.phase(ns, "low") == "Preempted"

    wait_for(low_requeued, "every low pod replaced, none bound, phase Preempted")
    # 12 L4 GPUs are free, the low gang needs 16: it waits whole, with the core's reason.
    assert bound(kube.pods(ns, "gpufleet.io/trainingjob=low")) == []
    preempted = kube.condition(ns, "low", "Preempted")
    assert preempted is not None and preempted["reason"] == "PreemptedByHigherPriority"
    after = {p["metadata"]["uid"] for p in kube.pods(ns, "gpufleet.io/trainingjob=bystander")}
    assert after == bystander and kube.phase(ns, "bystander") == "Running"
    assert any(e["reason"] == "Preempted" for e in kube.events(ns, "low"))


def test_kube_scheduler_beside_gpufleet_never_overcommits(kube: Kube, ns: str) -> None:
    # The default scheduler places three 2-GPU pods on the 16-GPU L4 pool ...
    for i in range(3):
        kube.core.create_namespaced_pod(ns, plain_pod(f"plain-{i}", 2, "l4"))
    wait_for(lambda: len(bound(kube.pods(ns))) == 3, "kube-scheduler bound its pods")
    # ... gpufleet fills exactly what is left (5 x 2 = 10 GPUs) around them ...
    for rank in range(5):
        kube.core.create_namespaced_pod(ns, gang_pod(f"g-{rank}", "g", 5, rank, 2, "L4"))
    wait_for(lambda: len(bound(kube.pods(ns, f"{names.GANG_LABEL}=g"))) == 5, "gpufleet gang bound")
    # ... and then kube-scheduler finds no room left for one more GPU.
    kube.core.create_namespaced_pod(ns, plain_pod("plain-late", 1, "l4"))

    def late_pending() -> bool:
        pod = kube.core.read_namespaced_pod("plain-late", ns)
        conditions = pod.status.conditions or []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)

    wait_for(late_pending, "kube-scheduler reports the late pod unschedulable")
    assert invariants.check(kube.core) == []
    for pod in kube.pods(ns):
        annotations = pod["metadata"].get("annotations") or {}
        if pod["spec"].get("schedulerName") == names.SCHEDULER_NAME:
            assert names.ASSIGNED_GPUS in annotations  # bound by gpufleet, not kube-scheduler
        else:
            assert names.ASSIGNED_GPUS not in annotations  # gpufleet never took it


def elastic_job(name: str, low: int, high: int, gpu_type: str, priority: int) -> Any:
    job = training_job(name, low, 1, gpu_type, priority)
    del job["spec"]["replicas"]
    job["spec"]["elastic"] = {"minReplicas": low, "maxReplicas": high}
    return job


def test_elastic_job_grows_and_shrinks_before_whole_gangs_are_preempted(
    kube: Kube, ns: str
) -> None:
    def placed(job: str) -> int:
        return len(bound(kube.pods(ns, f"gpufleet.io/trainingjob={job}")))

    # The 16 T4 GPUs: 8 for a whole low-priority gang, the other 8 grown into by an elastic job.
    kube.create_job(ns, training_job("whole", 8, 1, "T4", priority=1))
    wait_for(lambda: kube.phase(ns, "whole") == "Running", "whole Running")
    kube.create_job(ns, elastic_job("elastic", 2, 8, "T4", priority=5))
    wait_for(lambda: placed("elastic") == 8, "elastic grown to its maximum")
    # Its status follows within an operator pass (it still said Queued when the pods were bound).
    wait_for(lambda: kube.phase(ns, "elastic") == "Running", "elastic Running")
    whole = {p["metadata"]["uid"] for p in kube.pods(ns, "gpufleet.io/trainingjob=whole")}

    # A 6-GPU job of higher priority: the elastic job gives up replicas, the whole gang stays.
    kube.create_job(ns, training_job("urgent", 6, 1, "T4", priority=10))

    def urgent_running() -> bool:
        # At every poll: the whole gang is never touched (a failure says so, not a count).
        after = {p["metadata"]["uid"]: p for p in kube.pods(ns, "gpufleet.io/trainingjob=whole")}
        assert after.keys() == whole and len(bound(list(after.values()))) == 8, "whole gang hit"
        return kube.phase(ns, "urgent") == "Running"

    # (Shrinking the elastic job, then binding urgent: not a latency this test measures.)
    wait_for(urgent_running, "urgent Running", 60)
    assert placed("elastic") == 2 and kube.phase(ns, "elastic") == "Running"
    assert kube.phase(ns, "whole") == "Running"
    assert invariants.check(kube.core) == []

    # Capacity frees: the elastic job grows back.
    kube.delete_job(ns, "urgent")
    wait_for(lambda: placed("elastic") == 8, "elastic grown back", 60)
    assert invariants.check(kube.core) == []
