"""Scale benchmark: the placement core at fleet size, and the live system on 1,000-5,000 nodes.

`core` (no cluster): `place()` on synthetic 75 %-full fleets of 8-GPU nodes (the instances of
placement_bench.py) at 5,000 nodes x 5,000 pending gangs, --samples times with a new instance
each (p50/p99 of wall and CPU time), then a table of time against nodes x gangs and the
exponents of a least-squares fit `time ~ nodes^a * gangs^b` over it. With --queues K, every
instance is shared by K GPUQueues (`with_queues`: the fair-share order and aging then decide).

`live`: one private sandbox with a kwok fleet of --nodes 8-GPU nodes (40 % H100, 20 % A100,
40 % L4; or --fleet FILE) and `gpufleet operator` running, in this order:
1. node creation and Ready time (the sandbox's parallel creation, sandbox/fleetnodes.py);
2. operator resident memory (sampled every second for the whole run);
3. backlog drain against kube-scheduler (--drain-pods single-GPU pods, each scheduler paused
   with SIGSTOP while they are created, as bind_bench.py does), one round each;
4. with --fill SHARE, first whole-node pods of a priority above the backlog's, not preemptible,
   on SHARE of each pool's nodes, bound by the operator (so that on a big fleet the backlog
   stays pending instead of fitting at once);
5. --gangs gangs of 1-4 pods of 1-8 GPUs created while the operator is stopped, then the
   operator started again, so that its first cycle sees every gang pending: per scheduling
   cycle that binds something, its wall time, snapshot build time and the gangs still pending
   (the operator's cycle log lines); for every cycle, the bucket bounds of p50 and p99 from the
   operator's cycle-time histogram (the cycles that bind nothing are not logged);
6. with that backlog in place (a busy fleet), `kubectl apply` of a --workers-worker
   TrainingJob of priority 5 in its own GPUQueue (a nominal quota of its GPUs: it may reclaim
   them from the backlog, which is outside every queue) until every worker is Running.
Each result is printed as it is reached; SIGINT (`timeout -s INT`) or the machine using more than
--max-memory-gib stops the run, tears the sandbox down and reports what was reached.

    python bench/scale_bench.py core                        # ~10 min on 2 idle cores
    python bench/scale_bench.py core --samples 5 --nodes-list 500,1000,2000 --gangs-list 500,1000
    python bench/scale_bench.py core --queues 8 ...         # the same, shared by 8 GPUQueues
    python bench/scale_bench.py live --nodes 1000           # drain 5,000 pods on 1,000 nodes
    timeout -s INT 2400 python bench/scale_bench.py live --nodes 5000 --drain-pods 0 --fill 0.9

Prints tables; the last line is one JSON object.
"""

from __future__ import annotations

import _thread
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from bind_bench import Hold, PodClock, measure_throughput
from placement_bench import make_instance, pct

from gpufleet.cliargs import (
    OneLineParser,
    fraction,
    input_error_exit,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
)
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.model.contract import names
from gpufleet.model.contract.resources import gpu_resources
from gpufleet.model.contract.wishes import TypeOption, wish_annotations
from gpufleet.model.fleet import FleetSpec, load_fleet
from gpufleet.model.input_error import InputError
from gpufleet.model.migparted import load_default_configs
from gpufleet.operator.podtemplate import GPU_TOLERATIONS
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.fleetnodes import create_all
from gpufleet.sandbox.node_manifests import sandbox_pool_check
from gpufleet.scheduler.runtime import api_client
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

PROG = "scale_bench.py"
GPU_MIX = (("h100", "H100-80GB", 0.4, 8), ("a100", "A100-80GB", 0.2, 8), ("l4", "L4", 0.4, 1))
BACKLOG_PRIORITY = (0, 0, 1, 2)
LATENCY_PRIORITY = 5  # the measured job's
FILL_PRIORITY = 9  # above the backlog's: the fill is never its victim
LATENCY_QUEUE = "bench-latency"
BACKLOG_NS = "bench-backlog"
HISTOGRAM_LINE = re.compile(r'gpufleet_scheduler_cycle_seconds_bucket\{le="([^"]+)"\} ([0-9.e+]+)')
CYCLE_LINE = re.compile(
    r"cycle=(\d+) sent=(\d+) .* pending=(\d+) in ([0-9.]+)s \((.*)\)\s*$"
)  # the scheduler's per-cycle log line (scheduler/loop.py)


# --- core ----------------------------------------------------------------------------------------


def with_queues(
    snapshot: Snapshot, pending: list[Gang], queues: int, seed: int
) -> tuple[Snapshot, list[Gang]]:
    """The instance shared by `queues` GPUQueues of equal weight, each with an equal part of
    every type's GPUs as nominal quota (rounded down): running and pending gangs go to queues at
    random (so the queues stand at different shares), and a pending gang has waited 0-2 hours
    (about half of them past the default aging time), so the fair-share order and aging decide."""
    rng = random.Random(seed)
    per_type: dict[str, int] = {}
    for node in snapshot.nodes:
        per_type[node.gpu_type] = per_type.get(node.gpu_type, 0) + node.gpu_count
    names_ = [f"q{i}" for i in range(queues)]
    quotas = {t: Quota(n // queues) for t, n in per_type.items()}
    tree = QueueTree.build(QueueSpec(q, quotas=quotas) for q in names_)
    running = tuple(replace(r, queue=rng.choice(names_)) for r in snapshot.running)
    gangs = [
        replace(g, queue=rng.choice(names_), waited_s=rng.uniform(0.0, 7200.0)) for g in pending
    ]
    return replace(snapshot, running=running, queues=tree), gangs


def timed_place(
    nodes: int, gangs: int, seed: int, policy: Policy, queues: int = 0
) -> tuple[float, float, str]:
    """(wall s, CPU s, engine that decided) of one place() on a fresh instance (shared by
    `queues` queues, `with_queues`, when not 0)."""
    snapshot, pending = make_instance(nodes, gangs, seed=seed)
    if queues:
        snapshot, pending = with_queues(snapshot, pending, queues, seed)
    wall, cpu = time.perf_counter(), time.process_time()
    decision = place(snapshot, pending, policy)
    return time.perf_counter() - wall, time.process_time() - cpu, decision.stats.engine


def validator_cpu(
    nodes: int, gangs: int, seed: int, policy: Policy, queues: int = 0
) -> tuple[float, int, int]:
    """(CPU s, preemptions, problems found) of the core's validator (`decision_problems`, with
    the queues' rules) on the decision `timed_place` times for the same instance."""
    snapshot, pending = make_instance(nodes, gangs, seed=seed)
    if queues:
        snapshot, pending = with_queues(snapshot, pending, queues, seed)
    decision = place(snapshot, pending, policy)
    cpu = time.process_time()
    problems = decision_problems(snapshot, pending, decision, policy.service_tier_gpu_s)
    return time.process_time() - cpu, len(decision.preemptions), len(problems)


def fit_exponents(cells: list[tuple[int, int, float]]) -> tuple[float, float]:
    """Least-squares (a, b) of log t = c + a log nodes + b log gangs."""
    rows = [(math.log(n), math.log(g), math.log(t)) for n, g, t in cells]
    mx = statistics.fmean(r[0] for r in rows)
    my = statistics.fmean(r[1] for r in rows)
    mt = statistics.fmean(r[2] for r in rows)
    sxx = sum((x - mx) ** 2 for x, _, _ in rows)
    syy = sum((y - my) ** 2 for _, y, _ in rows)
    sxy = sum((x - mx) * (y - my) for x, y, _ in rows)
    sxt = sum((x - mx) * (t - mt) for x, _, t in rows)
    syt = sum((y - my) * (t - mt) for _, y, t in rows)
    det = sxx * syy - sxy * sxy
    if det == 0:
        raise ValueError("the table needs at least two node counts and two gang counts")
    return (syy * sxt - sxy * syt) / det, (sxx * syt - sxy * sxt) / det


def run_core(args: Any) -> dict[str, Any]:
    policy = Policy()
    greedy = Policy(solver=replace(SolverSettings(), engine=Engine.GREEDY))
    place(*make_instance(10, 10, seed=0), policy)  # imports and warms OR-Tools, not timed
    shared = f", {args.queues} queues" if args.queues else ""
    print(f"{args.nodes} nodes x {args.gangs} gangs{shared}, {args.samples} instances (s):",
          flush=True)  # fmt: skip
    target: dict[str, list[float]] = {
        "wall": [], "cpu": [], "greedy_wall": [], "validator_cpu": []
    }  # fmt: skip
    engines: dict[str, int] = {}
    for s in range(args.samples):
        wall, cpu, engine = timed_place(args.nodes, args.gangs, 7000 + s, policy, args.queues)
        gwall, _, _ = timed_place(args.nodes, args.gangs, 7000 + s, greedy, args.queues)
        vcpu, evicted, wrong = validator_cpu(args.nodes, args.gangs, 7000 + s, policy, args.queues)
        target["wall"].append(wall)
        target["cpu"].append(cpu)
        target["greedy_wall"].append(gwall)
        target["validator_cpu"].append(vcpu)
        engines[engine] = engines.get(engine, 0) + 1
        print(f"  sample {s + 1}: wall {wall:.2f} cpu {cpu:.2f} ({engine}); greedy {gwall:.2f}; "
              f"validator cpu {vcpu:.3f} ({evicted} preemptions, {wrong} problems)")  # fmt: skip
    summary = {
        k: {"p50": round(pct(v, 0.5), 3), "p99": round(pct(v, 0.99), 3)} for k, v in target.items()
    }
    print(f"  p50/p99 wall {summary['wall']['p50']}/{summary['wall']['p99']}  "
          f"cpu {summary['cpu']['p50']}/{summary['cpu']['p99']}  engines {engines}")  # fmt: skip
    print(f"  validator cpu p50/p99 {summary['validator_cpu']['p50']}/"
          f"{summary['validator_cpu']['p99']}")  # fmt: skip
    print("time (s, median of wall / of CPU) against nodes x gangs:", flush=True)
    cells: list[tuple[int, int, float]] = []
    cpu_cells: list[tuple[int, int, float]] = []
    table = []
    for n in args.nodes_list:
        for g in args.gangs_list:
            runs = [
                timed_place(n, g, 100 * n + g + s, policy, args.queues)
                for s in range(args.table_samples)
            ]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            cells.append((n, g, wall))
            cpu_cells.append((n, g, cpu))
            table.append({"nodes": n, "gangs": g, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                          "engines": sorted({r[2] for r in runs})})  # fmt: skip
            print(f"  {n:>5} x {g:>5}: {wall:7.3f} / {cpu:7.3f}", flush=True)
    a, b = fit_exponents(cells)
    ca, cb = fit_exponents(cpu_cells)
    print(f"  fit: wall ~ nodes^{a:.2f} x gangs^{b:.2f}; CPU ~ nodes^{ca:.2f} x gangs^{cb:.2f}")
    print(f"  both grown together: wall ~ size^{a + b:.2f}, CPU ~ size^{ca + cb:.2f}")
    return {
        "bench": "scale-core",
        "nodes": args.nodes,
        "gangs": args.gangs,
        "samples": args.samples,
        "queues": args.queues,
        "target": summary,
        "target_engines": engines,
        "p99_wall_ok": summary["wall"]["p99"] <= 3.0,
        "table": table,
        "exponent_wall": {"nodes": round(a, 3), "gangs": round(b, 3)},
        "exponent_cpu": {"nodes": round(ca, 3), "gangs": round(cb, 3)},
        "load_average": os.getloadavg(),
    }


# --- live ----------------------------------------------------------------------------------------


def default_fleet(nodes: int) -> dict[str, Any]:
    """`nodes` 8-GPU nodes: 40 % H100, 20 % A100, 40 % L4, with the GPU Operator's taint."""
    pools = []
    left = nodes
    for i, (name, gpu, share, domain) in enumerate(GPU_MIX):
        count = left if i == len(GPU_MIX) - 1 else round(nodes * share)
        left -= count
        pools.append({"name": name, "count": count, "gpuType": gpu, "gpusPerNode": 8,
                      "nvlinkDomainSize": domain,
                      "taints": ["nvidia.com/gpu=present:NoSchedule"]})  # fmt: skip
    return {"nodePools": pools}


def gang_pod(gang: str, rank: int, annotations: dict[str, str], gpus: int) -> dict[str, Any]:
    """One pod of a gang, labelled and annotated as the operator writes them."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{gang}-{rank}",
            "labels": {names.GANG_LABEL: gang, names.RANK_LABEL: str(rank)},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            "tolerations": list(GPU_TOLERATIONS),
            "containers": [
                {
                    "name": "w",
                    "image": "registry.example/x:1",
                    "resources": {"limits": gpu_resources(gpus, None)},
                }
            ],
        },
    }


def gang_pods(index: int, rng: random.Random, types: list[str]) -> list[dict[str, Any]]:
    """The pods of one backlog gang: 1-4 pods of 1-8 GPUs of one or two types."""
    replicas = rng.choices((1, 2, 4), weights=(60, 30, 10))[0]
    gpus = rng.choices((1, 2, 4, 8), weights=(40, 30, 20, 10))[0]
    wanted = rng.sample(types, rng.choice((1, 1, 2)))
    annotations = wish_annotations(
        priority=rng.choice(BACKLOG_PRIORITY),
        preemptible=True,
        gang_size=replicas,
        gpu_types=[TypeOption(t) for t in wanted],
    )
    return [gang_pod(f"g{index:05d}", r, annotations, gpus) for r in range(replicas)]


def fill_pods(spec: FleetSpec, share: float) -> list[dict[str, Any]]:
    """Whole-node pods of a higher priority than the backlog, not preemptible, for `share` of
    each pool's nodes: work the backlog cannot take, so that it stays pending on a busy fleet."""
    pods = []
    for pool in spec.node_pools:
        annotations = wish_annotations(
            priority=FILL_PRIORITY, preemptible=False, gang_size=1,
            gpu_types=[TypeOption(pool.gpu_type)],
        )  # fmt: skip
        for i in range(round(pool.count * share)):
            pods.append(gang_pod(f"fill-{pool.name}-{i:05d}", 0, annotations, pool.gpus_per_node))
    return pods


def latency_queue(workers: int) -> dict[str, Any]:
    """The measured job's own GPUQueue: a nominal quota of its L4 GPUs, so that it is first in
    the fair-share order and may reclaim them from the backlog (outside every queue)."""
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUQueue",
        "metadata": {"name": LATENCY_QUEUE},
        "spec": {"quotas": [{"gpuType": "L4", "nominal": workers}]},
    }


def latency_job(workers: int) -> dict[str, Any]:
    """The measured TrainingJob: `workers` workers of one L4 each, in its own queue."""
    manifest = training_job("bench", workers, 1, "L4", priority=LATENCY_PRIORITY)
    manifest["spec"]["queue"] = LATENCY_QUEUE
    return manifest


def used_memory_gib(meminfo: str) -> float:
    """Memory in use on the machine (MemTotal - MemAvailable) from /proc/meminfo's text."""
    fields = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        fields[key] = int(rest.split()[0]) if rest.split() else 0
    return (fields["MemTotal"] - fields["MemAvailable"]) / 2**20


class MemoryGuard:
    """Interrupts the run (KeyboardInterrupt in the main thread, so every sandbox process is
    stopped on the way out) once the machine uses more than `limit_gib`."""

    def __init__(self, limit_gib: float) -> None:
        self.limit_gib = limit_gib
        self.peak_gib = 0.0
        self.tripped = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            used = used_memory_gib(Path("/proc/meminfo").read_text())
            self.peak_gib = max(self.peak_gib, used)
            if used > self.limit_gib and not self.tripped:
                self.tripped = True
                print(f"memory guard: {used:.1f} GiB in use > {self.limit_gib} GiB, stopping",
                      file=sys.stderr, flush=True)  # fmt: skip
                _thread.interrupt_main()

    def __enter__(self) -> MemoryGuard:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()


class RssSampler:
    """The operator's resident memory (MiB) every second, from /proc."""

    def __init__(self, operator: OperatorProcess) -> None:
        self.operator = operator  # its process changes when it is started again
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()

    def now(self) -> float:
        for line in Path(f"/proc/{self.operator.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.samples.append((time.monotonic() - self.started, self.now()))
            except OSError:
                continue  # between a stop and the next start

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds a process has used since it started (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cycle_lines(log: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Cycle log lines after byte `offset`; and the new offset."""
    with log.open("rb") as f:
        f.seek(offset)
        data = f.read()
    cycles = []
    for line in data.decode(errors="replace").splitlines():
        m = CYCLE_LINE.search(line)
        if not m:
            continue
        phases = dict(p.split("=") for p in m.group(5).split())
        cycles.append(
            {
                "cycle": int(m.group(1)),
                "sent": int(m.group(2)),
                "pending": int(m.group(3)),
                "seconds": float(m.group(4)),
                "snapshot_s": float(phases.get("snapshot", "0ms").removesuffix("ms")) / 1000,
                "cpu_s": float(phases.get("cpu", "0ms").removesuffix("ms")) / 1000,
            }
        )
    return cycles, offset + len(data)


def create_pods(kubeconfig: Path, ns: str, pods: list[dict[str, Any]]) -> None:
    """Create `pods` in `ns` with parallel POSTs (201 means each exists)."""
    created = create_all(kubeconfig, f"/api/v1/namespaces/{ns}/pods", pods, "pod")
    if created != len(pods):
        raise RuntimeError(f"{len(pods) - created} of {len(pods)} pods existed already in {ns}")


def bound_pods(kube: Kube, ns: str) -> int:
    return sum(1 for p in kube.pods(ns) if p["spec"].get("nodeName"))


def cycle_histogram(port: int) -> dict[float, float]:
    """The scheduler's cycle-time histogram (upper bound -> cumulative count) from /metrics;
    empty when the operator does not answer within a minute (busy deciding on a big fleet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
            text = response.read().decode()
    except OSError:
        return {}
    buckets = {}
    for m in HISTOGRAM_LINE.finditer(text):
        buckets[float(m.group(1))] = float(m.group(2))
    return buckets


def bucket_quantile(buckets: dict[float, float], q: float) -> float | None:
    """The smallest bucket bound holding a `q` share of the cycles (an upper bound on the
    quantile); None without cycles."""
    total = buckets.get(math.inf, 0.0)
    if not total:
        return None
    return next(bound for bound, count in sorted(buckets.items()) if count >= q * total)


def fill_fleet(
    kube: Kube, kubeconfig: Path, spec: FleetSpec, share: float, timeout: float
) -> dict[str, Any]:
    """Bind the fill (fill_pods) through the running operator; seconds until all are bound."""
    pods = fill_pods(spec, share)
    started = time.monotonic()
    create_pods(kubeconfig, BACKLOG_NS, pods)
    created = time.monotonic() - started
    bound = 0
    while bound < len(pods) and time.monotonic() - started < timeout:
        time.sleep(5.0)
        bound = bound_pods(kube, BACKLOG_NS)
    gpus = sum(p.gpus_per_node * round(p.count * share) for p in spec.node_pools)
    done = round(time.monotonic() - started, 1) if bound >= len(pods) else None
    return {"pods": len(pods), "gpus": gpus, "create_s": round(created, 1), "bound": bound,
            "all_bound_s": done}  # fmt: skip


def measure_backlog(
    kube: Kube,
    kubeconfig: Path,
    operator: OperatorProcess,
    gangs: int,
    types: list[str],
    settle: float,
) -> dict[str, Any]:
    """Stop the operator, create the backlog, start the operator again (its first list sees
    every gang) and read its cycles until `settle` seconds pass without one that binds."""
    operator.stop()
    started = time.monotonic()
    rng = random.Random(gangs)
    pods = [pod for i in range(gangs) for pod in gang_pods(i, rng, types)]
    create_pods(kubeconfig, BACKLOG_NS, pods)
    created = time.monotonic() - started
    offset = operator.log.stat().st_size
    released = time.monotonic()
    operator.start(timeout=900)
    ready_at = time.monotonic()
    ready = ready_at - released
    cycles: list[dict[str, Any]] = []
    last_change = time.monotonic()
    while time.monotonic() - last_change < settle:
        time.sleep(1.0)
        new, offset = cycle_lines(operator.log, offset)
        if new:
            cycles.extend(new)
            last_change = time.monotonic()
            for c in new:
                print(f"  cycle {c['cycle']}: sent {c['sent']} pending {c['pending']} in "
                      f"{c['seconds']}s (cpu {c['cpu_s']}s, snapshot {c['snapshot_s']}s)",
                      flush=True)  # fmt: skip
    every = cycle_histogram(operator.metrics_port)
    seconds = [c["seconds"] for c in cycles]
    cpu = [c["cpu_s"] for c in cycles]
    snapshots = [c["snapshot_s"] for c in cycles]
    return {
        "gangs": gangs,
        "pods": len(pods),
        "create_s": round(created, 1),
        "operator_ready_s": round(ready, 1),
        "pods_bound": bound_pods(kube, BACKLOG_NS),
        "drain_s": round(last_change - ready_at, 1) if cycles else None,
        "cycles": len(cycles),
        "cycle_p50_s": round(pct(seconds, 0.5), 3) if cycles else None,
        "cycle_p99_s": round(pct(seconds, 0.99), 3) if cycles else None,
        "cycle_max_s": round(max(seconds), 3) if cycles else None,
        "cycle_cpu_p50_s": round(pct(cpu, 0.5), 3) if cycles else None,
        "cycle_cpu_p99_s": round(pct(cpu, 0.99), 3) if cycles else None,
        "operator_cpu_s": round(process_cpu_s(operator.pid), 1),
        "load_average": os.getloadavg(),
        "snapshot_p50_s": round(pct(snapshots, 0.5), 3) if cycles else None,
        "snapshot_max_s": round(max(snapshots), 3) if cycles else None,
        "pending_first": cycles[0]["pending"] if cycles else None,
        "pending_last": cycles[-1]["pending"] if cycles else None,
        "all_cycles": int(every.get(math.inf, 0)),
        "all_cycles_p50_le_s": bucket_quantile(every, 0.5),
        "all_cycles_p99_le_s": bucket_quantile(every, 0.99),
        "per_cycle": cycles,
    }


def measure_gang_latency(sandbox: Sandbox, kube: Kube, workers: int) -> dict[str, Any]:
    """Seconds from `kubectl apply` of the measured job (its own queue) to all its workers
    Running; on a timeout, the job's phase and conditions instead."""
    ns = "bench-latency"
    kube.create_namespace(ns)
    kube.custom.create_cluster_custom_object(
        "gpufleet.io", "v1alpha1", "gpuqueues", latency_queue(workers)
    )
    with PodClock(kube, ns) as clock:
        started = time.monotonic()
        sandbox.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(latency_job(workers)))
        try:
            wait_for(lambda: len(clock.running) >= workers, f"{workers} pods Running", 900)
        except AssertionError as exc:
            status = (kube.job(ns, "bench") or {}).get("status") or {}
            return {"error": str(exc), "running": len(clock.running), "status": status}
        return {"seconds": round(max(clock.running.values()) - started, 2),
                "bound_s": round(max(clock.bound.values()) - started, 2)}  # fmt: skip


class Stages:
    """Times the sandbox's progress messages (node creation and Ready)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {"start": time.monotonic()}

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        for key in ("creating", "created", "sandbox ready"):
            if message.startswith(key):
                self.at[key] = now
        print(f"[sandbox {now - self.at['start']:6.1f}s] {message}", file=sys.stderr, flush=True)

    def seconds(self, a: str, b: str) -> float | None:
        return round(self.at[b] - self.at[a], 1) if a in self.at and b in self.at else None


def run_live(args: Any) -> dict[str, Any]:
    """The live measurements in order; each result is printed as it is reached, and an
    interrupt (SIGINT, e.g. `timeout -s INT`, or the memory guard) stops the sandbox and
    returns what was reached."""
    out: dict[str, Any] = {"bench": "scale-live"}

    def reached(key: str, value: Any) -> None:
        out[key] = value
        print(json.dumps({key: value}), flush=True)

    guard = MemoryGuard(args.max_memory_gib)
    try:
        with guard, tempfile.TemporaryDirectory(prefix="gpufleet-scale-") as tmp:
            _live(args, Path(tmp), reached)
    except KeyboardInterrupt:
        out["stopped"] = "memory guard" if guard.tripped else "interrupted"
    out["machine_memory_peak_gib"] = round(guard.peak_gib, 1)
    out["load_average"] = os.getloadavg()
    return out


def _live(args: Any, root: Path, reached: Any) -> None:
    fleet = args.fleet or root / "fleet.yaml"
    if args.fleet is None:
        fleet.write_text(yaml.safe_dump(default_fleet(args.nodes)))
    spec = load_fleet(fleet)
    types = sorted({p.gpu_type for p in spec.node_pools})
    reached("nodes", spec.total_nodes)
    reached("gpus", spec.total_gpus)
    sandbox = Sandbox(root / "sandbox")
    stages = Stages()
    try:
        sandbox.up(fleet, progress=stages)
        reached("create_nodes_s", stages.seconds("creating", "created"))
        reached("nodes_ready_s", stages.seconds("creating", "sandbox ready"))
        kube = Kube(api_client(str(sandbox.kubeconfig)))
        log = args.operator_log or root / "operator.log"
        # A Lease far longer than a paused drain's creation; nodes flapping on a busy
        # machine must not count as failures to move gangs off.
        operator = OperatorProcess(
            sandbox.kubeconfig, log, kube.coordination,
            "--lease-duration=900", "--node-failure-grace=600",
        )  # fmt: skip
        started = time.monotonic()
        try:
            operator.start(timeout=900)
            reached("operator_ready_s", round(time.monotonic() - started, 1))
            with RssSampler(operator) as rss:
                reached("rss_idle_mib", round(rss.now(), 1))
                kube.create_namespace(BACKLOG_NS)
                if args.drain_pods:
                    reached("drain", drain(kube, sandbox, operator, args.drain_pods))
                if args.fill:
                    fill = fill_fleet(kube, sandbox.kubeconfig, spec, args.fill, 1800)
                    reached("fill", fill)
                    reached("rss_filled_mib", round(rss.now(), 1))
                backlog = measure_backlog(
                    kube, sandbox.kubeconfig, operator, args.gangs, types, args.settle
                )
                reached("backlog", backlog)
                reached("rss_backlog_mib", round(rss.now(), 1))
                reached("gang_latency", measure_gang_latency(sandbox, kube, args.workers))
                reached("violations", invariants.check(kube.core))
                reached("rss_end_mib", round(rss.now(), 1))
                reached("rss_peak_mib", round(max(v for _, v in rss.samples), 1))
                reached("rss_samples", [(round(t), round(v)) for t, v in rss.samples[::10]])
        finally:
            operator.stop()
        reached("sandbox_restarts", sandbox.status()["restarts"])
    finally:
        sandbox.down(progress=lambda _: None)


def drain(kube: Kube, sandbox: Sandbox, operator: OperatorProcess, pods: int) -> dict[str, Any]:
    """One round of bind_bench's paused-backlog drain, kube-scheduler first, on any GPU node."""
    result: dict[str, Any] = {}
    pid = sandbox.component_pid("kube-scheduler")
    assert pid is not None, "kube-scheduler is not running"
    for side, name, who in (("kube_scheduler", None, pid), ("gpufleet", "gpufleet", operator.pid)):
        hold = Hold(kube, "pause", who)
        tag = "drain-" + side.replace("_", "-")
        result[side] = measure_throughput(kube, pods, name, hold, tag, node_pool=None)
        print(f"drain {pods} pods, {side}: {result[side]}", flush=True)
    result["ratio"] = round(
        result["gpufleet"]["pods_per_s"] / result["kube_scheduler"]["pods_per_s"], 2
    )
    return result


def print_live(out: dict[str, Any]) -> None:
    """A summary of what the run reached (a stopped run lacks the later stages)."""
    print(
        f"live: {out.get('nodes')} nodes, {out.get('gpus')} GPUs; stopped: "
        f"{out.get('stopped', 'no')}; machine memory peak {out['machine_memory_peak_gib']} GiB"
    )
    if "nodes_ready_s" in out:
        print(
            f"  nodes created in {out['create_nodes_s']}s, all Ready {out['nodes_ready_s']}s "
            f"after creation began; operator leading and synced in "
            f"{out.get('operator_ready_s')}s; RSS idle {out.get('rss_idle_mib')} MiB"
        )
    if "drain" in out:
        d = out["drain"]
        print(
            f"  drain of {d['gpufleet']['pods']} pods: kube-scheduler "
            f"{d['kube_scheduler']['pods_per_s']} pods/s, gpufleet {d['gpufleet']['pods_per_s']}"
            f" pods/s, ratio {d['ratio']}"
        )
    if "fill" in out:
        f = out["fill"]
        print(f"  fill: {f['pods']} whole-node pods ({f['gpus']} GPUs), {f['bound']} bound, all "
              f"in {f['all_bound_s']}s; RSS {out.get('rss_filled_mib')} MiB")  # fmt: skip
    if "backlog" in out:
        b = out["backlog"]
        print(
            f"  backlog {b['gangs']} gangs ({b['pods']} pods, created in {b['create_s']}s): "
            f"{b['cycles']} binding cycles, pending {b['pending_first']} -> {b['pending_last']}, "
            f"{b['pods_bound']} pods bound {b['drain_s']}s after it led"
        )
        print(
            f"  cycle p50 {b['cycle_p50_s']}s p99 {b['cycle_p99_s']}s max {b['cycle_max_s']}s "
            f"(scheduler-thread CPU p50 {b['cycle_cpu_p50_s']}s p99 {b['cycle_cpu_p99_s']}s); "
            f"snapshot p50 {b['snapshot_p50_s']}s max {b['snapshot_max_s']}s (binding cycles)"
        )
        print(
            f"  all {b['all_cycles']} cycles (histogram buckets): p50 <= "
            f"{b['all_cycles_p50_le_s']}s, p99 <= {b['all_cycles_p99_le_s']}s; operator "
            f"restarted with the backlog, leading and synced in {b['operator_ready_s']}s; "
            f"operator CPU {b['operator_cpu_s']}s; load average then {b['load_average']}; "
            f"RSS {out.get('rss_backlog_mib')} MiB"
        )
    if "gang_latency" in out:
        print(f"  {LATENCY_QUEUE} job apply -> all Running on the busy fleet: "
              f"{out['gang_latency']}")  # fmt: skip
    if "violations" in out:
        print(
            f"  invariant violations {len(out['violations'])}; RSS peak "
            f"{out.get('rss_peak_mib')} MiB; sandbox restarts {out.get('sandbox_restarts')}"
        )
    print(f"  load average at the end {out['load_average']}")


# --- command line --------------------------------------------------------------------------------


def sizes(text: str) -> list[int]:
    return [positive_int(item.strip()) for item in text.split(",") if item.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    core = sub.add_parser("core", prog=PROG, help="the placement core, no cluster")
    core.add_argument("--nodes", type=positive_int, default=5000)
    core.add_argument("--gangs", type=positive_int, default=5000)
    core.add_argument("--samples", type=positive_int, default=20, help="instances at the target")
    core.add_argument("--nodes-list", type=sizes, default=[500, 1000, 2000, 5000])
    core.add_argument("--gangs-list", type=sizes, default=[500, 1000, 2000, 5000])
    core.add_argument("--table-samples", type=positive_int, default=3)
    core.add_argument("--queues", type=non_negative_int, default=0,
                      help="GPUQueues sharing each instance (0: none)")  # fmt: skip
    live = sub.add_parser("live", prog=PROG, help="a sandbox with the operator running")
    fleet = live.add_mutually_exclusive_group()
    fleet.add_argument("--nodes", type=positive_int, default=1000)
    fleet.add_argument("--fleet", type=Path, help="a fleet file instead of --nodes")
    live.add_argument("--gangs", type=positive_int, default=5000)
    live.add_argument("--drain-pods", type=non_negative_int, default=5000, help="0 skips the drain")
    live.add_argument("--workers", type=positive_int, default=64)
    live.add_argument("--settle", type=positive_int, default=30,
                      help="seconds without a binding cycle that end the backlog")  # fmt: skip
    live.add_argument("--fill", type=fraction, default=0.0,
                      help="share of each pool's nodes taken by whole-node work first")  # fmt: skip
    live.add_argument("--max-memory-gib", type=positive_float, default=16.0,
                      help="stop when the machine uses more memory than this")  # fmt: skip
    live.add_argument("--operator-log", type=output_file, default=None)
    args = parser.parse_args(argv)
    if args.mode == "core":
        if len(args.nodes_list) < 2 or len(args.gangs_list) < 2:
            parser.error("--nodes-list and --gangs-list need two sizes each for the exponent")
        result = run_core(args)
    else:
        if args.fleet is not None:
            try:  # a bad fleet file: one line naming the file, the line and the field
                load_fleet(args.fleet, check=sandbox_pool_check(load_default_configs()))
            except InputError as exc:
                return input_error_exit(PROG, exc)
        result = run_live(args)
        print_live(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
