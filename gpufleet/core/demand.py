"""Pending work: a gang of identical replicas with its GPU needs, type choices and wishes.

The wishes' vocabulary (`Topology`, `EnergyPreference`, `TypeOption`) is the contract's
(`gpufleet.model.contract.wishes`): pods carry it, the scheduler reads it, the core uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.contract.wishes import EnergyPreference as EnergyPreference
from gpufleet.model.contract.wishes import Topology as Topology
from gpufleet.model.contract.wishes import TypeOption as TypeOption


@dataclass(frozen=True, slots=True)
class Gang:
    """A job: `replicas_min..replicas_max` identical replicas placed all-or-nothing.

    Each replica needs either `gpus_per_replica` whole GPUs on one node or one `mig_profile`
    slice. All replicas of a gang run on the same GPU type. `priority` is a small integer,
    higher wins; only `preemptible` gangs may be evicted for higher-priority ones.
    `allowed_nodes` names the only nodes the gang may use (the adapter's node filters: taints,
    selectors, affinity, CPU and memory); None means every node.
    """

    id: str
    acceptable: tuple[TypeOption, ...]
    replicas_min: int = 1
    replicas_max: int = 1
    gpus_per_replica: int = 1
    mig_profile: str | None = None
    priority: int = 0
    preemptible: bool = True
    topology: Topology = Topology.ANY
    energy: EnergyPreference = EnergyPreference.BALANCED
    waited_s: float = 0.0  # how long the gang has been pending (caller's clock); see TypeDelay
    allowed_nodes: frozenset[str] | None = None
    # The largest slowdown (a fraction) the owner accepts from a GPU power cap: the gang is
    # capped within it whatever the policy's rule (None: the policy's rule decides).
    max_slowdown: float | None = None
    # Elastic gangs: throughput at 1, 2, ... replicas (at least up to replicas_max) relative to
    # one replica (the caller's scaling curve, refined from what the job reports); empty =
    # linear.
    scaling: tuple[float, ...] = ()
    # Replicas of the same job that already run: the gang is that job's room to grow (the live
    # scheduler's `<gang>#rest`). Its `scaling` is then the whole job's curve (at least up to
    # grows_from + replicas_max), n replicas of it are worth the curve's gain from grows_from
    # to grows_from + n, and even its first replica is growth, granted by marginal value.
    grows_from: int = 0
    queue: str | None = None  # the GPUQueue it waits in (None: outside any queue)
    # Its namespace, for the queue's namespaceSelector (None: not checked, as in the simulator).
    namespace: str | None = None
    # GPU-seconds of service the job received in its earlier runs (Tiresias' two-dimensional
    # attained service: for each run, the GPUs it held x the seconds it held them, summed); 0
    # for a job that never ran. Inside a queue it ranks the gang below same-priority fresh
    # gangs once it reaches `Policy.service_tier_gpu_s` (service_tier.py).
    attained_gpu_s: float = 0.0
    # False for a server (a ServingJob's replicas): it has no finish time for least attained
    # service to favour, so the service tier neither evicts for it nor evicts it.
    service_ranked: bool = True
    # How long the gang has held its place in line, when that is not its wait: with the
    # requeue timestamp `creation` (`Policy.requeue_timestamp`), an evicted gang's time since
    # its job was created. None: its place in line is its wait (`waited_s`). It orders gangs
    # of one queue (and alike gangs) only; aging, reservations and the type delay read waits.
    queued_s: float | None = None
    # Its speed when its replicas sit on more nodes than the fewest of the type that could hold
    # them, relative to that fewest-nodes placement (synchronous training waits on the network
    # between nodes; Gavel measures 0.1-1.0 by model). 1.0: no slowdown known (the default).
    spread_speed: float = 1.0

    def __post_init__(self) -> None:
        if not self.acceptable:
            raise ValueError(f"gang {self.id}: needs at least one acceptable GPU type")
        if not 1 <= self.replicas_min <= self.replicas_max:
            raise ValueError(f"gang {self.id}: need 1 <= replicas_min <= replicas_max")
        if self.mig_profile is None and self.gpus_per_replica < 1:
            raise ValueError(f"gang {self.id}: gpus_per_replica must be >= 1")
        if self.mig_profile is not None and self.topology is Topology.SAME_NODE:
            raise ValueError(f"gang {self.id}: same-node topology needs whole GPUs, not MIG")
        if self.priority < 0:
            raise ValueError(f"gang {self.id}: priority must be >= 0")
        if self.waited_s < 0:
            raise ValueError(f"gang {self.id}: waited_s must be >= 0")
        if self.queued_s is not None and not self.queued_s >= self.waited_s:
            raise ValueError(f"gang {self.id}: queued_s must be >= waited_s")
        if not self.attained_gpu_s >= 0:  # also refuses NaN
            raise ValueError(f"gang {self.id}: attained_gpu_s must be >= 0")
        if self.max_slowdown is not None and not 0 < self.max_slowdown < 1:
            raise ValueError(f"gang {self.id}: max_slowdown must be in (0, 1)")
        if self.max_slowdown is not None and self.energy is EnergyPreference.PERFORMANCE:
            raise ValueError(f"gang {self.id}: a performance gang is never power-capped")
        if not 0 < self.spread_speed <= 1:  # also refuses NaN
            raise ValueError(f"gang {self.id}: spread_speed must be in (0, 1]")
        if self.grows_from < 0:
            raise ValueError(f"gang {self.id}: grows_from must be >= 0")
        if self.scaling and (
            len(self.scaling) < self.grows_from + self.replicas_max
            or abs(self.scaling[0] - 1.0) > 1e-9
            or min(self.scaling) <= 0
        ):
            raise ValueError(
                f"gang {self.id}: scaling needs a positive throughput for each replica count up to "
                "grows_from + replicas_max, relative to one replica (the first is 1)"
            )

    @property
    def in_line_s(self) -> float:
        """How long the gang has held its place in line: the longer, the earlier it goes among
        otherwise equal gangs (its `queued_s`, else its wait)."""
        return self.waited_s if self.queued_s is None else self.queued_s

    @property
    def uses_mig(self) -> bool:
        return self.mig_profile is not None

    @property
    def elastic(self) -> bool:
        return self.replicas_max > self.replicas_min

    def speedup(self, replicas: int) -> float:
        """Throughput `replicas` replicas of this gang add, relative to one replica of the job
        (the scaling curve; for a gang that grows a running job, the curve's gain from
        `grows_from` on, so its value compares with any other gang's)."""
        if replicas <= 0:
            return 0.0
        if not self.scaling:
            return float(replicas)
        return self._curve(self.grows_from + replicas) - self._curve(self.grows_from)

    def _curve(self, replicas: int) -> float:
        if replicas <= 0:
            return 0.0
        return self.scaling[min(replicas, len(self.scaling)) - 1]

    def type_names(self) -> tuple[str, ...]:
        return tuple(o.gpu_type for o in self.acceptable)

    def gpus_needed(self, replicas: int) -> int:
        """Whole GPUs (or MIG slices) for `replicas` replicas."""
        return replicas * (1 if self.uses_mig else self.gpus_per_replica)
