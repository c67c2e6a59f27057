"""`gpufleet sandbox demo`: the sandbox's fleet and the example jobs, shown as a user sees them."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from gpufleet.model.contract.names import GPU_PRODUCT_LABEL, WHOLE_GPU_RESOURCE
from gpufleet.model.input_error import InputError
from gpufleet.operator.reconcile import WAITING_FOR_SCHEDULER
from gpufleet.sandbox.control_plane import ADMIN_USER, SYSTEM_NAMESPACE, Sandbox
from gpufleet.sandbox.node_manifests import POOL_LABEL


def fleet_table(nodes: list[dict[str, Any]]) -> Table:
    """One row per node pool: GPU product, nodes ready, whole GPUs and MIG slices allocatable."""
    pools: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"nodes": 0, "ready": 0, "gpus": 0, "slices": defaultdict(int), "product": ""}
    )
    for node in nodes:
        labels = node["metadata"].get("labels", {})
        pool = pools[labels.get(POOL_LABEL, "-")]
        pool["nodes"] += 1
        pool["product"] = labels.get(GPU_PRODUCT_LABEL, "-")
        conditions = node.get("status", {}).get("conditions", [])
        pool["ready"] += any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        for name, value in node.get("status", {}).get("allocatable", {}).items():
            if name == WHOLE_GPU_RESOURCE:
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


def _explained(job: dict[str, Any]) -> bool:
    """A job that runs, or waits with the scheduler's reason (not only for the scheduler)."""
    status = job.get("status", {})
    admitted = next((c for c in status.get("conditions", []) if c["type"] == "Admitted"), {})
    return status.get("phase") == "Running" or admitted.get("reason") != WAITING_FOR_SCHEDULER


def _wait_for_jobs(sandbox: Sandbox, timeout: float = 90) -> None:
    # Settled: every TrainingJob has a phase, no phase changed for three seconds, and every job
    # that waits says why (jobs that fit run; the rest stay Queued with the reason).
    deadline = time.monotonic() + timeout
    last: list[str | None] = []
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        jobs = json.loads(sandbox.kubectl("get", "trainingjobs", "-A", "-o", "json").stdout)
        phases = [j.get("status", {}).get("phase") for j in jobs["items"]]
        if phases != last:
            last, stable_since = phases, time.monotonic()
        elif (
            all(phases)
            and all(_explained(j) for j in jobs["items"])
            and time.monotonic() - stable_since >= 3
        ):
            return
        time.sleep(0.5)


def _disaggregated(doc: dict[str, Any]) -> bool:
    spec = doc.get("spec") or {}
    return bool(spec.get("prefill") and spec.get("decode"))


def _read_examples(examples: Path) -> tuple[list[Path], list[dict[str, Any]]]:
    """The example manifest files and the objects in them; bad ones are an `InputError`."""
    if not examples.is_dir():
        raise InputError(f"directory {examples} not found", field="--examples")
    manifests = sorted(examples.glob("*.yaml"))
    docs: list[dict[str, Any]] = []
    for path in manifests:
        try:
            loaded = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as exc:
            raise InputError.from_yaml_error(exc, path) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read: {exc}", source=path) from None
        for doc in loaded:
            if doc and not (isinstance(doc, dict) and doc.get("kind") and doc.get("metadata")):
                raise InputError("expected a Kubernetes object (kind, metadata)", source=path)
            if doc:
                docs.append(doc)
    return manifests, docs


def run_demo(sandbox: Sandbox, fleet: Path | None, examples: Path) -> None:
    """Start the sandbox and the operator, apply every example, print the fleet and the jobs."""
    # Off a terminal (CI logs, pipes) rich assumes 80 columns; the tables need more.
    console = Console() if Console().is_terminal else Console(width=120)
    manifests, docs = _read_examples(examples)  # before anything starts
    sandbox.up(fleet, progress=lambda msg: console.print(f"[dim]{msg}[/dim]"), operator=True)
    serving = [d for d in docs if d.get("kind") == "ServingJob"]
    url = ""
    if any(_disaggregated(d) for d in serving):
        job = next(d for d in serving if _disaggregated(d))
        url = sandbox.ensure_serving(
            job["metadata"].get("namespace", "default"),
            job["metadata"]["name"],
            progress=lambda msg: console.print(f"[dim]{msg}[/dim]"),
        )
        for doc in serving:  # the sandbox's own Prometheus, not the manifests' placeholder
            prometheus = ((doc["spec"].get("autoscaling") or {}).get("prometheus")) or {}
            if prometheus:
                prometheus["url"] = url
    sandbox.apply(docs)
    console.print("[dim]waiting for gpufleet to place the jobs[/dim]")
    _wait_for_jobs(sandbox)
    nodes = json.loads(sandbox.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    console.print(fleet_table(nodes))
    console.print(f"[bold]Example jobs ({len(manifests)} manifests applied):[/bold]")
    print(sandbox.kubectl("get", "trainingjobs,servingjobs", "-A").stdout)
    console.print("[bold]Queues (quota use and fair share):[/bold]")
    print(sandbox.kubectl("get", "gpuqueues", "-o", "wide").stdout)
    console.print("[bold]Why jobs wait:[/bold]")
    print(
        sandbox.kubectl(
            "get", "trainingjobs", "-A", "-o",
            "custom-columns=NAME:.metadata.name,PHASE:.status.phase,"
            "WHY:.status.conditions[?(@.type=='Admitted')].message",
        ).stdout
    )  # fmt: skip
    print(sandbox.kubectl("get", "pods", "-A", "-o", "wide").stdout)
    console.print(f"Use the cluster: export KUBECONFIG={sandbox.kubeconfig}")
    if admin := sandbox.admin_url():
        console.print(
            f"Dashboard and admin API: {admin}/ (self-signed certificate: "
            f"{sandbox.admin_tls_dir}/admin.crt)\n"
            f"  sign in with: kubectl create token {ADMIN_USER} -n {SYSTEM_NAMESPACE}\n"
            f"  gpufleet fleet --server {admin} --certificate-authority "
            f'{sandbox.admin_tls_dir}/admin.crt --token "$(kubectl create token {ADMIN_USER} '
            f'-n {SYSTEM_NAMESPACE})"'
        )
    if url:
        console.print(
            f"Prometheus scraping the simulated vLLM servers: {url}\n"
            "Load bursts every 9 minutes; watch the autoscaler follow them:\n"
            "  kubectl get sj -w\n  kubectl get events --field-selector reason=Scaled -w"
        )
