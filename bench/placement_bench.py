"""Placement benchmark: CP-SAT vs greedy vs a kube-scheduler-like baseline on synthetic fleets.

Clusters of 8-GPU nodes over six GPU types (a quarter of the nodes MIG-capable, some GPUs already
cut into MIG slices), filled to about 75 % by running gangs placed at random (so free capacity is
fragmented), then a batch of pending gangs of mixed sizes, priorities, topologies and MIG slices.
For each instance it times place() with CP-SAT (default policy), with greedy, and with an
energy-aware policy, runs the kube-scheduler-like baseline (gpufleet.sim.kube_like, the same one
the simulator compares against), and scores all of them with the core's per-replica valuation
(gpufleet.core.valuation, as gpufleet.core.objective.evaluate does; partial gangs do no work).
The snapshot carries a workload estimate built from the pending gangs' shapes, so fragmentation
(FGD) and the node reserves are priced as in the live scheduler.

    python bench/placement_bench.py            # full run (about four minutes on 2 cores)
    python bench/placement_bench.py --quick    # short run (about 15 seconds)
    python bench/placement_bench.py --target-only --cpu --time-limit 60   # on a loaded machine

`--cpu` times the calls in CPU seconds of this process (CP-SAT's search threads included)
instead of wall-clock seconds: on a machine shared with other work, wall time measures the
load. With it, raise `--time-limit` so that CP-SAT's wall-clock safety net does not end the
search early (the deterministic limit then bounds it, as on an idle machine).
`--target-only` runs only the 1,000-node x 1,000-gang row the placement targets are set on.

Prints a table and ends with one JSON object on the last line.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.cliargs import OneLineParser, positive_float, positive_int
from gpufleet.core.demand import EnergyPreference, Gang, Topology, TypeOption
from gpufleet.core.objective import evaluate
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, PowerCapRule, SolverSettings, Weights
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.valuation import replica_value
from gpufleet.core.workload import ArrivalCounts
from gpufleet.model.gpus import load_catalog
from gpufleet.model.inventory import make_node
from gpufleet.model.mig import MigPlacement, make_layout
from gpufleet.sim.kube_like import KubeLikePolicy, partial_placements

CATALOG = load_catalog()
MIG_TYPES = ("H100-80GB", "A100-80GB")
OTHER_TYPES = ("L4", "A10", "T4", "V100-32GB")
# A mixed layout on MIG-mode GPUs: 3g + 2g + 1g + 1g (valid: starts 4, 0, 2, 3).
MIXED_80GB = make_layout(
    [
        MigPlacement(4, "3g.40gb"),
        MigPlacement(0, "2g.20gb"),
        MigPlacement(2, "1g.10gb"),
        MigPlacement(3, "1g.10gb"),
    ]
)


def make_instance(
    nodes: int, pending: int, seed: int, occupancy: float = 0.75
) -> tuple[Snapshot, list[Gang]]:
    rng = random.Random(seed)
    node_list = []
    for i in range(nodes):
        if i % 4 == 0:
            gpu_type = MIG_TYPES[(i // 4) % 2]
            # Half the MIG-capable nodes run two GPUs in MIG mode.
            mig = {0: MIXED_80GB, 1: MIXED_80GB} if (i // 4) % 4 < 2 else None
            node_list.append(make_node(f"n{i:04d}", CATALOG[gpu_type], 8, mig))
        else:
            node_list.append(make_node(f"n{i:04d}", CATALOG[OTHER_TYPES[i % 3 + (i % 7 == 0)]], 8))
    # Fill to the target occupancy with running gangs placed at random (fragmenting).
    free = {n.name: [g.index for g in n.gpus if g.mig_layout is None] for n in node_list}
    mig_free = {
        (n.name, g.index): list(g.mig_layout) for n in node_list for g in n.gpus if g.mig_layout
    }
    target = int(occupancy * nodes * 8)
    used = 0
    running: list[RunningGang] = []
    names = [n.name for n in node_list]
    types = {n.name: n.gpu_type for n in node_list}
    attempts = 0
    while used < target and attempts < nodes * 40:
        attempts += 1
        name = rng.choice(names)
        key = (name, rng.randrange(2))
        if key in mig_free and mig_free[key] and rng.random() < 0.5:
            inst = mig_free[key].pop(rng.randrange(len(mig_free[key])))
            running.append(
                RunningGang(
                    f"r{len(running)}",
                    types[name],
                    (ReplicaPlacement(name, (key[1],), inst),),
                    priority=rng.randrange(3),
                    preemptible=rng.random() < 0.7,
                )
            )
            used += 1
            continue
        size = rng.choice((1, 1, 1, 2, 2, 4))
        if len(free[name]) < size:
            continue
        gpus = tuple(sorted(rng.sample(free[name], size)))
        for g in gpus:
            free[name].remove(g)
        running.append(
            RunningGang(
                f"r{len(running)}",
                types[name],
                (ReplicaPlacement(name, gpus),),
                priority=rng.randrange(3),
                preemptible=rng.random() < 0.7,
            )
        )
        used += size
    gangs = make_pending(pending, rng)
    # The workload estimate the live scheduler would hold: the shapes of the gangs it has seen
    # (here the pending ones), so fragmentation and node reserves are priced in every engine.
    workload = ArrivalCounts().observed_gangs(gangs).estimate()
    return Snapshot(CATALOG, tuple(node_list), tuple(running), workload), gangs


def make_pending(count: int, rng: random.Random) -> list[Gang]:
    all_types = MIG_TYPES + OTHER_TYPES
    gangs: list[Gang] = []
    for i in range(count):
        priority = rng.choice((0, 0, 1, 1, 2, 3))
        if rng.random() < 0.1:
            t = rng.choice(MIG_TYPES)
            gangs.append(
                Gang(
                    f"p{i:04d}",
                    (TypeOption(t),),
                    replicas_min=1,
                    replicas_max=rng.choice((1, 1, 2, 3)),
                    mig_profile=rng.choice(("1g.10gb", "2g.20gb", "3g.40gb")),
                    priority=priority,
                )
            )
            continue
        size = rng.choices((1, 2, 4, 8), weights=(55, 20, 17, 8))[0]
        replicas = rng.choices((1, 2, 4), weights=(70, 20, 10))[0]
        low = replicas if rng.random() < 0.8 else 1
        options = rng.sample(all_types, rng.choice((1, 2, 2, 3)))
        topology = rng.choices(
            (Topology.ANY, Topology.NVLINK, Topology.SAME_NODE), weights=(70, 20, 10)
        )[0]
        if topology is Topology.SAME_NODE and size * replicas > 8:
            topology = Topology.ANY
        if topology is Topology.NVLINK:
            options = [t for t in options if CATALOG[t].nvlink_domain_size >= size] or [
                rng.choice(MIG_TYPES)
            ]
        gangs.append(
            Gang(
                f"p{i:04d}",
                tuple(TypeOption(t) for t in options),
                replicas_min=low,
                replicas_max=replicas,
                gpus_per_replica=size,
                priority=priority,
                topology=topology,
                energy=rng.choice(list(EnergyPreference)),
            )
        )
    return gangs


@dataclass
class Row:
    nodes: int
    pending: int
    times: dict[str, list[float]] = field(default_factory=dict)  # engine -> seconds
    gaps: list[float] = field(default_factory=list)
    fallbacks: int = 0
    ref_ratio: list[float] = field(default_factory=list)
    metrics: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, engine: str, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.metrics.setdefault(engine, {}).setdefault(key, []).append(value)

    def mean(self, engine: str, key: str) -> float:
        return statistics.fmean(self.metrics[engine][key])

    def watts_per_work(self, engine: str) -> float:
        return self.mean(engine, "power_w") / max(self.mean(engine, "work"), 1e-9)


def baseline_metrics(
    snapshot: Snapshot, pending: list[Gang], policy: Policy, seed: int
) -> dict[str, float]:
    """The kube-like baseline's admitted work and power, scored like the engines'.

    Its pods of one gang may land on different GPU types: the gang then runs at the pace of
    its slowest replica (data-parallel steps wait for every worker), while each replica draws
    the busy power of its own type. Partial gangs do no work; their GPUs are reported stranded.
    """
    decision = KubeLikePolicy(seed)(snapshot, pending, policy)
    partial = {p.gang_id for p in partial_placements(decision, pending)}
    gangs = {g.id: g for g in pending}
    work = weighted = power = 0.0
    admitted = 0
    for placement in decision.placements:
        if placement.gang_id in partial:
            continue
        gang = gangs[placement.gang_id]
        values = [
            replica_value(gang, CATALOG[snapshot.node(r.node).gpu_type], policy)
            for r in placement.replicas
        ]
        gang_work = min(v.work for v in values) * len(values)
        admitted += 1
        work += gang_work
        weighted += gang_work * policy.priority_weight(gang.priority)
        power += sum(v.power_w for v in values)
    stranded = sum(
        len(r.gpus)
        for p in decision.placements
        if p.gang_id in partial
        for r in p.replicas
        if r.mig is None
    )
    return {
        "work": work,
        "weighted_work": weighted,
        "power_w": power,
        "admitted": admitted,
        "stranded_gpus": stranded,
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(
    quick: bool, solver: SolverSettings, cpu: bool = False, target_only: bool = False
) -> dict[str, Any]:
    sizes = [100, 1000] if quick else [100, 500, 1000, 2000]
    pendings = [200, 1000] if quick else [200, 500, 1000]
    if target_only:
        sizes, pendings = [1000], [1000]
    clock = time.process_time if cpu else time.perf_counter
    seeds = range(3) if quick else range(7)
    # The 1,000 x 1,000 target row gets more samples so its p99 means something.
    target_seeds = range(5) if quick else range(25)
    ref_seconds = 10.0 if quick else 60.0
    policies = {
        "cpsat": Policy(solver=solver),
        "greedy": Policy(solver=replace(solver, engine=Engine.GREEDY)),
        # Energy-aware: energy weighs in the objective and efficient/balanced gangs get caps.
        "energy": Policy(
            solver=solver,
            weights=Weights(energy=2.0),
            power_caps=PowerCapRule(enabled=True, max_slowdown=0.1, cap_all=True),
        ),
    }
    scoring = policies["cpsat"]
    # Warm-up: the first CP-SAT call imports ortools (a one-off per process), not timed.
    place(*make_instance(10, 10, seed=0), scoring)
    rows: list[Row] = []
    print(HEADER)
    print("-" * len(HEADER))
    for nodes in sizes:
        for count in pendings:
            row = Row(nodes, count)
            for seed in target_seeds if (nodes, count) == (1000, 1000) else seeds:
                instance_seed = 1000 * nodes + count + seed
                snapshot, pending = make_instance(nodes, count, seed=instance_seed)
                for name, pol in policies.items():
                    start = clock()
                    decision = place(snapshot, pending, pol)
                    row.times.setdefault(name, []).append(clock() - start)
                    m = evaluate(snapshot, pending, decision, pol)
                    row.add(
                        name,
                        {
                            "work": m.work,
                            # Net of the work its preemptions took away.
                            "weighted_work": m.weighted_work - m.evicted_weighted_work,
                            "power_w": m.power_w,
                            "admitted": m.admitted,
                        },
                    )
                    if name != "cpsat":
                        continue
                    if decision.stats.engine != "cpsat":
                        row.fallbacks += 1
                    elif decision.stats.gap is not None:
                        row.gaps.append(decision.stats.gap)
                    if nodes <= 100 and seed == 0:
                        ref = replace(
                            pol,
                            solver=replace(
                                solver, time_limit_s=ref_seconds, deterministic_time=1e9
                            ),
                        )
                        long = place(snapshot, pending, ref)
                        ref_obj = evaluate(snapshot, pending, long, scoring).objective
                        row.ref_ratio.append(m.objective / ref_obj if ref_obj else 1.0)
                row.add("baseline", baseline_metrics(snapshot, pending, scoring, instance_seed))
            rows.append(row)
            print_row(row)
    summary = summarise(rows, quick, solver)
    summary["clock"] = "cpu" if cpu else "wall"
    return summary


HEADER = (
    f"{'nodes':>5} {'pend':>5} | {'cpsat p50':>9} {'p99':>6} | {'greedy p50':>10} {'p99':>6} | "
    f"{'gap':>6} {'fb':>2} | {'vs long':>7} | {'weighted work cpsat/greedy/energy/base':>38} | "
    f"{'W per work cpsat/energy/base':>28}"
)


def print_row(row: Row) -> None:
    gap = f"{max(row.gaps) * 100:5.2f}%" if row.gaps else "   n/a"
    ref = f"{min(row.ref_ratio) * 100:6.2f}%" if row.ref_ratio else "    -  "
    work = "/".join(
        f"{row.mean(e, 'weighted_work'):.0f}" for e in ("cpsat", "greedy", "energy", "baseline")
    )
    watts = "/".join(f"{row.watts_per_work(e):.1f}" for e in ("cpsat", "energy", "baseline"))
    print(
        f"{row.nodes:>5} {row.pending:>5} | {pct(row.times['cpsat'], 0.5):9.3f} "
        f"{pct(row.times['cpsat'], 0.99):6.3f} | {pct(row.times['greedy'], 0.5):10.3f} "
        f"{pct(row.times['greedy'], 0.99):6.3f} | {gap} {row.fallbacks:>2} | {ref} | "
        f"{work:>38} | {watts:>28}",
        flush=True,
    )


def summarise(rows: list[Row], quick: bool, solver: SolverSettings) -> dict[str, Any]:
    out: dict[str, Any] = {
        "benchmark": "placement",
        "quick": quick,
        "solver": {
            "time_limit_s": solver.time_limit_s,
            "deterministic_time": solver.deterministic_time,
            "workers": solver.workers,
        },
        "rows": [],
    }
    for row in rows:
        engines = list(row.metrics)
        out["rows"].append(
            {
                "nodes": row.nodes,
                "pending": row.pending,
                "samples": len(row.times["cpsat"]),
                "cpsat_p50_s": round(pct(row.times["cpsat"], 0.5), 4),
                "cpsat_p99_s": round(pct(row.times["cpsat"], 0.99), 4),
                "greedy_p50_s": round(pct(row.times["greedy"], 0.5), 4),
                "greedy_p99_s": round(pct(row.times["greedy"], 0.99), 4),
                "energy_p50_s": round(pct(row.times["energy"], 0.5), 4),
                "cpsat_max_gap": round(max(row.gaps), 5) if row.gaps else None,
                "cpsat_fallbacks": row.fallbacks,
                "objective_vs_long_solve": round(min(row.ref_ratio), 5) if row.ref_ratio else None,
                "weighted_work": {e: round(row.mean(e, "weighted_work"), 1) for e in engines},
                "work": {e: round(row.mean(e, "work"), 1) for e in engines},
                "power_w": {e: round(row.mean(e, "power_w")) for e in engines},
                "admitted": {e: round(row.mean(e, "admitted"), 1) for e in engines},
                "watts_per_work": {e: round(row.watts_per_work(e), 2) for e in engines},
                "baseline_stranded_gpus": round(row.mean("baseline", "stranded_gpus"), 1),
                "weighted_work_ratio_vs_baseline": round(
                    row.mean("cpsat", "weighted_work") / row.mean("baseline", "weighted_work"), 3
                ),
            }
        )
    target = [r for r in out["rows"] if r["nodes"] == 1000 and r["pending"] == 1000]
    if target:
        out["target_1000x1000"] = {
            "p50_s": target[0]["cpsat_p50_s"],
            "p99_s": target[0]["cpsat_p99_s"],
            "p50_ok": target[0]["cpsat_p50_s"] <= 1.0,
            "p99_ok": target[0]["cpsat_p99_s"] <= 3.0,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="placement_bench.py", description="Placement benchmark (see module docstring)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer sizes and seeds")
    defaults = SolverSettings()
    parser.add_argument("--time-limit", type=positive_float, default=defaults.time_limit_s)
    parser.add_argument("--det-time", type=positive_float, default=defaults.deterministic_time)
    parser.add_argument("--workers", type=positive_int, default=defaults.workers)
    parser.add_argument(
        "--cpu", action="store_true", help="time place() in CPU seconds, not wall-clock seconds"
    )
    parser.add_argument(
        "--target-only", action="store_true", help="only the 1,000 x 1,000 target row"
    )
    args = parser.parse_args(argv)
    solver = replace(
        defaults,
        time_limit_s=args.time_limit,
        deterministic_time=args.det_time,
        workers=args.workers,
    )
    summary = run(args.quick, solver, cpu=args.cpu, target_only=args.target_only)
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
