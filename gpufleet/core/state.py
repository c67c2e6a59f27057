"""The free-capacity ledger: which GPUs and MIG instances of a set of nodes are free right now.

A `ClusterState` is built from a `Snapshot` and owned by whoever built it, so the core keeps no
global mutable state. It is gpufleet's one account of free capacity: `place()` builds one per
decision, the scheduler adapter one per node to place the pods it finds bound, the simulator one
per run for its fleet's occupancy, and the baselines one per decision. It indexes free capacity
(nodes bucketed by empty-GPU count, free MIG instances per type and profile) so best-fit queries
stay fast on thousands of nodes, and it records the MIG repartitions its updates imply.

Two ways to use GPUs: `take_whole`/`take_instance`/`repartition` are the placement engine's
moves (an empty MIG-mode GPU given whole is switched back to whole mode); `hold` records a replica
exactly where it says it runs and refuses anything else, for replicas placed by someone else.
"""

from __future__ import annotations

import bisect
import copy
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.model.mig import MigLayout, MigPlacement

if TYPE_CHECKING:
    from gpufleet.core.admission import QueueGate

# Key of a free MIG instance in the per-(type, profile) index. Tier 0 = its GPU already runs other
# slices (use these first: no repartition, keeps empty GPUs whole); tier 1 = its GPU is empty.
InstanceKey = tuple[int, int, int, int]  # (tier, node, gpu, start)


class ClusterState:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.catalog = snapshot.catalog
        self.nodes = snapshot.nodes
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.node_type = [n.gpu_type for n in self.nodes]
        self.schedulable = [n.schedulable for n in self.nodes]
        self.domain_of = [[g.nvlink_domain for g in n.gpus] for n in self.nodes]
        self.layout: list[list[MigLayout | None]] = [
            [g.mig_layout for g in n.gpus] for n in self.nodes
        ]
        self.busy = [[False] * n.gpu_count for n in self.nodes]  # whole-GPU use
        self.used_inst: list[list[set[MigPlacement]]] = [
            [set() for _ in n.gpus] for n in self.nodes
        ]
        self.initial_layout = [list(row) for row in self.layout]
        # Node idle at the start of the decision: no GPU in use (candidates for power-down).
        self.initially_idle = [True] * len(self.nodes)
        self.repartitioned: set[tuple[int, int]] = set()
        # Queue accounting of this state (admission.py); None when the snapshot has no queues.
        self.gate: QueueGate | None = None
        # Snapshot's running gangs per node name (`running_on`), built on first use.
        self._running_on: dict[str, list[RunningGang]] | None = None
        for gang in snapshot.running:
            for replica in gang.replicas:
                at = self.node_index.get(replica.node)
                if at is not None and self.node_type[at] != gang.gpu_type:
                    raise ValueError(
                        f"running gang {gang.id}: {replica.node} has {self.node_type[at]} GPUs, "
                        f"not {gang.gpu_type}"
                    )
                self._apply_running(gang.id, replica)
        self.empty: list[set[int]] = [
            {g for g in range(n.gpu_count) if self._is_empty(i, g)}
            for i, n in enumerate(self.nodes)
        ]
        # type -> bucket[k] = sorted schedulable node indices with exactly k empty GPUs.
        self.buckets: dict[str, list[list[int]]] = {}
        self.nodes_by_type: dict[str, list[int]] = {}  # schedulable nodes per type
        self.max_domain_size: dict[str, int] = {}  # largest NVLink domain per type
        self.max_node_size: dict[str, int] = {}  # most GPUs on one schedulable node, per type
        size = max((n.gpu_count for n in self.nodes), default=0) + 1
        for i, node in enumerate(self.nodes):
            per_type = self.buckets.setdefault(node.gpu_type, [[] for _ in range(size)])
            if not node.schedulable:
                continue
            per_type[len(self.empty[i])].append(i)
            self.nodes_by_type.setdefault(node.gpu_type, []).append(i)
            most = self.max_node_size.get(node.gpu_type, 0)
            self.max_node_size[node.gpu_type] = max(most, node.gpu_count)
            largest = max(Counter(self.domain_of[i]).values(), default=0)
            known = self.max_domain_size.get(node.gpu_type, 0)
            self.max_domain_size[node.gpu_type] = max(known, largest)
        self.instances: dict[tuple[str, str], list[InstanceKey]] = {}
        for i, node in enumerate(self.nodes):
            if not node.schedulable:
                continue
            for g in range(node.gpu_count):
                self._index_instances(i, g)

    def copy(self) -> ClusterState:
        """An independent copy (cheaper than rebuilding from the snapshot)."""
        twin = copy.copy(self)
        twin.layout = [list(row) for row in self.layout]
        twin.busy = [list(row) for row in self.busy]
        twin.used_inst = [[set(s) for s in row] for row in self.used_inst]
        twin.empty = [set(s) for s in self.empty]
        twin.buckets = {t: [list(b) for b in rows] for t, rows in self.buckets.items()}
        twin.instances = {k: list(v) for k, v in self.instances.items()}
        twin.repartitioned = set(self.repartitioned)
        twin.gate = None if self.gate is None else self.gate.copy()
        return twin

    # --- construction helpers -------------------------------------------------------------

    def _apply_running(self, gang_id: str, replica: ReplicaPlacement) -> None:
        n = self.node_index.get(replica.node)
        if n is None:
            raise ValueError(f"running gang {gang_id}: unknown node {replica.node}")
        problem = self._hold_problem(n, replica)
        if problem is not None:
            raise ValueError(f"running gang {gang_id}: {problem}")
        self.initially_idle[n] = False
        for g in replica.gpus:
            if replica.mig is None:
                self.busy[n][g] = True
            else:
                self.used_inst[n][g].add(replica.mig)

    def _hold_problem(self, n: int, replica: ReplicaPlacement) -> str | None:
        """Why `replica` cannot hold what it names on node n right now, or None."""
        name = replica.node
        if replica.mig is not None:
            g = replica.gpus[0]
            if not 0 <= g < len(self.busy[n]):
                return f"{name} has no GPU {g}"
            layout = self.layout[n][g]
            if layout is None or replica.mig not in layout:
                return f"{name}/{g} has no instance {replica.mig}"
            if replica.mig in self.used_inst[n][g]:
                return f"{replica.mig} on {name}/{g} is taken"
            return None
        if len(set(replica.gpus)) != len(replica.gpus):
            return f"GPUs {replica.gpus} of {name} are listed twice"
        for g in replica.gpus:
            if not 0 <= g < len(self.busy[n]):
                return f"{name} has no GPU {g}"
            if self.layout[n][g] is not None:
                return f"GPU {name}/{g} is in MIG mode"
            if self.busy[n][g]:
                return f"GPU {name}/{g} is taken"
        return None

    def _is_empty(self, n: int, g: int) -> bool:
        return not self.busy[n][g] and not self.used_inst[n][g]

    def _tier(self, n: int, g: int) -> int:
        return 1 if g in self.empty[n] else 0

    def _index_instances(self, n: int, g: int) -> None:
        layout = self.layout[n][g]
        if layout is None or self.busy[n][g]:
            return
        tier = self._tier(n, g)
        for inst in layout:
            if inst not in self.used_inst[n][g]:
                key = (self.node_type[n], inst.profile)
                bisect.insort(self.instances.setdefault(key, []), (tier, n, g, inst.start))

    def _unindex_instances(self, n: int, g: int, tier: int) -> None:
        layout = self.layout[n][g]
        if layout is None:
            return
        for inst in layout:
            if inst in self.used_inst[n][g]:
                continue
            keys = self.instances.get((self.node_type[n], inst.profile), [])
            pos = bisect.bisect_left(keys, (tier, n, g, inst.start))
            if pos < len(keys) and keys[pos] == (tier, n, g, inst.start):
                keys.pop(pos)

    def _move_bucket(self, n: int, old: int, new: int) -> None:
        if not self.schedulable[n] or old == new:
            return
        buckets = self.buckets[self.node_type[n]]
        row = buckets[old]
        pos = bisect.bisect_left(row, n)
        if pos < len(row) and row[pos] == n:
            row.pop(pos)
        bisect.insort(buckets[new], n)

    def _set_layout(self, n: int, g: int, layout: MigLayout | None) -> None:
        self.layout[n][g] = layout
        if layout != self.initial_layout[n][g]:
            self.repartitioned.add((n, g))
        else:
            self.repartitioned.discard((n, g))

    # --- updates ----------------------------------------------------------------------------

    def take_whole(self, n: int, gpus: Iterable[int]) -> None:
        """Give whole GPUs to a replica; an empty MIG-mode GPU is switched back to whole."""
        before = len(self.empty[n])
        for g in gpus:
            if g not in self.empty[n]:
                raise ValueError(f"GPU {self.nodes[n].name}/{g} is not free")
            self._unindex_instances(n, g, tier=1)
            if self.layout[n][g] is not None:
                self._set_layout(n, g, None)
            self.busy[n][g] = True
            self.empty[n].discard(g)
        self._move_bucket(n, before, len(self.empty[n]))

    def take_instance(self, n: int, g: int, inst: MigPlacement) -> None:
        """Give one free MIG instance to a replica."""
        layout = self.layout[n][g]
        if layout is None or inst not in layout or inst in self.used_inst[n][g]:
            raise ValueError(f"{inst} on {self.nodes[n].name}/{g} is not free")
        tier = self._tier(n, g)
        self._unindex_instances(n, g, tier)
        self.used_inst[n][g].add(inst)
        if tier == 1:
            self.empty[n].discard(g)
            self._move_bucket(n, len(self.empty[n]) + 1, len(self.empty[n]))
        if self.schedulable[n]:
            self._index_instances(n, g)

    def hold(self, replica: ReplicaPlacement) -> None:
        """Record a replica exactly where it says it runs: whole GPUs that are in whole mode and
        free, or one free instance of the GPU's layout. Unlike `take_whole`, never switches a
        MIG-mode GPU. Raises ValueError naming the problem (unknown node or GPU, MIG mode, taken).
        """
        n = self.node_index.get(replica.node)
        if n is None:
            raise ValueError(f"unknown node {replica.node}")
        problem = self._hold_problem(n, replica)
        if problem is not None:
            raise ValueError(problem)
        if replica.mig is None:
            self.take_whole(n, replica.gpus)
        else:
            self.take_instance(n, replica.gpus[0], replica.mig)

    def repartition(self, n: int, g: int, layout: MigLayout | None) -> None:
        """Give an empty GPU a new MIG layout, or whole mode with None (only empty GPUs may be
        repartitioned)."""
        if g not in self.empty[n]:
            raise ValueError(f"GPU {self.nodes[n].name}/{g} is not empty; cannot repartition")
        self._unindex_instances(n, g, tier=1)
        self._set_layout(n, g, layout)
        if self.schedulable[n]:
            self._index_instances(n, g)

    def release(self, replica: ReplicaPlacement) -> None:
        """Free a running replica's GPUs or instance (a preemption what-if)."""
        n = self.node_index[replica.node]
        before = len(self.empty[n])
        for g in replica.gpus:
            if replica.mig is None:
                self.busy[n][g] = False
                self.empty[n].add(g)
            else:
                self._unindex_instances(n, g, self._tier(n, g))
                self.used_inst[n][g].discard(replica.mig)
                if not self.used_inst[n][g]:
                    self.empty[n].add(g)
                if self.schedulable[n]:
                    self._index_instances(n, g)
        self._move_bucket(n, before, len(self.empty[n]))

    # --- queries ----------------------------------------------------------------------------

    def running_on(self, name: str) -> list[RunningGang]:
        """The snapshot's running gangs with a replica on node `name`, in snapshot order (what
        the snapshot says, whatever this state has released or taken since). The index is built
        once and shared by copies, the snapshot being the same."""
        if self._running_on is None:
            index: dict[str, list[RunningGang]] = {}
            for gang in self.snapshot.running:
                for node in dict.fromkeys(r.node for r in gang.replicas):
                    index.setdefault(node, []).append(gang)
            self._running_on = index
        return self._running_on.get(name, [])

    def whole_mode_free_after(self, n: int, replicas: Iterable[ReplicaPlacement]) -> int:
        """How many GPUs `whole_mode_gpus(n)` would list had `replicas` been released in turn
        (`release`), the state left as it is: a release changes only its own node's GPUs, so
        this reads node n alone instead of releasing on a copy of the whole state."""
        name = self.nodes[n].name
        empty = set(self.empty[n])
        used = [set(s) for s in self.used_inst[n]]
        for replica in replicas:
            if replica.node != name:
                continue
            for g in replica.gpus:
                if replica.mig is None:
                    empty.add(g)
                else:
                    used[g].discard(replica.mig)
                    if not used[g]:
                        empty.add(g)
        layout = self.layout[n]
        return sum(1 for g in empty if layout[g] is None)

    def type_nodes(self, gpu_type: str) -> list[list[int]]:
        """Buckets of schedulable nodes of a type by empty-GPU count (empty list if none)."""
        return self.buckets.get(gpu_type, [])

    def free_gpus(self, n: int, taken: frozenset[int] | set[int] = frozenset()) -> list[int]:
        return sorted(self.empty[n] - taken)

    def whole_mode_gpus(self, n: int) -> list[int]:
        """Empty GPUs of node n in whole mode (no MIG layout), lowest index first."""
        layout = self.layout[n]
        return sorted(g for g in self.empty[n] if layout[g] is None)

    def node_instances(self, n: int, profile: str) -> list[tuple[int, MigPlacement]]:
        """Free instances of `profile` on node n as (GPU, instance), by GPU then layout order.

        Unlike `free_instances`, this reads the node directly, so it also answers for nodes
        that are not schedulable (which the type-wide index leaves out).
        """
        out: list[tuple[int, MigPlacement]] = []
        for g, layout in enumerate(self.layout[n]):
            if layout is None:
                continue
            used = self.used_inst[n][g]
            out.extend((g, inst) for inst in layout if inst.profile == profile and inst not in used)
        return out

    def pick_gpus(
        self, n: int, count: int, nvlink: bool, taken: frozenset[int] | set[int] = frozenset()
    ) -> tuple[int, ...] | None:
        """Choose `count` empty GPUs of node n, or None.

        Whole-mode GPUs go before empty MIG-mode ones (avoids a mode flip), the tightest NVLink
        domain that fits goes first (keeps big domains whole); with `nvlink` the GPUs must all
        sit in one domain.
        """
        by_domain: dict[int, list[int]] = {}
        for g in sorted(self.empty[n] - taken):
            by_domain.setdefault(self.domain_of[n][g], []).append(g)
        if sum(len(v) for v in by_domain.values()) < count:
            return None

        def order(gpus: list[int]) -> list[int]:
            return sorted(gpus, key=lambda g: (self.layout[n][g] is not None, g))

        fitting = sorted((len(v), d) for d, v in by_domain.items() if len(v) >= count)
        if fitting:
            return tuple(sorted(order(by_domain[fitting[0][1]])[:count]))
        if nvlink:
            return None
        chosen: list[int] = []
        for _, d in sorted(((-len(v), d) for d, v in by_domain.items())):
            chosen.extend(order(by_domain[d])[: count - len(chosen)])
            if len(chosen) == count:
                break
        return tuple(sorted(chosen))

    def max_domain_free(self, n: int, taken: frozenset[int] | set[int] = frozenset()) -> int:
        counts: dict[int, int] = {}
        for g in self.empty[n] - taken:
            d = self.domain_of[n][g]
            counts[d] = counts.get(d, 0) + 1
        return max(counts.values(), default=0)

    def free_instances(self, gpu_type: str, profile: str) -> list[InstanceKey]:
        return self.instances.get((gpu_type, profile), [])

    def repartitions(self) -> list[tuple[int, int, MigLayout | None, MigLayout | None]]:
        """(node, gpu, old, new) for every GPU whose layout differs from the snapshot."""
        return [
            (n, g, self.initial_layout[n][g], self.layout[n][g])
            for n, g in sorted(self.repartitioned)
        ]
