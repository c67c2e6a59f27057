"""Fragmentation as the FGD paper measures it (Weng et al., "Beware of Fragmentation", ATC'23).

A node's fragmentation for one task shape m is the free GPU capacity on the node that m could
not use: all of it when m cannot run there at all (the node's type is not acceptable to m, or m
does not fit in what is free), otherwise the free capacity on partly used GPUs that cannot hold
m (the FGD paper's per-GPU rule). The node's fragmentation is the expectation over the workload:
`F(node) = sum_m share_m x F(node, m)`, with the shares of `WorkloadEstimate`. FGD places each
task where F grows least; here that difference, in GPUs, is a term of the objective
(`Weights.fragmentation` per GPU of expected fragmentation).

Whole GPUs and MIG slices in gpufleet's terms:
- a free GPU is *empty* (nothing in use; an empty MIG GPU may be switched back or re-cut), or
  *partly used* (a MIG GPU with an instance in use: its free capacity is 1 minus the compute
  share of the instances in use, slices outside any instance included);
- a whole-GPU shape of s GPUs fits when s empty GPUs exist (in one NVLink domain when the shape
  needs it); it can never use a partly used GPU;
- a MIG shape fits when a partly used GPU has a free instance of its profile or a GPU is empty
  (it can be cut); partly used GPUs without such an instance are its fragments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.core.workload import WorkloadEstimate
from gpufleet.model.gpus import Catalog
from gpufleet.model.inventory import Node
from gpufleet.model.mig import MigLayout, MigPlacement

__all__ = ["NodeFree", "TypeMass", "fragmentation", "node_free", "type_masses"]


@dataclass(frozen=True, slots=True)
class NodeFree:
    """The free capacity of one node, as FGD sees it."""

    empty: tuple[int, ...]  # empty GPUs per NVLink domain, largest first, zeros dropped
    partial: tuple[tuple[float, frozenset[str]], ...]  # per partly used GPU: free, free profiles

    @property
    def total(self) -> float:
        return float(sum(self.empty)) + sum(free for free, _ in self.partial)


@dataclass(frozen=True, slots=True)
class TypeMass:
    """The workload estimate as nodes of one GPU type see it (shares of tasks)."""

    mismatch: float  # tasks that cannot run on the type at all
    whole: tuple[tuple[int, bool, float], ...]  # (GPUs, NVLink, share) of whole-GPU tasks
    mig: tuple[tuple[str, float], ...]  # (profile, share) of MIG tasks the type offers

    @property
    def empty(self) -> bool:
        return self.mismatch <= 0 and not self.whole and not self.mig


def type_masses(
    estimate: WorkloadEstimate, catalog: Catalog, types: Iterable[str]
) -> dict[str, TypeMass]:
    """Per GPU type present, the shares of tasks it cannot serve, and of each shape it can."""
    out: dict[str, TypeMass] = {}
    for t in sorted(set(types)):
        gpu = catalog[t]
        mismatch = 0.0
        whole: dict[tuple[int, bool], float] = {}
        mig: dict[str, float] = {}
        for item in estimate.shapes:
            shape = item.shape
            if t not in shape.types:
                mismatch += item.share
            elif shape.mig_profile is None:
                key = (shape.gpus, shape.nvlink)
                whole[key] = whole.get(key, 0.0) + item.share
            elif gpu.has_mig_profile(shape.mig_profile):
                mig[shape.mig_profile] = mig.get(shape.mig_profile, 0.0) + item.share
            else:
                mismatch += item.share
        out[t] = TypeMass(
            mismatch,
            tuple((g, nv, w) for (g, nv), w in sorted(whole.items())),
            tuple(sorted(mig.items())),
        )
    return out


def fragmentation(node: NodeFree, mass: TypeMass) -> float:
    """Expected free GPU capacity on the node that a task drawn from the workload cannot use."""
    total = node.total
    if total <= 0:
        return 0.0
    partial_free = sum(free for free, _ in node.partial)
    out = mass.mismatch * total
    empty = sum(node.empty)
    widest = node.empty[0] if node.empty else 0
    for gpus, nvlink, share in mass.whole:
        fits = (widest if nvlink else empty) >= gpus
        out += share * (partial_free if fits else total)
    for profile, share in mass.mig:
        if empty or any(profile in free_profiles for _, free_profiles in node.partial):
            out += share * sum(f for f, profiles in node.partial if profile not in profiles)
        else:
            out += share * total
    return out


def node_free(
    node: Node,
    catalog: Catalog,
    whole_used: Iterable[int],
    instances_used: Mapping[int, Iterable[MigPlacement]],
    layouts: Mapping[int, MigLayout | None] | None = None,
) -> NodeFree:
    """A node's free capacity given the GPUs held whole, the MIG instances in use per GPU and the
    GPUs' layouts (`layouts` overrides the node's own for GPUs it names)."""
    gpu_type = catalog[node.gpu_type]
    busy = set(whole_used)
    per_domain: Counter[int] = Counter()
    partial: list[tuple[float, frozenset[str]]] = []
    for gpu in node.gpus:
        g = gpu.index
        if g in busy:
            continue
        used = set(instances_used.get(g, ()))
        if not used:
            per_domain[gpu.nvlink_domain] += 1
            continue
        layout = gpu.mig_layout if layouts is None or g not in layouts else layouts[g]
        held = sum(gpu_type.mig_profile(i.profile).compute_fraction for i in used)
        free_profiles = frozenset(i.profile for i in layout or () if i not in used)
        partial.append((max(0.0, 1.0 - held), free_profiles))
    return NodeFree(
        tuple(sorted((c for c in per_domain.values() if c), reverse=True)),
        tuple(sorted(partial, key=lambda p: (p[0], sorted(p[1])))),
    )
