"""A gang's wishes as pods carry them: size, priority, preemptibility, topology, energy (and the
largest slowdown a power cap may cost), types, the queue it is charged to, and how much slower
it trains spread over more nodes than it needs.

The operator writes them on every pod it builds (`wish_annotations`); the scheduler reads them
back (`GangWishes.read`) and hands them to the core, whose `Gang` uses the enums defined here.
Reading is lenient, as the scheduler must keep working on pods any client wrote: a missing or
unreadable value is the default below (a pod without annotations is a preemptible gang of one at
priority 0 that accepts any GPU type), never an error.

The CRDs spell topology and energy their own way (`sameNode`, `energy`): the CRD enums in
`gpufleet.model.trainingjob` map each of their members to one member here (`.wish`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gpufleet.model.contract import names

__all__ = [
    "DEFAULT_ENERGY",
    "DEFAULT_PREEMPTIBLE",
    "DEFAULT_PRIORITY",
    "DEFAULT_TOPOLOGY",
    "EnergyPreference",
    "GangWishes",
    "Topology",
    "TypeOption",
    "format_gpu_types",
    "parse_gpu_types",
    "read_gang_size",
    "read_rank",
    "wish_annotations",
]


class Topology(StrEnum):
    """Where a gang's GPUs must sit relative to each other."""

    ANY = "any"  # each replica on one node (a pod never spans nodes), replicas anywhere
    SAME_NODE = "same-node"  # all replicas on one node (whole-GPU gangs only)
    NVLINK = "nvlink-domain"  # each replica's GPUs inside one NVLink domain


class EnergyPreference(StrEnum):
    """How much speed a gang's owner trades for energy."""

    PERFORMANCE = "performance"  # never power-capped
    BALANCED = "balanced"  # capped only when the policy caps everything
    EFFICIENT = "efficient"  # capped whenever the policy allows caps


@dataclass(frozen=True, slots=True)
class TypeOption:
    """An acceptable GPU type; `relative_throughput` None means the catalogue default."""

    gpu_type: str
    relative_throughput: float | None = None

    def __post_init__(self) -> None:
        if self.relative_throughput is not None and self.relative_throughput <= 0:
            raise ValueError(f"{self.gpu_type}: relative_throughput must be positive")


DEFAULT_PRIORITY: Final = 0
DEFAULT_PREEMPTIBLE: Final = True
DEFAULT_TOPOLOGY: Final = Topology.ANY
DEFAULT_ENERGY: Final = EnergyPreference.BALANCED


def format_gpu_types(options: Iterable[TypeOption]) -> str:
    """`H100-80GB=1,A100-80GB=0.55`: names in order, with the throughput when one is given."""
    return ",".join(
        o.gpu_type if o.relative_throughput is None else f"{o.gpu_type}={o.relative_throughput:g}"
        for o in options
    )


def parse_gpu_types(raw: str) -> tuple[TypeOption, ...] | None:
    """The acceptable types of `format_gpu_types`' text; None when it names none (any type).
    An unreadable or non-positive throughput reads as none given."""
    out: list[TypeOption] = []
    for item in raw.strip().split(","):
        name, _, value = item.strip().partition("=")
        throughput: float | None = None
        if value:
            try:
                throughput = float(value)
            except ValueError:
                throughput = None
            if throughput is not None and not throughput > 0:
                throughput = None
        if name:
            out.append(TypeOption(name, throughput))
    return tuple(out) or None


def _int(raw: str | None) -> int | None:
    try:
        return int(str(raw))
    except ValueError:
        return None


def read_gang_size(annotations: Mapping[str, str]) -> int:
    """Pods the gang needs before it may be bound (1: a gang of one)."""
    return max(1, _int(annotations.get(names.GANG_SIZE)) or 1)


def read_rank(labels: Mapping[str, str]) -> int | None:
    """The replica index of the rank label; None when the pod has none (or not a number)."""
    raw = labels.get(names.RANK_LABEL, "")
    return int(raw) if raw.isdigit() else None


def wish_annotations(
    *,
    priority: int,
    preemptible: bool,
    gang_size: int | None = None,
    topology: Topology | None = None,
    energy: EnergyPreference | None = None,
    gpu_types: Iterable[TypeOption] = (),
    max_slowdown_percent: int | None = None,
    queue: str | None = None,
    spread_slowdown_percent: int | None = None,
) -> dict[str, str]:
    """The annotations that state these wishes; a wish given as None (or no types) is left
    out, so the reader takes its default."""
    out = {} if gang_size is None else {names.GANG_SIZE: str(int(gang_size))}
    out[names.PRIORITY] = str(int(priority))
    out[names.PREEMPTIBLE] = str(bool(preemptible)).lower()
    if topology is not None:
        out[names.TOPOLOGY] = topology.value
    if energy is not None:
        out[names.ENERGY] = energy.value
    if max_slowdown_percent is not None:
        out[names.MAX_SLOWDOWN] = str(int(max_slowdown_percent))
    types = format_gpu_types(gpu_types)
    if types:
        out[names.GPU_TYPES] = types
    if queue is not None:
        out[names.QUEUE] = queue
    if spread_slowdown_percent is not None:
        out[names.SPREAD_SLOWDOWN] = str(int(spread_slowdown_percent))
    return out


@dataclass(frozen=True, slots=True)
class GangWishes:
    """Every wish of a gang, with the defaults applied."""

    size: int = 1
    priority: int = DEFAULT_PRIORITY
    preemptible: bool = DEFAULT_PREEMPTIBLE
    topology: Topology = DEFAULT_TOPOLOGY
    energy: EnergyPreference = DEFAULT_ENERGY
    gpu_types: tuple[TypeOption, ...] | None = None  # None: any type
    # The largest slowdown (1-99 %) a power cap may cost; None: the placement policy decides.
    # Never with energy performance (read as None there).
    max_slowdown_percent: int | None = None
    # The GPUQueue the gang is charged to; None (no annotation): outside every queue, as
    # pods written by other clients are.
    queue: str | None = None
    # How much slower (0-99 %) the gang trains when its replicas sit on more nodes than the
    # fewest that could hold them; 0 (no annotation): no slowdown known.
    spread_slowdown_percent: int = 0

    @property
    def spread_speed(self) -> float:
        """The gang's speed spread, relative to its fewest-nodes placement (`Gang.spread_speed`)."""
        return 1.0 - self.spread_slowdown_percent / 100

    @property
    def max_slowdown(self) -> float | None:
        """`max_slowdown_percent` as the fraction the core takes."""
        percent = self.max_slowdown_percent
        return None if percent is None else percent / 100

    def annotations(self) -> dict[str, str]:
        return wish_annotations(
            priority=self.priority,
            preemptible=self.preemptible,
            gang_size=self.size,
            topology=self.topology,
            energy=self.energy,
            gpu_types=self.gpu_types or (),
            max_slowdown_percent=self.max_slowdown_percent,
            queue=self.queue,
            spread_slowdown_percent=self.spread_slowdown_percent or None,
        )

    @classmethod
    def read(cls, annotations: Mapping[str, str]) -> GangWishes:
        """The wishes a pod's annotations state (lenient: see the module docstring)."""
        try:
            topology = Topology(annotations.get(names.TOPOLOGY, DEFAULT_TOPOLOGY))
        except ValueError:
            topology = DEFAULT_TOPOLOGY
        try:
            energy = EnergyPreference(annotations.get(names.ENERGY, DEFAULT_ENERGY))
        except ValueError:
            energy = DEFAULT_ENERGY
        preemptible = annotations.get(names.PREEMPTIBLE, "")
        slowdown = _int(annotations.get(names.MAX_SLOWDOWN))
        if slowdown is not None and not 1 <= slowdown <= 99:
            slowdown = None
        if energy is EnergyPreference.PERFORMANCE:
            slowdown = None  # performance is never capped
        spread = _int(annotations.get(names.SPREAD_SLOWDOWN))
        if spread is None or not 0 <= spread <= 99:
            spread = 0
        return cls(
            size=read_gang_size(annotations),
            priority=max(0, _int(annotations.get(names.PRIORITY)) or DEFAULT_PRIORITY),
            preemptible=preemptible.lower() != "false" if preemptible else DEFAULT_PREEMPTIBLE,
            topology=topology,
            energy=energy,
            gpu_types=parse_gpu_types(annotations.get(names.GPU_TYPES, "")),
            max_slowdown_percent=slowdown,
            queue=annotations.get(names.QUEUE) or None,
            spread_slowdown_percent=spread,
        )
