"""The simulator's in-memory cluster: inventory from a fleet YAML plus who holds which GPU.

The inventory is built from core model types (`gpufleet.model.cluster.Node`), so the snapshot the
engine hands to a policy is exactly what the live scheduler would build. Occupancy is tracked here
per whole GPU and per MIG instance, with running totals so that accounting stays O(changes).

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
from gpufleet.model.cluster import Gpu, Node
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import SM_SLICES, Catalog, GpuType
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
    """GPUs held by one gang."""

    gang: RunningGang
    share_by_node: dict[str, float]


class SimCluster:
    """Nodes, MIG layouts and occupancy of a simulated fleet."""

    def __init__(self, fleet: FleetSpec, catalog: Catalog) -> None:
        self.catalog = catalog
        self.fleet = fleet
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
                tuple(h.gang for h in self._holdings.values()),
            )
        return self._snapshot

    def free_share(self) -> float:
        """Unallocated GPU capacity, in GPUs (a free MIG instance counts its compute share)."""
        return self.total_gpus - self.allocated_share

    def is_empty(self, node: str) -> bool:
        """True when no gang holds anything on `node`."""
        return self.node_share[node] <= 1e-9

    # ----- changes ---------------------------------------------------------------------------

    def _replica_share(self, gpu_type: GpuType, replica: ReplicaPlacement) -> float:
        if replica.mig is not None:
            return slice_share(gpu_type, replica.mig)
        return float(len(replica.gpus))

    def hold(self, gang: RunningGang) -> set[str]:
        """Record that `gang` holds its replicas' GPUs (replacing any earlier holding of it).

        Raises `ClusterError` on a double booking, an unknown node or a missing MIG instance.
        Returns the nodes whose occupancy changed.
        """
        touched = self.release(gang.id) if gang.id in self._holdings else set()
        share_by_node: dict[str, float] = {}
        claimed: list[tuple[str, int] | tuple[str, int, MigPlacement]] = []
        try:
            for rep in gang.replicas:
                node = self._nodes.get(rep.node)
                if node is None:
                    raise ClusterError(f"{gang.id}: unknown node {rep.node}")
                gpu_type = self.catalog[node.gpu_type]
                for ix in rep.gpus:
                    if not 0 <= ix < node.gpu_count:
                        raise ClusterError(f"{gang.id}: {rep.node} has no GPU {ix}")
                    layout = node.gpus[ix].mig_layout
                    if rep.mig is None:
                        if layout is not None:
                            raise ClusterError(f"{gang.id}: {rep.node}/{ix} is in MIG mode")
                        if (rep.node, ix) in self._gpu_owner:
                            raise ClusterError(f"{gang.id}: {rep.node}/{ix} is already held")
                        self._gpu_owner[(rep.node, ix)] = gang.id
                        claimed.append((rep.node, ix))
                    else:
                        if layout is None or rep.mig not in layout:
                            raise ClusterError(f"{gang.id}: {rep.node}/{ix} has no {rep.mig}")
                        key = (rep.node, ix, rep.mig)
                        if key in self._mig_owner:
                            raise ClusterError(f"{gang.id}: {rep.node}/{ix} {rep.mig} is held")
                        self._mig_owner[key] = gang.id
                        claimed.append(key)
                share = self._replica_share(gpu_type, rep)
                share_by_node[rep.node] = share_by_node.get(rep.node, 0.0) + share
        except ClusterError:
            for claim in claimed:
                if len(claim) == 2:
                    self._gpu_owner.pop((claim[0], claim[1]))
                else:
                    self._mig_owner.pop((claim[0], claim[1], claim[2]))
            raise
        self._holdings[gang.id] = _Holding(gang, share_by_node)
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

    def holding(self, gang_id: str) -> RunningGang | None:
        """The running-gang record of `gang_id`, if it holds GPUs."""
        h = self._holdings.get(gang_id)
        return None if h is None else h.gang

    def repartition(self, node_name: str, gpu: int, new_layout: MigLayout | None) -> None:
        """Change one GPU's MIG layout; only a GPU with nothing allocated may change."""
        node = self._nodes.get(node_name)
        if node is None or not 0 <= gpu < node.gpu_count:
            raise ClusterError(f"repartition of unknown GPU {node_name}/{gpu}")
        if (node_name, gpu) in self._gpu_owner or any(
            k[0] == node_name and k[1] == gpu for k in self._mig_owner
        ):
            raise ClusterError(f"repartition of busy GPU {node_name}/{gpu}")
        gpu_type = self.catalog[node.gpu_type]
        if new_layout is not None and not is_valid_layout(gpu_type, new_layout):
            raise ClusterError(f"invalid MIG layout for {node_name}/{gpu}: {new_layout}")
        gpus = list(node.gpus)
        gpus[gpu] = Gpu(index=gpu, nvlink_domain=gpus[gpu].nvlink_domain, mig_layout=new_layout)
        self._nodes[node_name] = Node(
            name=node.name, gpu_type=node.gpu_type, gpus=tuple(gpus), schedulable=node.schedulable
        )
        self._snapshot = None

    def busy_mig_share(self, node_name: str, gpu: int) -> float:
        """Compute share of a MIG GPU's instances that are held."""
        gpu_type = self.gpu_type_of(node_name)
        layout = self._nodes[node_name].gpus[gpu].mig_layout or ()
        return sum(
            slice_share(gpu_type, p) for p in layout if (node_name, gpu, p) in self._mig_owner
        )

    def mig_owner(self, node_name: str, gpu: int, instance: MigPlacement) -> str | None:
        """Gang holding one MIG instance, if any."""
        return self._mig_owner.get((node_name, gpu, instance))

    def gpu_owner(self, node_name: str, gpu: int) -> str | None:
        """Gang holding a whole (non-MIG) GPU, if any."""
        return self._gpu_owner.get((node_name, gpu))
