"""The cluster snapshot the placement engine decides on: nodes, the catalogue, running gangs."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from gpufleet.core.demand import Gang
from gpufleet.core.queues import QueueTree
from gpufleet.core.workload import WorkloadEstimate
from gpufleet.model.gpus import Catalog
from gpufleet.model.inventory import Node
from gpufleet.model.mig import MigPlacement


@dataclass(frozen=True, slots=True, order=True)
class ReplicaPlacement:
    """Where one replica runs: whole GPUs of a node, or one MIG instance of one GPU."""

    node: str
    gpus: tuple[int, ...]
    mig: MigPlacement | None = None

    def __post_init__(self) -> None:
        if not self.gpus:
            raise ValueError("a replica needs at least one GPU")
        if self.mig is not None and len(self.gpus) != 1:
            raise ValueError("a MIG replica sits on exactly one GPU")


@dataclass(frozen=True, slots=True)
class RunProgress:
    """What the caller knows of a running gang's progress, for move decisions (moves.py).

    `expected_remaining_s` is the caller's estimate at the current placement's speed (from what
    it has seen, never the job's own future); `unsaved_s` the run time since the job's last
    checkpoint (0 when it checkpoints on a signal); `restart_s` the time a whole-gang restart
    takes (including a checkpoint-on-signal grace period); `recent_moves` how many times it was
    moved in the last hour.
    """

    expected_remaining_s: float
    unsaved_s: float = 0.0
    restart_s: float = 60.0
    recent_moves: int = 0

    def __post_init__(self) -> None:
        if min(self.expected_remaining_s, self.unsaved_s, self.restart_s) < 0:
            raise ValueError("progress times must be >= 0")
        if self.recent_moves < 0:
            raise ValueError("recent_moves must be >= 0")


@dataclass(frozen=True, slots=True)
class RunningGang:
    """A gang already holding GPUs; the unit of preemption. With its `progress` the core picks
    the victims that lose the least work (borrowing.py); with its `demand` (the gang as it was
    asked for) and `progress`, it may also move it to a faster type (moves.py).

    `preemptible` is the gang's own wish (and, for a standby's borrower, that only its lender
    may take the GPUs back); `disruptable` is the caller's word that nothing outside the
    decision forbids stopping it now: False when a PodDisruptionBudget allows fewer
    disruptions than the gang has pods under it. The core then neither preempts it, nor moves
    or evacuates it, whatever it gains."""

    id: str
    gpu_type: str
    replicas: tuple[ReplicaPlacement, ...]
    priority: int = 0
    preemptible: bool = True
    relative_throughput: float | None = None  # None = catalogue default for gpu_type
    progress: RunProgress | None = None
    queue: str | None = None  # the GPUQueue it is charged to (None: outside any queue)
    demand: Gang | None = None  # the gang as it was asked for (moves.py)
    disruptable: bool = True  # False: a disruption budget forbids evicting it now
    # GPU-seconds of service the job received so far, its current run included (the GPUs each
    # run held x the seconds it held them, summed over its runs; `Gang.attained_gpu_s` plus
    # this run's share). Inside a queue it ranks the gang (service_tier.py).
    attained_gpu_s: float = 0.0
    service_ranked: bool = True  # False for a server (`Gang.service_ranked`)
    # Its eviction history, for the limit on the service tier's re-evictions
    # (`Policy.service_tier_rerun_s`, service_tier.rerun_guarded): how many of the job's earlier
    # runs the service tier ended, and the seconds its current run has lasted so far.
    tier_evictions: int = 0
    run_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.attained_gpu_s >= 0:  # also refuses NaN
            raise ValueError(f"running gang {self.id}: attained_gpu_s must be >= 0")
        if self.tier_evictions < 0 or not self.run_s >= 0:
            raise ValueError(f"running gang {self.id}: tier_evictions and run_s must be >= 0")


@dataclass(frozen=True)
class Snapshot:
    """Immutable input of one placement decision."""

    catalog: Catalog
    nodes: tuple[Node, ...]
    running: tuple[RunningGang, ...] = ()
    # The workload the caller expects (shapes and shares of tasks, workload.py); None = no
    # estimate: no fragmentation term and no reserves for constrained demand.
    workload: WorkloadEstimate | None = None
    # The queues gangs are charged to (queues.py); None: no quotas, no fair share.
    queues: QueueTree | None = None
    # Namespace -> its labels, for the queues' namespace selectors (QueueSpec.namespace_refusal).
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Switched-off or booting nodes (unschedulable in `nodes`) and the seconds until each
    # would be usable if woken now (power_down.boot_waits); boot_wait.py weighs them.
    boot_wait_s: Mapping[str, float] = field(default_factory=dict)
    _nodes_by_name: Mapping[str, Node] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        by_name = {n.name: n for n in self.nodes}
        if len(by_name) != len(self.nodes):
            raise ValueError("duplicate node names in snapshot")
        for node in self.nodes:
            if node.gpu_type not in self.catalog:
                raise ValueError(f"node {node.name}: unknown GPU type {node.gpu_type}")
        object.__setattr__(self, "_nodes_by_name", by_name)

    def node(self, name: str) -> Node:
        return self._nodes_by_name[name]

    def has_node(self, name: str) -> bool:
        return name in self._nodes_by_name

    def occupied(
        self, excluding: Collection[str] = ()
    ) -> tuple[set[tuple[str, int]], set[tuple[str, int, MigPlacement]]]:
        """GPUs held whole and MIG instances held, by running gangs not in `excluding`."""
        whole: set[tuple[str, int]] = set()
        slices: set[tuple[str, int, MigPlacement]] = set()
        for gang in self.running:
            if gang.id in excluding:
                continue
            for rep in gang.replicas:
                for ix in rep.gpus:
                    if rep.mig is None:
                        whole.add((rep.node, ix))
                    else:
                        slices.add((rep.node, ix, rep.mig))
        return whole, slices
