"""`gpufleet sandbox demo`: the sandbox's fleet and the example jobs, shown as a user sees them."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.sandbox.cluster import Sandbox
from gpufleet.sandbox.nodes import POOL_LABEL


def fleet_table(nodes: list[dict[str, Any]]) -> Table:
    """One row per node pool: GPU product, nodes ready, whole GPUs and MIG slices allocatable."""
    pools: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"nodes": 0, "ready": 0, "gpus": 0, "slices": defaultdict(int), "product": ""}
    )
    for node in nodes:
        labels = node["metadata"].get("labels", {})
        pool = pools[labels.get(POOL_LABEL, "-")]
        pool["nodes"] += 1
        pool["product"] = labels.get("nvidia.com/gpu.product", "-")
        conditions = node.get("status", {}).get("conditions", [])
        pool["ready"] += any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        for name, value in node.get("status", {}).get("allocatable", {}).items():
            if name == "nvidia.com/gpu":
                pool["gpus"] += int(value)
            elif name.startswith("nvidia.com/mig-"):
                pool["slices"][name.removeprefix("nvidia.com/mig-")] += int(value)
    table = Table(title="Simulated GPU fleet")
    for column in ("pool", "GPU product", "nodes ready", "whole GPUs", "MIG slices"):
        table.add_column(column)
    for name in sorted(pools):
        p = pools[name]
        slices = ", ".join(f"{n} x {c}" for c, n in sorted(p["slices"].items())) or "-"
        table.add_row(name, p["product"], f"{p['ready']}/{p['nodes']}", str(p["gpus"]), slices)
    return table


def run_demo(sandbox: Sandbox, fleet: Path | None, examples: Path) -> None:
    """Start the sandbox, apply every example manifest, and print the fleet and the jobs."""
    # Off a terminal (CI logs, pipes) rich assumes 80 columns; the tables need more.
    console = Console() if Console().is_terminal else Console(width=120)
    sandbox.up(fleet, progress=lambda msg: console.print(f"[dim]{msg}[/dim]"))
    if not examples.is_dir():
        raise FileNotFoundError(f"examples directory {examples} not found; pass --examples DIR")
    manifests = sorted(examples.glob("*.yaml"))
    sandbox.kubectl("apply", *(arg for m in manifests for arg in ("-f", str(m))))
    nodes = json.loads(sandbox.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    console.print(fleet_table(nodes))
    console.print(f"[bold]Example jobs accepted ({len(manifests)} manifests):[/bold]")
    print(sandbox.kubectl("get", "trainingjobs,servingjobs", "-A").stdout)
    console.print(f"Use the cluster: export KUBECONFIG={sandbox.kubeconfig}")
