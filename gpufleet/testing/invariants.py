"""Invariants of a cluster scheduled by gpufleet, checked from the API server's objects alone.

Used by the integration tests and the benchmark after every disruptive step (operator killed,
node lost, gangs competing), and usable against a live cluster:
- no node has more GPUs or MIG slices in use than it advertises;
- no whole GPU or MIG instance is recorded on two live pods of one node, but for one pairing:
  an asleep standby and a preemptible pod of lower priority borrowing it
  (`model.contract.lending.loan_gpus`), whose borrowed GPUs are counted once;
- every gpufleet gang has none or at least its gang size of pods bound (pods already being
  deleted aside);
- no TrainingJob has two live pods for one rank.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client

from gpufleet.model.contract import lending, names
from gpufleet.scheduler import pods

Obj = Mapping[str, Any]
JOB_LABEL = names.TRAININGJOB_LABEL


def _live(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and not pods.is_terminal(pod)


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _loans(all_pods: Iterable[Obj]) -> dict[str, dict[int, str]]:
    """Borrowing pod key -> {GPU: lender key} of every valid loan (model.contract.lending)."""
    listed = list(all_pods)
    by_key = {pods.pod_key(p): p for p in listed}
    out: dict[str, dict[int, str]] = {}
    for pod in listed:
        if lending.borrowed_from(pod) and (lent := lending.loan_gpus(pod, by_key)):
            out[pods.pod_key(pod)] = lent
    return out


def capacity_violations(nodes: Iterable[Obj], all_pods: Iterable[Obj]) -> list[str]:
    """Nodes whose GPU or MIG resources are over-committed by bound, unfinished pods (a GPU
    lent by an asleep standby counts once)."""
    allocatable = {
        n["metadata"]["name"]: (n.get("status") or {}).get("allocatable") or {} for n in nodes
    }
    pod_list = list(all_pods)
    loans = _loans(pod_list)
    used: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in pod_list:
        node = pods.node_name(pod)
        if node is None or pods.is_terminal(pod):
            continue
        request = pods.gpu_request(pod)
        if request.gpus:
            lent = len(loans.get(pods.pod_key(pod), {}))
            used[node][names.WHOLE_GPU_RESOURCE] += request.gpus - lent
        if request.mig_profile:
            used[node][names.MIG_RESOURCE_PREFIX + request.mig_profile] += 1
    out = []
    for node, counts in sorted(used.items()):
        if node not in allocatable:
            continue  # orphans of a deleted node hold no real GPU; they are being removed
        for resource, n in sorted(counts.items()):
            have = _int(allocatable.get(node, {}).get(resource, 0))
            if n > have:
                out.append(f"{node}: {n} x {resource} in use, {have} allocatable")
    return out


def double_bookings(all_pods: Iterable[Obj]) -> list[str]:
    """GPUs or MIG instances that two live pods on one node both hold, but for a standby and
    its borrower on the GPUs of a valid loan."""
    pod_list = list(all_pods)
    loans = _loans(pod_list)
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pod in pod_list:
        node = pods.node_name(pod)
        if node is None or pods.is_terminal(pod):
            continue
        mig = pods.assigned_mig(pod)
        if mig is not None:
            holders[(node, f"gpu{mig[0]}/{mig[1]}")].append(pods.pod_key(pod))
            continue
        lent = loans.get(pods.pod_key(pod), {})
        for g in pods.assigned_gpus(pod) or ():
            if g not in lent:  # a GPU on loan is the standby's, recorded there
                holders[(node, f"gpu{g}")].append(pods.pod_key(pod))
    return [
        f"{node} {what} held by {', '.join(sorted(keys))}"
        for (node, what), keys in sorted(holders.items())
        if len(keys) > 1
    ]


def partial_gangs(all_pods: Iterable[Obj]) -> list[str]:
    """gpufleet gangs with some of their live pods bound but fewer than the gang size (an
    elastic gang's pods beyond its size are room to grow and may stay unbound)."""
    gangs: dict[str, list[Obj]] = defaultdict(list)
    for pod in all_pods:
        ours = (pod.get("spec") or {}).get("schedulerName") == names.SCHEDULER_NAME
        if ours and _live(pod) and (pod["metadata"].get("labels") or {}).get(names.GANG_LABEL):
            gangs[pods.gang_id(pod)].append(pod)
    out = []
    for gid, members in sorted(gangs.items()):
        bound = sum(1 for p in members if pods.node_name(p))
        size = min(len(members), pods.gang_size(members[0]))
        if 0 < bound < size:
            out.append(f"gang {gid}: {bound} live pods bound, the gang needs {size}")
    return out


def duplicate_workers(all_pods: Iterable[Obj]) -> list[str]:
    """TrainingJob ranks with more than one live pod."""
    seen: Counter[tuple[str, str, str]] = Counter()
    for pod in all_pods:
        labels = pod["metadata"].get("labels") or {}
        if JOB_LABEL in labels and _live(pod):
            ns = pod["metadata"].get("namespace", "default")
            seen[(ns, labels[JOB_LABEL], labels.get(names.RANK_LABEL, "?"))] += 1
    return [
        f"{ns}/{job} rank {rank}: {n} pods" for (ns, job, rank), n in sorted(seen.items()) if n > 1
    ]


def violations(nodes: Iterable[Obj], all_pods: Iterable[Obj]) -> list[str]:
    node_list, pod_list = list(nodes), list(all_pods)
    return (
        capacity_violations(node_list, pod_list)
        + double_bookings(pod_list)
        + partial_gangs(pod_list)
        + duplicate_workers(pod_list)
    )


def read_cluster(core: client.CoreV1Api) -> tuple[list[Obj], list[Obj]]:
    """Nodes and pods as JSON, straight from the API server."""
    raw_nodes: Any = core.list_node(_preload_content=False)
    raw_pods: Any = core.list_pod_for_all_namespaces(_preload_content=False)
    return json.loads(raw_nodes.data)["items"], json.loads(raw_pods.data)["items"]


def check(core: client.CoreV1Api) -> list[str]:
    return violations(*read_cluster(core))
