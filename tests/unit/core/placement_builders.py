"""Small fluent builders for placement tests: clusters, running gangs and pending gangs."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.core.decision import Decision
from gpufleet.core.demand import EnergyPreference, Gang, Topology, TypeOption
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.model.gpus import Catalog, load_catalog
from gpufleet.model.inventory import Node, make_node
from gpufleet.model.mig import MigLayout, MigPlacement, make_layout

CATALOG = load_catalog()


def checked_decision(snapshot: Snapshot, pending: list[Gang], engine: Engine) -> Decision:
    """The default policy's decision on `engine`, asserted free of the validator's problems."""
    decision = place(snapshot, pending, Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snapshot, pending, decision) == []
    return decision


def layout(*specs: str) -> MigLayout:
    """layout("3g.40gb@0", "3g.40gb@4") -> a MIG layout."""
    return make_layout(MigPlacement(int(s.split("@")[1]), s.split("@")[0]) for s in specs)


@dataclass
class ClusterBuilder:
    catalog: Catalog = CATALOG
    nodes: list[Node] = field(default_factory=list)
    running: list[RunningGang] = field(default_factory=list)
    tree: QueueTree | None = None

    def node(
        self,
        name: str,
        gpu_type: str,
        count: int = 8,
        mig: dict[int, MigLayout] | None = None,
        schedulable: bool = True,
    ) -> ClusterBuilder:
        self.nodes.append(make_node(name, self.catalog[gpu_type], count, mig, schedulable))
        return self

    def nodes_of(self, prefix: str, gpu_type: str, how_many: int, count: int = 8) -> ClusterBuilder:
        for i in range(how_many):
            self.node(f"{prefix}{i}", gpu_type, count)
        return self

    def run(
        self,
        gang_id: str,
        node: str,
        gpus: tuple[int, ...],
        priority: int = 0,
        preemptible: bool = True,
        mig: str | None = None,
        queue: str | None = None,
    ) -> ClusterBuilder:
        """A running gang with one replica; call again with the same id to add replicas."""
        gpu_type = next(n.gpu_type for n in self.nodes if n.name == node)
        inst = None
        if mig is not None:
            name, start = mig.split("@")
            inst = MigPlacement(int(start), name)
        replica = ReplicaPlacement(node, gpus, inst)
        for i, existing in enumerate(self.running):
            if existing.id == gang_id:
                self.running[i] = RunningGang(
                    gang_id,
                    gpu_type,
                    (*existing.replicas, replica),
                    priority,
                    preemptible,
                    queue=queue,
                )
                return self
        self.running.append(
            RunningGang(gang_id, gpu_type, (replica,), priority, preemptible, queue=queue)
        )
        return self

    def queues(self, tree: QueueTree) -> ClusterBuilder:
        self.tree = tree
        return self

    def build(self) -> Snapshot:
        return Snapshot(self.catalog, tuple(self.nodes), tuple(self.running), queues=self.tree)


def cluster() -> ClusterBuilder:
    return ClusterBuilder()


def gang(
    gang_id: str,
    types: str | tuple[str, ...] = "H100-80GB",
    gpus: int = 1,
    replicas: int | tuple[int, int] = 1,
    mig: str | None = None,
    priority: int = 0,
    preemptible: bool = True,
    topology: Topology = Topology.ANY,
    energy: EnergyPreference = EnergyPreference.BALANCED,
    throughput: dict[str, float] | None = None,
    allowed: set[str] | None = None,
    max_slowdown: float | None = None,
    queue: str | None = None,
    waited_s: float = 0.0,
) -> Gang:
    names = (types,) if isinstance(types, str) else types
    low, high = (replicas, replicas) if isinstance(replicas, int) else replicas
    speeds = throughput or {}
    return Gang(
        id=gang_id,
        acceptable=tuple(TypeOption(t, speeds.get(t)) for t in names),
        replicas_min=low,
        replicas_max=high,
        gpus_per_replica=gpus,
        mig_profile=mig,
        priority=priority,
        preemptible=preemptible,
        topology=topology,
        energy=energy,
        allowed_nodes=None if allowed is None else frozenset(allowed),
        max_slowdown=max_slowdown,
        queue=queue,
        waited_s=waited_s,
    )


def queue_b_at_its_ceiling() -> Snapshot:
    """Two 8-GPU L4 nodes. Queue b (nominal 3, borrowing limit 2) holds its ceiling of 5: r0
    (n0's GPUs 0-3) and r1 (n1's GPU 0), both priority 0; queue a's gangs, not preemptible,
    fill the rest but n1's GPU 7 (the quota-wait tests' scene)."""
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={"L4": Quota(11)}),
            QueueSpec("b", quotas={"L4": Quota(3, borrowing_limit=2)}),
        ]
    )
    return (
        cluster()
        .node("n0", "L4", 8)
        .node("n1", "L4", 8)
        .run("r0", "n0", (0, 1, 2, 3), queue="b")
        .run("a0", "n0", (4, 5, 6, 7), preemptible=False, queue="a")
        .run("r1", "n1", (0,), queue="b")
        .run("a1", "n1", (1, 2, 3, 4, 5, 6), preemptible=False, queue="a")
        .queues(tree)
        .build()
    )
