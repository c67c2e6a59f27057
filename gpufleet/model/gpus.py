"""The GPU catalogue: GPU types with memory, power envelope, training speed and MIG profiles.

The data lives in `catalog.yaml` next to this module; `load_catalog()` parses it (optionally merged
with a user file) into an immutable `Catalog` that the placement engine looks types up in by name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpufleet.model.mig_profiles import MIG_PROFILES_BY_MEMORY_CLASS

MEMORY_SLICES = 8  # every MIG-capable GPU splits its memory axis into 8 slices
SM_SLICES = 7


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG GPU-instance profile of one memory class, e.g. `3g.40gb`."""

    name: str
    memory_slices: int  # placement size on the memory-slice axis
    sm_slices: int
    starts: tuple[int, ...]  # valid first memory slice of an instance
    max_instances: int

    def __post_init__(self) -> None:
        if not 1 <= self.memory_slices <= MEMORY_SLICES:
            raise ValueError(f"{self.name}: memory_slices must be 1..{MEMORY_SLICES}")
        if any(s < 0 or s + self.memory_slices > MEMORY_SLICES for s in self.starts):
            raise ValueError(f"{self.name}: a start slice runs past slice {MEMORY_SLICES - 1}")
        if not self.starts or self.max_instances < 1:
            raise ValueError(f"{self.name}: needs start slices and max_instances >= 1")

    @property
    def compute_fraction(self) -> float:
        """Share of the whole GPU's compute this slice gets (its SM slices out of 7)."""
        return self.sm_slices / SM_SLICES


@dataclass(frozen=True, slots=True)
class PowerSpec:
    """Board power envelope in watts: idle draw, TDP and the settable power-cap range."""

    idle_w: float
    tdp_w: float
    cap_min_w: float
    cap_max_w: float

    def __post_init__(self) -> None:
        if not 0 <= self.idle_w < self.tdp_w:
            raise ValueError("idle_w must be in [0, tdp_w)")
        if not 0 < self.cap_min_w <= self.cap_max_w <= self.tdp_w:
            raise ValueError("power cap range must satisfy 0 < min <= max <= tdp")


@dataclass(frozen=True, slots=True)
class GpuType:
    """A GPU model as the scheduler sees it."""

    name: str
    memory_gb: float
    power: PowerSpec
    relative_throughput: float  # default training speed, V100 = 1.0
    nvlink_domain_size: int  # GPUs per NVLink domain on an 8-GPU server; 1 = no NVLink
    mig_class: str | None = None  # memory class in mig_profiles.py, None when not MIG-capable
    mig_profiles: tuple[MigProfile, ...] = ()

    def __post_init__(self) -> None:
        if self.relative_throughput <= 0 or self.memory_gb <= 0:
            raise ValueError(f"{self.name}: throughput and memory must be positive")
        if self.nvlink_domain_size < 1:
            raise ValueError(f"{self.name}: nvlink_domain_size must be >= 1")
        if (self.mig_class is None) != (not self.mig_profiles):
            raise ValueError(f"{self.name}: mig_class and mig_profiles go together")

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MigProfile:
        """The profile called `name` on this type; KeyError when the type does not offer it."""
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        raise KeyError(f"{self.name} has no MIG profile {name!r}")

    def has_mig_profile(self, name: str) -> bool:
        return any(p.name == name for p in self.mig_profiles)


@dataclass(frozen=True)
class Catalog:
    """An immutable set of GPU types, looked up by name."""

    types: tuple[GpuType, ...]
    _by_name: Mapping[str, GpuType] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        by_name = {t.name: t for t in self.types}
        if len(by_name) != len(self.types):
            raise ValueError("duplicate GPU type names in catalogue")
        object.__setattr__(self, "_by_name", by_name)

    def __getitem__(self, name: str) -> GpuType:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"unknown GPU type {name!r}; known: {', '.join(self.names)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[GpuType]:
        return iter(self.types)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.types)

    def merged(self, other: Catalog) -> Catalog:
        """This catalogue with `other`'s types added; a type of the same name is replaced."""
        replaced = {t.name for t in other.types}
        return Catalog(tuple(t for t in self.types if t.name not in replaced) + other.types)


def _shapes(raw: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, tuple[int, ...], int]]:
    return [
        (
            int(s["memory_slices"]),
            int(s["sm_slices"]),
            tuple(int(x) for x in s["starts"]),
            int(s["max_instances"]),
        )
        for s in raw
    ]


def parse_catalog(data: Mapping[str, Any], base: Catalog | None = None) -> Catalog:
    """Build a catalogue from parsed YAML. MIG shapes/classes default to the built-in ones."""
    complete = data.get("mig_shapes") and data.get("mig_classes")
    builtin = {} if complete else _builtin_data()
    shapes = _shapes(data.get("mig_shapes") or builtin["mig_shapes"])
    classes: Mapping[str, Sequence[str]] = data.get("mig_classes") or builtin["mig_classes"]
    types: list[GpuType] = []
    for entry in data.get("gpu_types", []):
        mig_class = entry.get("mig_class")
        profiles: tuple[MigProfile, ...] = ()
        if mig_class is not None:
            names = classes[mig_class]
            # The device plugin advertises these exact names; a typo would never match a node.
            known = MIG_PROFILES_BY_MEMORY_CLASS.get(mig_class)
            if known is not None and tuple(names) != known:
                raise ValueError(f"MIG class {mig_class}: names must be {', '.join(known)}")
            if len(names) != len(shapes):
                raise ValueError(f"MIG class {mig_class}: {len(names)} names, {len(shapes)} shapes")
            profiles = tuple(
                MigProfile(name, mem, sm, starts, count)
                for name, (mem, sm, starts, count) in zip(names, shapes, strict=True)
            )
        cap_min, cap_max = entry.get("power_cap_w", [entry["tdp_w"], entry["tdp_w"]])
        types.append(
            GpuType(
                name=str(entry["name"]),
                memory_gb=float(entry["memory_gb"]),
                power=PowerSpec(
                    float(entry["idle_w"]), float(entry["tdp_w"]), float(cap_min), float(cap_max)
                ),
                relative_throughput=float(entry["relative_throughput"]),
                nvlink_domain_size=int(entry.get("nvlink_domain_size", 1)),
                mig_class=None if mig_class is None else str(mig_class),
                mig_profiles=profiles,
            )
        )
    parsed = Catalog(tuple(types))
    return parsed if base is None else base.merged(parsed)


def _builtin_data() -> dict[str, Any]:
    text = resources.files("gpufleet.model").joinpath("catalog.yaml").read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def load_catalog(extra: Path | None = None) -> Catalog:
    """The built-in catalogue, extended (and overridden by name) with the YAML file `extra`."""
    catalog = parse_catalog(_builtin_data())
    if extra is not None:
        with extra.open(encoding="utf-8") as handle:
            catalog = parse_catalog(yaml.safe_load(handle) or {}, base=catalog)
    return catalog
