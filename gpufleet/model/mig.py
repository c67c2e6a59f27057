"""MIG geometry: instance placements on the 8-slice memory axis, layout validity and enumeration.

A layout is the set of GPU instances on one physical GPU, each a profile at a start slice. It is
valid when every start is allowed for its profile, instances do not overlap on the memory axis,
per-profile instance limits hold and the SM slices add up to at most 7.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.model.gpus import MEMORY_SLICES, SM_SLICES, GpuType, MigProfile


@dataclass(frozen=True, slots=True, order=True)
class MigPlacement:
    """One GPU instance: `profile` occupying memory slices start .. start + size - 1."""

    start: int
    profile: str

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


# The instances on one GPU, sorted by start slice. The empty tuple is "MIG on, no instances".
MigLayout = tuple[MigPlacement, ...]


def make_layout(placements: Iterable[MigPlacement]) -> MigLayout:
    """Canonical (sorted) form of a layout so equal layouts compare equal."""
    return tuple(sorted(placements))


def layout_problem(gpu: GpuType, layout: MigLayout) -> str | None:
    """Why `layout` is not valid on `gpu`, or None when it is."""
    if not gpu.mig_capable:
        return f"{gpu.name} does not support MIG"
    used = [False] * MEMORY_SLICES
    sm_total = 0
    counts: Counter[str] = Counter()
    for placement in layout:
        if not gpu.has_mig_profile(placement.profile):
            return f"{gpu.name} has no profile {placement.profile}"
        profile = gpu.mig_profile(placement.profile)
        if placement.start not in profile.starts:
            return f"{placement} is not a valid start for {profile.name}"
        for s in range(placement.start, placement.start + profile.memory_slices):
            if used[s]:
                return f"{placement} overlaps another instance at slice {s}"
            used[s] = True
        sm_total += profile.sm_slices
        counts[profile.name] += 1
        if counts[profile.name] > profile.max_instances:
            return f"more than {profile.max_instances} x {profile.name}"
    if sm_total > SM_SLICES:
        return f"needs {sm_total} SM slices, the GPU has {SM_SLICES}"
    return None


def is_valid_layout(gpu: GpuType, layout: MigLayout) -> bool:
    return layout_problem(gpu, layout) is None


def profile_counts(layout: MigLayout) -> Counter[str]:
    """How many instances of each profile the layout holds."""
    return Counter(p.profile for p in layout)


def enumerate_layouts(
    gpu: GpuType, profiles: Iterable[str] | None = None, maximal_only: bool = False
) -> tuple[MigLayout, ...]:
    """Every valid layout of one GPU (including the empty one), in a stable order.

    `profiles` restricts which profiles may appear. With `maximal_only`, only layouts to which no
    further allowed instance can be added are returned (the useful targets for repartitioning).
    """
    allowed: list[MigProfile] = [
        p for p in gpu.mig_profiles if profiles is None or p.name in set(profiles)
    ]
    results: list[MigLayout] = []

    # Depth-first over candidate (profile, start) pairs in a fixed order; each layout is built
    # in increasing candidate index, so it is produced exactly once.
    candidates = [MigPlacement(s, p.name) for p in allowed for s in p.starts]
    candidates.sort(key=lambda c: (c.start, c.profile))

    def extend(index: int, current: list[MigPlacement]) -> None:
        results.append(make_layout(current))
        for i in range(index, len(candidates)):
            current.append(candidates[i])
            if is_valid_layout(gpu, tuple(current)):
                extend(i + 1, current)
            current.pop()

    if gpu.mig_capable:
        extend(0, [])
    if maximal_only:
        results = [
            layout
            for layout in results
            if not any(
                c not in layout and is_valid_layout(gpu, make_layout((*layout, c)))
                for c in candidates
            )
        ]
    return tuple(sorted(set(results), key=lambda lay: (len(lay), lay)))


def densest_layout(gpu: GpuType, profile: str) -> MigLayout:
    """The valid layout holding the most instances of `profile` alone (ties: lowest starts).

    This is the repartitioning target when a GPU is cut for one kind of slice.
    """
    layouts = enumerate_layouts(gpu, profiles=[profile], maximal_only=True)
    return max(layouts, key=lambda lay: (len(lay), [-p.start for p in lay]))
