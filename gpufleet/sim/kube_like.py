"""The kube-scheduler-like baseline: what Kubernetes' default scheduler does with GPU pods.

One model, used by the simulator (`gpufleet simulate --policies kube`, `bench/sim_targets.py`)
and by the placement benchmark (`bench/placement_bench.py`), so both compare against the same
"kube". It has the core's call shape, `policy(snapshot, pending, core_policy) -> Decision`, and
reads free capacity from the core's ledger (`gpufleet.core.state.ClusterState`).

What it models, and why (kube-scheduler v1 defaults, `pkg/scheduler/apis/config/v1`):

* **Pod by pod, no gangs.** Every replica of a job is a pod scheduled on its own, up to the
  job's largest size, in the order of the PrioritySort queue: higher priority first, then
  submission order; nothing waits for the rest of the gang. A gang counts as admitted once
  `replicas_min` of its pods are bound; the pods of a gang that does not fit completely stay
  bound and hold their GPUs (the simulator releases them after its gang timeout). The default
  profile has no gang plugin (coscheduling lives out of tree in scheduler-plugins; the in-tree
  GangScheduling plugin, alpha since 1.35, is behind a feature gate that is off by default)
  and no topology awareness.
* **Filter = NodeResourcesFit, NodeAffinity, NodeUnschedulable.** A node qualifies when it is
  schedulable (not cordoned), of an acceptable GPU type (a `nvidia.com/gpu.product` node
  affinity) and has the requested extended resource free. With the device plugin's `mixed` MIG
  strategy (the project's GPU reference §1) a GPU in MIG mode is not advertised as
  `nvidia.com/gpu`: a whole-GPU pod only fits on free GPUs in whole mode, and a slice pod only on
  a free instance of exactly its profile (`nvidia.com/mig-<profile>`). **MIG layouts are
  whatever the nodes have**: kube-scheduler never writes `nvidia.com/mig.config`, and neither
  does this model; an empty MIG-mode GPU is never switched back to whole mode, and no GPU is
  cut for a profile nobody instanced.
* **Score = NodeResourcesFit with LeastAllocated**, the default strategy: per node and
  resource, (allocatable - requested after this pod) x 100 / allocatable, an integer. Its
  default resources are `cpu` and `memory` (weight 1 each); extended resources are scored only
  when listed there. GPU pods normally request CPU and memory in proportion to their share of
  the node's GPUs, and then the CPU/memory score is the node's free GPU share after the pod:
  that is the score used here, counted in SM slices (a whole GPU is 7, a MIG instance its
  slices), so both pod kinds spread by the node's free GPU capacity, and a half-empty 4-GPU
  node ranks with a half-empty 8-GPU one. The other default score plugins (TaintToleration 3,
  NodeAffinity 2, PodTopologySpread 2, InterPodAffinity 2, NodeResourcesBalancedAllocation 1,
  ImageLocality 1) add the same amount to every candidate here: no taints, preferred
  affinities or images that differ by node, and CPU/memory stay in balance when requested in
  proportion to GPUs. The highest score wins; among equal scores kube-scheduler picks one at
  random (`selectHost`), and so does this model, from a seeded generator (`seed`), so a run is
  reproducible and the order nodes are listed in gives no type an advantage.
* **Simplification.** Every feasible node is scored: on clusters of 100 nodes or more
  kube-scheduler stops filtering once it has found `percentageOfNodesToScore` of them feasible
  (by default 50 % minus 1 % per 125 nodes, at least 5 % and at least 100 nodes), starting
  where its last search stopped, so there it takes the best of a rotating sample. Within a node
  the lowest free GPUs, or the first free instance of the profile, are used (the device plugin
  chooses there, which changes nothing this model measures).

* **No preemption.** kube-scheduler's DefaultPreemption (PostFilter) evicts lower-priority pods
  for a pod that fits nowhere; this model never preempts. That leaves the simulator's replays
  unaffected (every trace job has one priority) but makes the baseline weaker than the real
  scheduler in the placement benchmark, whose gangs have priorities 0-3.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence

from gpufleet.core.decision import Decision, GangPlacement, SolveStats
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.gpus import SM_SLICES

__all__ = ["KubeLikePolicy", "partial_placements"]

# A run of tied candidates: the first `end` (held, node) entries of a list.
_Run = tuple[list[tuple[int, int]], int]


class _Spread:
    """Free capacity as the LeastAllocated score sees it, over the core's ledger.

    Held capacity per node is counted in SM slices (a whole GPU is 7). Schedulable nodes are
    grouped by (GPU type, capacity, any GPU in MIG mode) and kept sorted by (held, index) in
    each group. In a group without MIG-mode GPUs both the score and the room for whole GPUs
    only fall as `held` grows, so the nodes that fit a pod with the group's best score are a
    prefix of the group, found by bisection instead of a scan; groups with MIG-mode GPUs (few)
    are scanned.
    """

    def __init__(self, state: ClusterState, rng: random.Random) -> None:
        self.state = state
        self.rng = rng
        catalog = state.catalog
        self.capacity = [n.gpu_count * SM_SLICES for n in state.nodes]
        self.held: list[int] = []
        self.has_mig: list[bool] = []
        for n, node in enumerate(state.nodes):
            gpu = catalog[node.gpu_type]
            slices = SM_SLICES * sum(state.busy[n])
            for used in state.used_inst[n]:
                slices += sum(gpu.mig_profile(inst.profile).sm_slices for inst in used)
            self.held.append(slices)
            self.has_mig.append(any(layout is not None for layout in state.layout[n]))
        self.groups: dict[tuple[str, int, bool], list[tuple[int, int]]] = {}
        for gpu_type, members in state.nodes_by_type.items():
            for n in members:
                key = (gpu_type, self.capacity[n], self.has_mig[n])
                self.groups.setdefault(key, []).append((self.held[n], n))
        for group in self.groups.values():
            group.sort()

    def _score(self, n: int, request: int) -> int:
        """LeastAllocated after the pod, as kube-scheduler computes it: an integer 0-100."""
        capacity = self.capacity[n]
        return (capacity - self.held[n] - request) * 100 // capacity

    def _pick(self, ties: list[_Run]) -> int:
        """One of the tied best nodes, uniformly at random (kube-scheduler's selectHost)."""
        r = self.rng.randrange(sum(end for _entries, end in ties))
        for entries, end in ties:
            if r < end:
                return entries[r][1]
            r -= end
        raise AssertionError("unreachable")

    def _hold(self, n: int, request: int) -> None:
        group = self.groups[(self.state.node_type[n], self.capacity[n], self.has_mig[n])]
        del group[bisect.bisect_left(group, (self.held[n], n))]
        self.held[n] += request
        bisect.insort(group, (self.held[n], n))

    def _whole_candidates(
        self, key: tuple[str, int, bool], group: list[tuple[int, int]], gpus: int
    ) -> tuple[int, _Run]:
        """The best score a `gpus`-GPU pod gets in one group, and the nodes that get it."""
        request = gpus * SM_SLICES
        _type, capacity, mig = key
        if not mig:
            if not group or capacity - group[0][0] < request:
                return -1, (group, 0)
            best = self._score(group[0][1], request)
            # Every node holding at most this much scores `best` and has room (see class doc).
            most = capacity - request - (best * capacity + 99) // 100
            return best, (group, bisect.bisect_right(group, (most, len(self.capacity))))
        best = -1
        tied: list[tuple[int, int]] = []
        for held, n in group:
            if len(self.state.whole_mode_gpus(n)) < gpus:
                continue
            score = self._score(n, request)
            if score > best:
                best, tied = score, []
            if score == best:
                tied.append((held, n))
        return best, (tied, len(tied))

    def whole_pod(self, types: Sequence[str], gpus: int) -> ReplicaPlacement | None:
        """Bind one pod asking for `gpus` whole GPUs on a best node, or None if none fits."""
        best = -1
        ties: list[_Run] = []
        for key, group in self.groups.items():
            if key[0] not in types:
                continue
            score, run = self._whole_candidates(key, group, gpus)
            if run[1] == 0 or score < best:
                continue
            if score > best:
                best, ties = score, []
            ties.append(run)
        if not ties:
            return None
        n = self._pick(ties)
        chosen = tuple(self.state.whole_mode_gpus(n)[:gpus])
        self.state.take_whole(n, chosen)
        self._hold(n, gpus * SM_SLICES)
        return ReplicaPlacement(self.state.nodes[n].name, chosen)

    def slice_pod(self, types: Sequence[str], profile: str) -> ReplicaPlacement | None:
        """Bind one pod asking for a `profile` instance on a best node, or None."""
        best, request = -1, 0
        tied: list[tuple[int, int]] = []
        for gpu_type in types:
            gpu = self.state.catalog[gpu_type]
            if not gpu.has_mig_profile(profile):
                continue
            slices = gpu.mig_profile(profile).sm_slices
            nodes = sorted(
                {n for _tier, n, _g, _start in self.state.free_instances(gpu_type, profile)}
            )
            for n in nodes:
                score = self._score(n, slices)
                if score > best:
                    best, tied, request = score, [], slices
                if score == best:
                    tied.append((self.held[n], n))
        if not tied:
            return None
        n = self._pick([(tied, len(tied))])
        g, inst = self.state.node_instances(n, profile)[0]
        self.state.take_instance(n, g, inst)
        self._hold(n, request)
        return ReplicaPlacement(self.state.nodes[n].name, (g,), inst)


class KubeLikePolicy:
    """kube-scheduler's defaults for GPU pods: pod by pod, LeastAllocated, no gangs, MIG as is.

    `seed` drives the choice among equally scored nodes; one instance keeps its random stream
    across the decisions of a simulation, so a run is reproducible.
    """

    name = "kube"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        state = ClusterState(snapshot)
        spread = _Spread(state, self._rng)
        placements: list[GangPlacement] = []
        # PrioritySort: higher priority first, then the order of arrival (a stable sort).
        for gang in sorted(pending, key=lambda g: -g.priority):
            types = [t for t in gang.type_names() if t in state.nodes_by_type]
            replicas: list[ReplicaPlacement] = []
            for _ in range(gang.replicas_max):  # every pod of the job exists and is scheduled
                if gang.mig_profile is None:
                    pod = spread.whole_pod(types, gang.gpus_per_replica)
                else:
                    pod = spread.slice_pod(types, gang.mig_profile)
                if pod is None:
                    break  # the remaining pods of this gang are identical: none fits
                replicas.append(pod)
            if replicas:
                first_type = snapshot.node(replicas[0].node).gpu_type
                placements.append(GangPlacement(gang.id, first_type, tuple(replicas)))
        return Decision(placements=tuple(placements), stats=SolveStats("kube-like", "HEURISTIC"))


def partial_placements(decision: Decision, pending: Sequence[Gang]) -> list[GangPlacement]:
    """The placements holding fewer pods than their gang's minimum: bound pods that wait for
    the rest of their gang and do no work meanwhile (only a pod-by-pod policy makes these)."""
    low = {g.id: g.replicas_min for g in pending}
    return [p for p in decision.placements if p.replica_count < low[p.gang_id]]
