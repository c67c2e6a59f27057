"""The placement policy: objective weights, power-cap and power-down rules, solver settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Engine(StrEnum):
    CPSAT = "cpsat"
    GREEDY = "greedy"


class RequeueTimestamp(StrEnum):
    """Where an evicted gang goes back in line (Kueue's `requeuingStrategy.timestamp`).

    EVICTION: at the back, from its eviction (its wait starts again, Kueue's default).
    CREATION: where its job's creation put it, so it goes before the gangs of its queue
    submitted after it. Either way its `Gang.waited_s` (queue aging, node reservations, the
    type delay's patience) counts from its eviction: only its place in line changes
    (`Gang.queued_s`, set by the callers that build gangs: the live view and the simulator).
    """

    EVICTION = "eviction"
    CREATION = "creation"


@dataclass(frozen=True, slots=True)
class Weights:
    """Relative weights of the objective terms (all >= 0).

    work: priority-weighted admitted throughput (relative speed x GPUs).
    energy: watts drawn by admitted work, per 100 W; trades speed for energy.
    consolidation: per empty node that this decision starts using.
    packing: per free GPU left on a node the decision touches (best fit).
    fragmentation: per GPU of expected fragmentation the decision adds, as the FGD paper
        measures it against the workload estimate in the snapshot (fragmentation.py); no
        estimate, no term.
    disruption: per MIG repartition and per preempted gang.
    scarcity: per GPU a gang with a choice of types takes from the free GPUs a type keeps for
        gangs that can run only there, times the type's relative throughput (the value such a
        gang would lose); 0 turns the reserve off. See scarcity.py.
    """

    work: float = 1.0
    energy: float = 0.0
    consolidation: float = 0.05
    packing: float = 0.02
    fragmentation: float = 1.0
    disruption: float = 0.1
    scarcity: float = 2.0

    def __post_init__(self) -> None:
        if min(self.work, self.energy, self.consolidation, self.packing) < 0:
            raise ValueError("weights must be >= 0")
        if min(self.fragmentation, self.disruption, self.scarcity) < 0:
            raise ValueError("weights must be >= 0")


@dataclass(frozen=True, slots=True)
class PowerCapRule:
    """When to write a GPU power cap: a gang preferring efficiency (or all, with `cap_all`)
    gets the lowest cap that keeps its slowdown under `max_slowdown`.

    `spare_only`: the caps `cap_all` adds (on gangs that did not ask for efficiency) are kept
    only on a GPU type with spare capacity after the decision: a type with an empty GPU and no
    gang left pending that accepts it (spare_caps.py). On a contended type a capped gang holds
    GPUs that others wait for (or would move to) longer, so its slowdown becomes theirs too:
    in a queue that costs far more completion time than the cap's own `max_slowdown`."""

    enabled: bool = False
    max_slowdown: float = 0.1
    cap_all: bool = False
    spare_only: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.max_slowdown < 1:
            raise ValueError("max_slowdown must be in [0, 1)")


@dataclass(frozen=True, slots=True)
class TypeDelay:
    """Delay scheduling across GPU types: a gang that just arrived starts only on a type that
    runs it at >= `min_speed_share` of its fastest acceptable type in the fleet; the bar falls
    as `min_speed_share / (1 + waited_s / patience_s)`, so a gang takes a much slower type only
    after waiting for a faster one (Zaharia et al.'s delay scheduling, applied to heterogeneity:
    a long job that starts on a slow type keeps it, as the core does not migrate). 0 = off.
    With queues, a type on which the gang stays within its queue's nominal quota is never held
    back: the guarantee is a start at once, by reclaim if need be (greedy.usable_types)."""

    min_speed_share: float = 0.0
    patience_s: float = 1800.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_speed_share <= 1 or self.patience_s <= 0:
            raise ValueError("min_speed_share must be in [0, 1] and patience_s positive")

    def bar(self, waited_s: float) -> float:
        """Lowest acceptable speed share of the fastest type after `waited_s` of waiting."""
        return self.min_speed_share / (1.0 + waited_s / self.patience_s)


@dataclass(frozen=True, slots=True)
class PowerDownRule:
    """Idle-node power-down (power_down.py): a node empty for `idle_s` and not needed for the
    pending demand (or a running gang's move) is switched off, except `warm_nodes_per_type`
    empty powered nodes of each GPU type kept as headroom (as cluster autoscalers keep spare
    nodes); a node switched back on is usable `boot_s` after it was woken. Off by default: it
    cordons nodes, which other schedulers see too.

    `expected_run_s`: the prior run time of a new gang on its fastest type, against which a
    boot is weighed (boot_wait.py): a gang waits for a faster switched-off node when the boot
    costs less than the slower powered type would over that run; 0 never waits."""

    enabled: bool = False
    idle_s: float = 1800.0
    warm_nodes_per_type: int = 2
    boot_s: float = 300.0
    expected_run_s: float = 3600.0

    def __post_init__(self) -> None:
        if min(self.idle_s, self.boot_s, self.expected_run_s, self.warm_nodes_per_type) < 0:
            raise ValueError("power-down times and warm nodes must be >= 0")


@dataclass(frozen=True, slots=True)
class MoveRule:
    """When a running gang may be restarted on a faster type (moves.py): its expected gain, net
    of the restart and the progress it loses, must exceed `min_gain_s`, the new type must be at
    least `1 + min_speedup` times as fast, and it may move at most `max_per_hour` times an hour.
    Only gangs whose caller passes their demand and progress are ever moved."""

    enabled: bool = True
    max_per_hour: int = 1
    min_gain_s: float = 0.0
    min_speedup: float = 0.1

    def __post_init__(self) -> None:
        if self.max_per_hour < 0 or self.min_gain_s < 0 or self.min_speedup < 0:
            raise ValueError("move limits must be >= 0")


@dataclass(frozen=True, slots=True)
class SolverSettings:
    """CP-SAT budget. `deterministic_time` bounds the search in solver work units so the same
    input and seed give the same answer; `time_limit_s` is a wall-clock safety net.

    `skip_when_greedy_admits_all` (default off): with the CP-SAT engine, keep the greedy
    decision without solving when it already admits every pending gang at its largest size,
    with no preemption and no MIG repartition. The solver could then only rearrange the same
    admissions for a better packing score, so the decision is equally valid; the live
    scheduler turns this on because such a cycle's bindings wait for the solve, while the
    simulator and the placement bench keep the default (their objectives compare engines).

    `max_gangs`: with more pending gangs than this, keep the greedy decision without building
    the CP-SAT model. At 5,000 pending gangs the model never finished a search within the
    default budget (status UNKNOWN on every instance of bench/scale_bench.py, 500 to 5,000
    nodes), so greedy decided anyway and the attempt cost about half of the decision's time;
    at 2,000 gangs it still decided on most instances.
    """

    engine: Engine = Engine.CPSAT
    time_limit_s: float = 2.0
    deterministic_time: float = 0.2
    workers: int = 1
    seed: int = 0
    presolve: bool = False  # off: faster and a tighter bound on the count model (see cpsat.py)
    skip_when_greedy_admits_all: bool = False
    max_gangs: int = 4000

    def __post_init__(self) -> None:
        if self.time_limit_s <= 0 or self.deterministic_time <= 0 or self.workers < 1:
            raise ValueError("time limits must be positive and workers >= 1")
        if self.max_gangs < 1:
            raise ValueError("max_gangs must be >= 1")


# The default `Policy.service_tier_gpu_s`: half an hour of one GPU (chosen on the queue
# bench's tuning windows, bench/README.md, Queues, "Service tier").
SERVICE_TIER_GPU_S = 1800.0
# The default `Policy.queue_aging_s`: an hour.
QUEUE_AGING_S = 3600.0
# The default `Policy.requeue_timestamp`: Kueue's default (bench/README.md, Queues, "Requeue
# timestamp", compares the two on the tuning windows).
REQUEUE_TIMESTAMP = RequeueTimestamp.EVICTION


@dataclass(frozen=True, slots=True)
class Policy:
    weights: Weights = field(default_factory=Weights)
    power_caps: PowerCapRule = field(default_factory=PowerCapRule)
    solver: SolverSettings = field(default_factory=SolverSettings)
    allow_preemption: bool = True
    # May give empty GPUs a new MIG layout. Switching an empty MIG GPU back to whole for a
    # whole-GPU gang is always allowed (it is a drain-free change on an idle GPU).
    allow_repartition: bool = True
    max_preempting_gangs: int = 16  # stuck gangs that may evict per decision (bounds the work;
    # a few more owed their nominal quota are tried past it: preempt.MAX_OWED_GANGS)
    type_delay: TypeDelay = field(default_factory=TypeDelay)
    power_down: PowerDownRule = field(default_factory=PowerDownRule)
    # With queues: a gang pending this long goes ahead of the fair-share order of its tier
    # (starvation protection, fairshare.py).
    queue_aging_s: float = QUEUE_AGING_S
    moves: MoveRule = field(default_factory=MoveRule)
    # With queues: the service tier's threshold theta, in GPU-seconds of attained service
    # (`Gang.attained_gpu_s`, `RunningGang.attained_gpu_s`). Inside one queue, among gangs of
    # the same priority, a gang that has received less than theta (tier 1) goes before, and
    # may evict, one that has received theta or more (tier 0): least attained service first,
    # as Tiresias does (Gu et al., NSDI'19), so a short job is not queued behind its own
    # team's long ones. The tier never lifts a gang over a higher priority and is never
    # compared across queues; outside queues it does nothing. None: no tier (priority only).
    service_tier_gpu_s: float | None = SERVICE_TIER_GPU_S
    # With the service tier: a running gang the tier evicted before (`RunningGang.
    # tier_evictions`) is not evicted by the tier again until its current run has lasted this
    # many seconds (`RunningGang.run_s`), which bounds the loop of a served gang evicted, back
    # ahead of its queue's fresh gangs once aged, and evicted again (service_tier.py).
    # None: no limit (the default: bench/README.md, Queues, "Thirty-second pass").
    service_tier_rerun_s: float | None = None
    # Where an evicted gang goes back in line (`RequeueTimestamp`). The core does not read it:
    # the callers that build the gangs (the live view, the simulator) set `Gang.queued_s` by it.
    requeue_timestamp: RequeueTimestamp = REQUEUE_TIMESTAMP

    def __post_init__(self) -> None:
        if self.service_tier_gpu_s is not None and not self.service_tier_gpu_s > 0:
            raise ValueError("service_tier_gpu_s must be positive (None: no service tier)")
        if self.service_tier_rerun_s is not None and not self.service_tier_rerun_s > 0:
            raise ValueError("service_tier_rerun_s must be positive (None: no limit)")

    def priority_weight(self, priority: int) -> float:
        """Multiplier of a gang's work in the objective: each priority level doubles it, so
        one higher-priority GPU outweighs one lower-priority GPU of the same speed."""
        return float(2 ** min(priority, 30))
