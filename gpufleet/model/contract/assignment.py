"""What the scheduler hands out, as the cluster records it: GPUs, MIG instances, power caps.

A bound pod carries its `Assignment` as annotations written through the Binding (whole-GPU
indices, the GPU type, the MIG instance as `profile@start`, the power cap in watts); a node
whose MIG layout gpufleet asked for carries the exact layout per GPU (`layout_annotation`), as
mig-parted configs only hold profile counts. Every `profile@start` text is written by
`format_mig` and read by `parse_mig`. Readers are lenient: an unreadable value reads as absent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.model.contract import names
from gpufleet.model.mig import MigLayout, MigPlacement, make_layout

__all__ = [
    "Assignment",
    "MigState",
    "assigned_gpus",
    "assigned_mig",
    "assigned_type",
    "format_layout",
    "format_mig",
    "layout_annotation",
    "parse_layout",
    "parse_mig",
    "power_cap",
    "recorded_layouts",
]


class MigState(StrEnum):
    """Values of the MIG manager's `nvidia.com/mig.config.state` label."""

    PENDING = "pending"
    SUCCESS = "success"
    FAILED = "failed"


def format_mig(placement: MigPlacement) -> str:
    """`3g.40gb@4`: the profile and the first memory slice of one MIG instance."""
    return f"{placement.profile}@{placement.start}"


def parse_mig(text: str) -> MigPlacement:
    """The instance of `format_mig`'s text; ValueError when it is not one."""
    profile, sep, start = text.rpartition("@")
    if not sep or not profile or not start.isdigit():
        raise ValueError(f"not a MIG instance (profile@start): {text!r}")
    return MigPlacement(int(start), profile)


def format_layout(layout: MigLayout) -> list[str]:
    return [format_mig(p) for p in layout]


def parse_layout(items: Iterable[str]) -> MigLayout:
    """A canonical layout from `format_layout`'s list; ValueError on an unreadable item."""
    return make_layout(parse_mig(item) for item in items)


def layout_annotation(config: str, layouts: Sequence[MigLayout | None]) -> str:
    """The node annotation recording the exact layout of every MIG GPU under `config`."""
    gpus = {str(i): format_layout(lay) for i, lay in enumerate(layouts) if lay is not None}
    return json.dumps({"config": config, "gpus": gpus}, sort_keys=True)


def recorded_layouts(annotations: Mapping[str, str], config: str) -> dict[int, MigLayout]:
    """The exact layouts gpufleet recorded for `config`, by GPU index (empty if none were
    recorded, they were recorded for another config, or the record is unreadable)."""
    raw = annotations.get(names.MIG_LAYOUT_ANNOTATION)
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
        if doc.get("config") != config:
            return {}
        return {int(k): parse_layout(v) for k, v in (doc.get("gpus") or {}).items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def assigned_gpus(annotations: Mapping[str, str]) -> tuple[int, ...] | None:
    """The GPU indices a bound pod holds; None when it records none."""
    raw = annotations.get(names.ASSIGNED_GPUS)
    if not raw:
        return None
    try:
        return tuple(int(x) for x in raw.split(","))
    except ValueError:
        return None


def assigned_mig(annotations: Mapping[str, str]) -> tuple[int, MigPlacement] | None:
    """(GPU index, instance) of a pod holding a MIG slice; None otherwise."""
    gpus = assigned_gpus(annotations)
    raw = annotations.get(names.ASSIGNED_MIG)
    if not raw or not gpus or len(gpus) != 1:
        return None
    try:
        return gpus[0], parse_mig(raw)
    except ValueError:
        return None


def assigned_type(annotations: Mapping[str, str]) -> str | None:
    return annotations.get(names.ASSIGNED_TYPE) or None


def power_cap(annotations: Mapping[str, str]) -> float | None:
    """The power cap in watts the scheduler chose for the pod's GPUs; None: uncapped."""
    try:
        return float(annotations[names.POWER_CAP])
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Assignment:
    """What one replica was given: its GPUs on the node (the GPU of its slice, for MIG), their
    type, its MIG instance and its power cap (whole watts)."""

    gpus: tuple[int, ...]
    gpu_type: str
    mig: MigPlacement | None = None
    power_cap_w: float | None = None

    def annotations(self) -> dict[str, str]:
        out = {names.ASSIGNED_GPUS: ",".join(str(g) for g in self.gpus)}
        out[names.ASSIGNED_TYPE] = self.gpu_type
        if self.mig is not None:
            out[names.ASSIGNED_MIG] = format_mig(self.mig)
        if self.power_cap_w is not None:
            out[names.POWER_CAP] = f"{self.power_cap_w:.0f}"
        return out

    @classmethod
    def read(cls, annotations: Mapping[str, str]) -> Assignment | None:
        """The assignment a pod records; None when it records no GPUs or no type."""
        gpus = assigned_gpus(annotations)
        gpu_type = assigned_type(annotations)
        if not gpus or gpu_type is None:
            return None
        mig = assigned_mig(annotations)
        return cls(gpus, gpu_type, None if mig is None else mig[1], power_cap(annotations))
