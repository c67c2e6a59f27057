"""Fleet description shared by the simulator and the sandbox.

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

This module only parses and validates the shape. Whether `gpuType` names a catalogue entry and
whether `mig.config` names a known layout is checked by the consumers (the simulator's cluster
builder, the sandbox), so that this loader stays small and free of I/O beyond reading the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["FleetSpec", "MigSpec", "NodePoolSpec", "load_fleet"]


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


def load_fleet(path: str | Path) -> FleetSpec:
    """Read and validate a fleet YAML file; raises `ValueError` with the file name on bad input."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{p}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{p}: expected a mapping with a 'nodePools' list")
    try:
        return FleetSpec.model_validate(raw)
    except ValueError as exc:
        raise ValueError(f"{p}: invalid fleet: {exc}") from exc
