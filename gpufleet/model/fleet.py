"""Fleet description shared by the simulator, the sandbox and the fake device plugin.

A fleet is a list of node pools; every node of a pool is identical. The YAML shape is::

    nodePools:
      - name: h100            # node names are <name>-<index>
        count: 2
        gpuType: H100-80GB    # a catalogue type name
        gpusPerNode: 8
        nvlinkDomainSize: 8   # optional, default = gpusPerNode
        mig:                  # optional; omitted = MIG disabled
          strategy: mixed
          config: all-balanced
        taints:               # optional; kubectl's key[=value]:Effect, set on the sandbox's
          - nvidia.com/gpu=present:NoSchedule   # nodes (the simulator ignores them)

This module parses and validates the shape. Whether `gpuType` names a known GPU and whether
`mig.config` names a known layout depends on the consumer (the simulator's catalogue and MIG
layout names, the sandbox's GPU Feature Discovery facts and mig-parted layouts file), so
`load_fleet` takes a per-pool `check` from the consumer. Every problem, in the YAML, the shape
or a consumer's check, is an `InputError` naming the file, the line and the field
(`nodePools[2].gpuType`), raised before the consumer starts any work.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet.model.input_error import InputError

__all__ = ["FleetSpec", "MigSpec", "NodePoolSpec", "PoolCheck", "load_fleet", "parse_taint"]

_TAINT = re.compile(
    r"([A-Za-z0-9./_-]+)(?:=([A-Za-z0-9._-]*))?:(NoSchedule|PreferNoSchedule|NoExecute)"
)

# A consumer's check of one pool: raises `InputError` (its `field` relative to the pool, e.g.
# `mig.config`) or `ValueError` when the pool cannot be used.
PoolCheck = Callable[["NodePoolSpec"], None]


class _CamelModel(BaseModel):
    """YAML uses camelCase keys; Python code may use the snake_case field names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class MigSpec(_CamelModel):
    """MIG settings of a pool. Only the mixed strategy lets a GPU hold different profiles."""

    strategy: Literal["single", "mixed"] = "mixed"
    config: str = Field(min_length=1, description="layout name from the MIG layouts file")


class NodePoolSpec(_CamelModel):
    """A group of identical GPU nodes."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    count: int = Field(ge=1)
    gpu_type: str = Field(alias="gpuType", min_length=1)
    gpus_per_node: int = Field(alias="gpusPerNode", ge=1, le=64)
    nvlink_domain_size: int | None = Field(default=None, alias="nvlinkDomainSize", ge=1)
    mig: MigSpec | None = None
    taints: tuple[str, ...] = Field(
        default=(),
        description="node taints as kubectl writes them: key[=value]:Effect",
    )

    @model_validator(mode="after")
    def _taints_are_well_formed(self) -> NodePoolSpec:
        for taint in self.taints:
            if _TAINT.fullmatch(taint) is None:
                raise ValueError(
                    f"pool {self.name!r}: taint {taint!r} is not key[=value]:Effect with Effect "
                    "one of NoSchedule, PreferNoSchedule, NoExecute"
                )
        return self

    @model_validator(mode="after")
    def _domain_divides_node(self) -> NodePoolSpec:
        size = self.nvlink_domain_size
        if size is not None and (size > self.gpus_per_node or self.gpus_per_node % size):
            raise ValueError(
                f"pool {self.name!r}: nvlinkDomainSize {size} must divide "
                f"gpusPerNode {self.gpus_per_node}"
            )
        return self

    @property
    def domain_size(self) -> int:
        """GPUs per NVLink domain (the whole node when not given)."""
        return self.nvlink_domain_size or self.gpus_per_node

    def node_names(self) -> list[str]:
        """Names of the pool's nodes, `<name>-<index>` from 0."""
        return [f"{self.name}-{i}" for i in range(self.count)]


class FleetSpec(_CamelModel):
    """A whole fleet: the node pools, with unique names."""

    node_pools: list[NodePoolSpec] = Field(alias="nodePools", min_length=1)

    @model_validator(mode="after")
    def _unique_pool_names(self) -> FleetSpec:
        names = [p.name for p in self.node_pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate node pool names: {', '.join(dupes)}")
        return self

    @property
    def total_gpus(self) -> int:
        """Physical GPUs in the fleet."""
        return sum(p.count * p.gpus_per_node for p in self.node_pools)

    @property
    def total_nodes(self) -> int:
        """Nodes in the fleet."""
        return sum(p.count for p in self.node_pools)


def parse_taint(text: str) -> dict[str, str]:
    """`key[=value]:Effect` -> a Node taint object."""
    found = _TAINT.fullmatch(text)
    if found is None:
        raise ValueError(f"not a taint: {text!r}")
    key, value, effect = found.groups()
    return {"key": key, "effect": effect} | ({"value": value} if value else {})


def load_fleet(path: str | Path, check: PoolCheck | None = None) -> FleetSpec:
    """Read and validate a fleet YAML file, each pool also with the consumer's `check`.

    Raises `InputError` naming the file, the line and the field on any bad input.
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", source=source) from None
    root, raw = _parse_yaml(source, text)
    if not isinstance(raw, dict):
        raise InputError(
            "expected a mapping with a 'nodePools' list", source=source, line=_line(root, ())
        )
    try:
        fleet = FleetSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        problem = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "missing":
            problem = "required field missing"
        elif first["type"] == "extra_forbidden":
            problem = "unknown field"
        elif "input" in first and not isinstance(first["input"], dict | list):
            problem = f"{problem} (got {first['input']!r})"
        raise InputError(
            problem, source=source, line=_line(root, loc), field=_field_name(loc)
        ) from None
    for index, pool in enumerate(fleet.node_pools):
        try:
            if check is not None:
                check(pool)
        except InputError as exc:
            loc = ("nodePools", index, *(exc.field.split(".") if exc.field else ()))
            raise exc.located(source, _line(root, loc), _field_name(loc[:2])) from None
        except ValueError as exc:
            loc = ("nodePools", index)
            raise InputError(
                str(exc), source=source, line=_line(root, loc), field=_field_name(loc)
            ) from None
    return fleet


def _parse_yaml(source: Path, text: str) -> tuple[yaml.Node | None, Any]:
    """The YAML node tree (for line numbers) and the plain data it holds."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    except yaml.YAMLError as exc:
        raise InputError.from_yaml_error(exc, source) from None
    finally:
        loader.dispose()


def _line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """1-based line of the deepest node on the path `loc` (a key's own line for a field)."""
    node = root
    line = node.start_mark.line + 1 if node is not None else 1
    for step in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == step:
                    line, child = key.start_mark.line + 1, value
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int):
            child = node.value[step] if 0 <= step < len(node.value) else None
            line = child.start_mark.line + 1 if child is not None else line
        if child is None:
            break
        node = child
    return line


def _field_name(loc: tuple[Any, ...]) -> str:
    """`("nodePools", 2, "mig", "config")` -> `nodePools[2].mig.config`."""
    name = ""
    for step in loc:
        if isinstance(step, int):
            name += f"[{step}]"
        else:
            name += f".{step}" if name else str(step)
    return name
