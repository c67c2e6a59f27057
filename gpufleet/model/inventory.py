"""Cluster inventory types: nodes, their GPUs, each GPU's MIG layout and NVLink domain."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.gpus import GpuType
from gpufleet.model.mig import MigLayout


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU of a node. `mig_layout` None means MIG is off (a whole GPU)."""

    index: int
    nvlink_domain: int = 0
    mig_layout: MigLayout | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU node: all its GPUs are of one type (`gpu_type` names a catalogue entry)."""

    name: str
    gpu_type: str
    gpus: tuple[Gpu, ...]
    schedulable: bool = True  # False when cordoned or draining

    def __post_init__(self) -> None:
        if [g.index for g in self.gpus] != list(range(len(self.gpus))):
            raise ValueError(f"node {self.name}: GPU indices must be 0..n-1 in order")

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def domains(self) -> dict[int, tuple[int, ...]]:
        """NVLink domain id -> indices of its GPUs."""
        out: dict[int, list[int]] = {}
        for gpu in self.gpus:
            out.setdefault(gpu.nvlink_domain, []).append(gpu.index)
        return {d: tuple(ix) for d, ix in sorted(out.items())}


def make_node(
    name: str,
    gpu_type: GpuType,
    count: int = 8,
    mig_layouts: dict[int, MigLayout] | None = None,
    schedulable: bool = True,
) -> Node:
    """A node of `count` GPUs grouped into NVLink domains by the type's domain size."""
    layouts = mig_layouts or {}
    gpus = tuple(
        Gpu(index=i, nvlink_domain=i // gpu_type.nvlink_domain_size, mig_layout=layouts.get(i))
        for i in range(count)
    )
    return Node(name=name, gpu_type=gpu_type.name, gpus=gpus, schedulable=schedulable)
