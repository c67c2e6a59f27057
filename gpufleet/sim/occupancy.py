"""The simulated fleet's occupancy: its nodes and MIG layouts, and which gang holds which GPU.

The inventory is built from core model types (`gpufleet.model.inventory.Node`), so the snapshot the
engine hands to a policy is exactly what the live scheduler would build. Free capacity is the
core's ledger (`gpufleet.core.state.ClusterState`), kept for the whole run; on top of it this
module records the owner of each whole GPU and MIG instance and running GPU-share totals, so
that accounting stays O(changes).

Initial MIG layouts come from the pool's `mig.config` name:

* `all-disabled` (or no `mig:` block): MIG off;
* `all-enabled`: MIG on with no instances (the scheduler cuts slices on demand);
* `all-<profile>`: as many instances of `<profile>` as fit (the model's `densest_layout`);
* `all-balanced`: one 3g, one 2g and two 1g instances (the mig-parted `all-balanced` shape in the
  project's GPU reference §4).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import SM_SLICES, Catalog, GpuType
from gpufleet.model.inventory import Gpu, Node
from gpufleet.model.mig import (
    MigLayout,
    MigPlacement,
    densest_layout,
    enumerate_layouts,
    is_valid_layout,
    profile_counts,
)

__all__ = ["ClusterError", "SimCluster", "initial_layout", "slice_share"]


class ClusterError(RuntimeError):
    """A decision asked for something the cluster cannot do (a policy bug, never silent)."""


def _layout_with(gpu: GpuType, names: Iterable[str]) -> MigLayout:
    """The first valid layout (in the model's stable order) holding exactly `names`."""
    wanted = Counter(names)
    for layout in enumerate_layouts(gpu, profiles=set(wanted)):
        if profile_counts(layout) == wanted:
            return layout
    raise ValueError(f"{gpu.name}: no valid MIG layout holds {dict(wanted)}")


def initial_layout(gpu: GpuType, config: str) -> MigLayout | None:
    """The layout a pool's `mig.config` name gives one GPU of type `gpu` (see module docstring)."""
    if config == "all-disabled":
        return None
    if not gpu.mig_capable:
        raise ValueError(f"MIG config {config!r} on {gpu.name}, which does not support MIG")
    if config == "all-enabled":
        return ()
    if config == "all-balanced":
        by_sm = {
            p.sm_slices: p.name
            for p in reversed(gpu.mig_profiles)
            if "+me" not in p.name and p.sm_slices in (1, 2, 3)
        }
        # Smallest memory variant per SM size: iterate reversed so the first listed wins.
        return _layout_with(gpu, [by_sm[3], by_sm[2], by_sm[1], by_sm[1]])
    if config.startswith("all-"):
        return densest_layout(gpu, config.removeprefix("all-"))
    raise ValueError(f"unknown MIG config {config!r}")


def slice_share(gpu: GpuType, placement: MigPlacement) -> float:
    """Share of a GPU's compute held by one MIG instance (SM slices / 7)."""
    return gpu.mig_profile(placement.profile).sm_slices / SM_SLICES


@dataclass(slots=True)
class _Holding:
    """GPUs held by one gang, and the running gangs it shows the core (one per GPU type)."""

    gang: RunningGang
    parts: tuple[RunningGang, ...]
    share_by_node: dict[str, float]


class SimCluster:
    """Nodes, MIG layouts and occupancy of a simulated fleet.

    Which GPUs and instances are free is the core's ledger (`ClusterState`), built once for the
    fleet and updated as gangs come and go; this class adds who holds what (for the power model)
    and the GPU share held per node (for utilisation and power-down).
    """

    def __init__(self, fleet: FleetSpec, catalog: Catalog) -> None:
        self.catalog = catalog
        self._nodes: dict[str, Node] = {}
        self.pool_of: dict[str, NodePoolSpec] = {}
        for pool in fleet.node_pools:
            gpu_type = catalog[pool.gpu_type]
            layout = initial_layout(gpu_type, pool.mig.config) if pool.mig else None
            for name in pool.node_names():
                gpus = tuple(
                    Gpu(index=i, nvlink_domain=i // pool.domain_size, mig_layout=layout)
                    for i in range(pool.gpus_per_node)
                )
                self._nodes[name] = Node(name=name, gpu_type=pool.gpu_type, gpus=gpus)
                self.pool_of[name] = pool
        self.total_gpus = float(sum(n.gpu_count for n in self._nodes.values()))
        self._ledger = ClusterState(Snapshot(catalog, tuple(self._nodes.values())))
        # (node, gpu) -> gang id for whole GPUs; (node, gpu, instance) -> gang id for MIG.
        self._gpu_owner: dict[tuple[str, int], str] = {}
        self._mig_owner: dict[tuple[str, int, MigPlacement], str] = {}
        self._holdings: dict[str, _Holding] = {}
        self.node_share: dict[str, float] = dict.fromkeys(self._nodes, 0.0)
        self.allocated_share = 0.0
        self._snapshot: Snapshot | None = None

    # ----- inventory -------------------------------------------------------------------------

    @property
    def nodes(self) -> Mapping[str, Node]:
        """Nodes by name (read-only view)."""
        return self._nodes

    def gpu_type_of(self, node: str) -> GpuType:
        """The catalogue entry of a node's GPUs."""
        return self.catalog[self._nodes[node].gpu_type]

    def snapshot(self) -> Snapshot:
        """The core snapshot of the current state (cached until the next change)."""
        if self._snapshot is None:
            self._snapshot = Snapshot(
                self.catalog,
                tuple(self._nodes.values()),
                tuple(part for h in self._holdings.values() for part in h.parts),
            )
        return self._snapshot

    def free_share(self) -> float:
        """Unallocated GPU capacity, in GPUs (a free MIG instance counts its compute share)."""
        return self.total_gpus - self.allocated_share

    def idle_gpus(self) -> dict[str, int]:
        """GPUs with nothing allocated on them (no whole-GPU replica, no MIG instance), per
        node."""
        return {n.name: len(self._ledger.free_gpus(i)) for i, n in enumerate(self._ledger.nodes)}

    def is_empty(self, node: str) -> bool:
        """True when no gang holds anything on `node`."""
        return self.node_share[node] <= 1e-9

    # ----- changes ---------------------------------------------------------------------------

    def _replica_share(self, gpu_type: GpuType, replica: ReplicaPlacement) -> float:
        if replica.mig is not None:
            return slice_share(gpu_type, replica.mig)
        return float(len(replica.gpus))

    def _parts(self, gang: RunningGang) -> tuple[RunningGang, ...]:
        """The gang as the core sees it: one running gang per GPU type its replicas sit on.

        Only a pod-by-pod policy (kube-like) spreads one gang over several types; the parts are
        then named `<id>#<type>` (as the live scheduler names them), and a part on another type
        than the gang's carries the catalogue's speed for it.
        """
        by_type: dict[str, list[ReplicaPlacement]] = {}
        for rep in gang.replicas:
            by_type.setdefault(self._nodes[rep.node].gpu_type, []).append(rep)
        if list(by_type) == [gang.gpu_type]:
            return (gang,)
        return tuple(
            RunningGang(
                id=f"{gang.id}#{gpu_type}",
                gpu_type=gpu_type,
                replicas=tuple(reps),
                priority=gang.priority,
                preemptible=gang.preemptible,
                relative_throughput=(
                    gang.relative_throughput if gpu_type == gang.gpu_type else None
                ),
                queue=gang.queue,
            )
            for gpu_type, reps in by_type.items()
        )

    def hold(self, gang: RunningGang) -> set[str]:
        """Record that `gang` holds its replicas' GPUs (replacing any earlier holding of it).

        Raises `ClusterError` on a double booking, an unknown node or a missing MIG instance.
        Returns the nodes whose occupancy changed.
        """
        touched = self.release(gang.id) if gang.id in self._holdings else set()
        held: list[ReplicaPlacement] = []
        try:
            for rep in gang.replicas:
                self._ledger.hold(rep)
                held.append(rep)
        except ValueError as exc:
            for rep in held:
                self._ledger.release(rep)
            raise ClusterError(f"{gang.id}: {exc}") from None
        share_by_node: dict[str, float] = {}
        for rep in gang.replicas:
            for ix in rep.gpus:
                if rep.mig is None:
                    self._gpu_owner[(rep.node, ix)] = gang.id
                else:
                    self._mig_owner[(rep.node, ix, rep.mig)] = gang.id
            share = self._replica_share(self.gpu_type_of(rep.node), rep)
            share_by_node[rep.node] = share_by_node.get(rep.node, 0.0) + share
        self._holdings[gang.id] = _Holding(gang, self._parts(gang), share_by_node)
        for node_name, share in share_by_node.items():
            self.node_share[node_name] += share
            self.allocated_share += share
        self._snapshot = None
        return touched | set(share_by_node)

    def release(self, gang_id: str) -> set[str]:
        """Free everything `gang_id` holds; returns the nodes whose occupancy changed."""
        holding = self._holdings.pop(gang_id, None)
        if holding is None:
            return set()
        for rep in holding.gang.replicas:
            self._ledger.release(rep)
            for ix in rep.gpus:
                if rep.mig is None:
                    self._gpu_owner.pop((rep.node, ix), None)
                else:
                    self._mig_owner.pop((rep.node, ix, rep.mig), None)
        for node_name, share in holding.share_by_node.items():
            self.node_share[node_name] = max(0.0, self.node_share[node_name] - share)
            self.allocated_share -= share
        self.allocated_share = max(0.0, self.allocated_share)
        self._snapshot = None
        return set(holding.share_by_node)

    def repartition(self, node_name: str, gpu: int, new_layout: MigLayout | None) -> None:
        """Change one GPU's MIG layout; only a GPU with nothing allocated may change."""
        node = self._nodes.get(node_name)
        if node is None or not 0 <= gpu < node.gpu_count:
            raise ClusterError(f"repartition of unknown GPU {node_name}/{gpu}")
        gpu_type = self.catalog[node.gpu_type]
        if new_layout is not None and not is_valid_layout(gpu_type, new_layout):
            raise ClusterError(f"invalid MIG layout for {node_name}/{gpu}: {new_layout}")
        try:
            self._ledger.repartition(self._ledger.node_index[node_name], gpu, new_layout)
        except ValueError:
            raise ClusterError(f"repartition of busy GPU {node_name}/{gpu}") from None
        gpus = list(node.gpus)
        gpus[gpu] = Gpu(index=gpu, nvlink_domain=gpus[gpu].nvlink_domain, mig_layout=new_layout)
        self._nodes[node_name] = Node(
            name=node.name, gpu_type=node.gpu_type, gpus=tuple(gpus), schedulable=node.schedulable
        )
        self._snapshot = None

    def mig_owner(self, node_name: str, gpu: int, instance: MigPlacement) -> str | None:
        """Gang holding one MIG instance, if any."""
        return self._mig_owner.get((node_name, gpu, instance))

    def gpu_owner(self, node_name: str, gpu: int) -> str | None:
        """Gang holding a whole (non-MIG) GPU, if any."""
        return self._gpu_owner.get((node_name, gpu))
