"""Placement scenarios: each YAML file in placement/ describes nodes, running and pending gangs
and a policy, and the properties the decision must have. The runner builds the snapshot, calls
place(), checks the hard rules with the validator, then the file's expectations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.core.decision import Decision
from gpufleet.core.demand import EnergyPreference, Gang, Topology, TypeOption
from gpufleet.core.objective import evaluate
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, PowerCapRule, SolverSettings, Weights
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.model.gpus import load_catalog
from gpufleet.model.inventory import make_node
from gpufleet.model.mig import MigPlacement, make_layout
from gpufleet.sim.kube_like import KubeLikePolicy, partial_placements

CATALOG = load_catalog()
FILES = sorted((Path(__file__).parent / "placement").glob("*.yaml"))


def _slice(spec: str) -> MigPlacement:
    profile, start = spec.split("@")
    return MigPlacement(int(start), profile)


def build_snapshot(doc: dict[str, Any]) -> Snapshot:
    nodes = []
    for n in doc["nodes"]:
        mig = {
            int(g): make_layout(_slice(s) for s in specs) for g, specs in n.get("mig", {}).items()
        }
        nodes.append(
            make_node(n["name"], CATALOG[n["type"]], n["gpus"], mig, n.get("schedulable", True))
        )
    types = {n.name: n.gpu_type for n in nodes}
    running: dict[str, RunningGang] = {}
    for r in doc.get("running", []):
        mig = _slice(r["mig"]) if "mig" in r else None
        replica = ReplicaPlacement(r["node"], tuple(r["gpus"]), mig)
        previous = running.get(r["id"])
        running[r["id"]] = RunningGang(
            r["id"],
            types[r["node"]],
            (*(previous.replicas if previous else ()), replica),
            r.get("priority", 0),
            r.get("preemptible", True),
            queue=r.get("queue"),
        )
    return Snapshot(
        CATALOG, tuple(nodes), tuple(running.values()), queues=build_queues(doc.get("queues"))
    )


def build_queues(specs: list[dict[str, Any]] | None) -> QueueTree | None:
    """`queues: [{name, parent, weight, quotas: {TYPE[/PROFILE]: N or {nominal, ...}}}]`."""
    if specs is None:
        return None
    out = []
    for q in specs:
        quotas = {}
        for resource, value in (q.get("quotas") or {}).items():
            fields = {"nominal": value} if isinstance(value, int) else value
            quotas[resource] = Quota(
                fields["nominal"], fields.get("borrowing_limit"), fields.get("lending_limit")
            )
        out.append(
            QueueSpec(
                q["name"],
                q.get("parent"),
                q.get("weight", 1.0),
                quotas,
                q.get("priority_min", 0),
                q.get("priority_max"),
            )
        )
    return QueueTree.build(out)


def build_gangs(doc: dict[str, Any]) -> list[Gang]:
    gangs = []
    for g in doc["pending"]:
        replicas = g.get("replicas", 1)
        low, high = (replicas, replicas) if isinstance(replicas, int) else replicas
        speeds = g.get("throughput", {})
        gangs.append(
            Gang(
                id=g["id"],
                acceptable=tuple(TypeOption(t, speeds.get(t)) for t in g["types"]),
                replicas_min=low,
                replicas_max=high,
                gpus_per_replica=g.get("gpus", 1),
                mig_profile=g.get("mig"),
                priority=g.get("priority", 0),
                preemptible=g.get("preemptible", True),
                topology=Topology(g.get("topology", "any")),
                energy=EnergyPreference(g.get("energy", "balanced")),
                waited_s=g.get("waited_s", 0.0),
                queue=g.get("queue"),
            )
        )
    return gangs


def build_policy(spec: dict[str, Any]) -> Policy:
    return Policy(
        weights=Weights(**spec.get("weights", {})),
        power_caps=PowerCapRule(**spec.get("power_caps", {})),
        solver=SolverSettings(engine=Engine(spec.get("engine", "cpsat"))),
        allow_preemption=spec.get("allow_preemption", True),
        allow_repartition=spec.get("allow_repartition", True),
    )


def check(decision: Decision, expect: dict[str, Any]) -> None:
    if "admitted" in expect:
        assert decision.admitted_ids == set(expect["admitted"])
    for gang_id, reason in expect.get("pending", {}).items():
        pending = decision.pending_for(gang_id)
        assert pending is not None and pending.reason == reason, pending
    for gang_id, message in expect.get("messages", {}).items():
        pending = decision.pending_for(gang_id)
        assert pending is not None and pending.message == message
    if "repartitioned" in expect:
        got = [[r.node, r.gpu] for r in decision.repartitions]
        assert got == expect["repartitioned"]
    if "preempted" in expect:
        assert [p.gang_id for p in decision.preemptions] == expect["preempted"]
    if "reclaimed" in expect:
        assert [p.gang_id for p in decision.preemptions if p.reclaim] == expect["reclaimed"]
    for gang_id, gpu_type in expect.get("types", {}).items():
        placement = decision.placement(gang_id)
        assert placement is not None and placement.gpu_type == gpu_type
    for gang_id, count in expect.get("replicas", {}).items():
        placement = decision.placement(gang_id)
        assert placement is not None and placement.replica_count == count
    if "nodes_used" in expect:
        used = {r.node for p in decision.placements for r in p.replicas}
        assert used == set(expect["nodes_used"])


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path) -> None:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    snapshot, pending = build_snapshot(doc), build_gangs(doc)
    policy = build_policy(doc.get("policy", {}))
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision) == []
    # Every gang left pending carries a reason (the validator checks none is missing).
    assert all(p.reason and p.message for p in decision.pending)
    check(decision, doc.get("expect", {}))
    if "baseline_admitted" in doc["expect"]:
        baseline = KubeLikePolicy()(snapshot, pending, policy)
        partial = {p.gang_id for p in partial_placements(baseline, pending)}
        admitted = baseline.admitted_ids - partial
        assert admitted == set(doc["expect"]["baseline_admitted"])
        assert len(decision.admitted_ids) > len(admitted)
    if "compare" in doc:
        other_policy = build_policy(doc["compare"]["policy"])
        other = place(snapshot, pending, other_policy)
        assert decision_problems(snapshot, pending, other) == []
        check(other, doc["compare"].get("expect", {}))
        mine = evaluate(snapshot, pending, decision, policy)
        theirs = evaluate(snapshot, pending, other, other_policy)
        if doc["compare"].get("work_not_lower"):
            assert theirs.work >= mine.work - 1e-9
        if doc["compare"].get("power_lower"):
            assert theirs.power_w < mine.power_w


def test_every_scenario_file_is_collected() -> None:
    assert len(FILES) >= 7
