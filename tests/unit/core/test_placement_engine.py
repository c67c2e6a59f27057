"""place() with both engines: named table cases of small clusters -> expected placements,
MIG repartitions, power caps, elastic replica counts and topology; every decision is also run
through the independent validator."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from placement_builders import cluster, gang, layout

from gpufleet.core.decision import Decision
from gpufleet.core.demand import EnergyPreference, Gang, Topology
from gpufleet.core.objective import evaluate
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, PowerCapRule, SolverSettings, Weights
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.model.power import choose_power_cap, speed_factor

ENGINES = [Engine.GREEDY, Engine.CPSAT]


def policy(engine: Engine, **kwargs: object) -> Policy:
    return Policy(solver=SolverSettings(engine=engine), **kwargs)  # type: ignore[arg-type]


def decide(snapshot: Snapshot, pending: list[Gang], pol: Policy) -> Decision:
    decision = place(snapshot, pending, pol)
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@dataclass
class Case:
    snapshot: Snapshot
    pending: list[Gang]
    admitted: set[str]
    nodes: dict[str, set[str]] = field(default_factory=dict)  # gang -> nodes it must use
    replicas: dict[str, int] = field(default_factory=dict)
    gpu_type: dict[str, str] = field(default_factory=dict)


CASES = {
    "single-gpu-fits": Case(cluster().node("a", "H100-80GB").build(), [gang("g", gpus=1)], {"g"}),
    "gang-is-all-or-nothing": Case(
        cluster().node("a", "A100-80GB", 4).node("b", "A100-80GB", 4).build(),
        [gang("g", "A100-80GB", gpus=4, replicas=3)],
        set(),
    ),
    "replicas-spread-over-nodes": Case(
        cluster().node("a", "A100-80GB", 4).node("b", "A100-80GB", 4).build(),
        [gang("g", "A100-80GB", gpus=4, replicas=2)],
        {"g"},
        nodes={"g": {"a", "b"}},
    ),
    "same-node-needs-one-node": Case(
        cluster().node("a", "A100-80GB", 4).node("b", "A100-80GB", 4).build(),
        [gang("g", "A100-80GB", gpus=2, replicas=3, topology=Topology.SAME_NODE)],
        set(),
    ),
    "nvlink-replica-stays-in-a-domain": Case(
        cluster().node("t", "T4", 8).node("h", "H100-80GB", 8).build(),
        [gang("g", ("T4", "H100-80GB"), gpus=4, topology=Topology.NVLINK)],
        {"g"},
        nodes={"g": {"h"}},
    ),
    "pcie-gpus-have-no-nvlink": Case(
        cluster().node("t", "T4", 8).build(),
        [gang("g", "T4", gpus=2, topology=Topology.NVLINK)],
        set(),
    ),
    "elastic-takes-what-fits": Case(
        cluster().node("a", "L4", 8).run("r", "a", (0, 1, 2)).build(),
        [gang("g", "L4", gpus=2, replicas=(1, 4))],
        {"g"},
        replicas={"g": 2},
    ),
    "faster-type-preferred": Case(
        cluster().node("v", "V100-32GB", 8).node("h", "H100-80GB", 8).build(),
        [gang("g", ("V100-32GB", "H100-80GB"), gpus=8)],
        {"g"},
        gpu_type={"g": "H100-80GB"},
    ),
    "cordoned-node-is-skipped": Case(
        cluster().node("a", "A10", 8, schedulable=False).node("b", "A10", 8).build(),
        [gang("g", "A10", gpus=8)],
        {"g"},
        nodes={"g": {"b"}},
    ),
    "free-mig-slice-used-without-repartition": Case(
        cluster()
        .node("a", "A100-80GB", 1, mig={0: layout("3g.40gb@0", "3g.40gb@4")})
        .run("r", "a", (0,), mig="3g.40gb@0")
        .build(),
        [gang("m", "A100-80GB", mig="3g.40gb")],
        {"m"},
    ),
    "unknown-type-stays-pending": Case(
        cluster().node("a", "A10", 8).build(), [gang("g", "B300", gpus=1)], set()
    ),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", list(CASES))
def test_table(name: str, engine: Engine) -> None:
    case = CASES[name]
    decision = decide(case.snapshot, case.pending, policy(engine))
    assert decision.admitted_ids == case.admitted
    for gang_id, nodes in case.nodes.items():
        placement = decision.placement(gang_id)
        assert placement is not None
        assert {r.node for r in placement.replicas} == nodes
    for gang_id, count in case.replicas.items():
        placement = decision.placement(gang_id)
        assert placement is not None and placement.replica_count == count
    for gang_id, gpu_type in case.gpu_type.items():
        placement = decision.placement(gang_id)
        assert placement is not None and placement.gpu_type == gpu_type


@pytest.mark.parametrize("engine", ENGINES)
def test_mig_gang_repartitions_an_empty_gpu_to_a_valid_layout(engine: Engine) -> None:
    snapshot = (
        cluster()
        .node("a", "H100-80GB", 2, mig={0: layout(*(f"1g.10gb@{s}" for s in range(7)))})
        .run("r", "a", (0,), mig="1g.10gb@0")
        .build()
    )
    decision = decide(snapshot, [gang("m", mig="3g.40gb", replicas=2)], policy(engine))
    assert decision.admitted_ids == {"m"}
    # GPU 0 is in use so only GPU 1 may change.
    assert [(r.node, r.gpu) for r in decision.repartitions] == [("a", 1)]
    placement = decision.placement("m")
    assert placement is not None and {r.gpus for r in placement.replicas} == {(1,)}


@pytest.mark.parametrize("engine", ENGINES)
def test_repartitioning_can_be_disabled(engine: Engine) -> None:
    snapshot = cluster().node("a", "H100-80GB", 1).build()
    pol = policy(engine, allow_repartition=False)
    decision = decide(snapshot, [gang("m", mig="1g.10gb")], pol)
    assert decision.admitted_ids == set() and decision.repartitions == ()
    assert decision.pending[0].reason == "InsufficientMigSlices"
    assert decision.pending[0].message.endswith("0 free slices and repartitioning is disabled")


@pytest.mark.parametrize("engine", ENGINES)
def test_whole_gpu_use_of_an_empty_mig_gpu_switches_it_back(engine: Engine) -> None:
    snapshot = cluster().node("a", "A100-40GB", 1, mig={0: layout("7g.40gb@0")}).build()
    decision = decide(snapshot, [gang("g", "A100-40GB", gpus=1)], policy(engine))
    assert decision.admitted_ids == {"g"}
    assert [(r.gpu, r.new_layout) for r in decision.repartitions] == [(0, None)]


@pytest.mark.parametrize("engine", ENGINES)
def test_power_caps_follow_energy_preference(engine: Engine) -> None:
    snapshot = cluster().node("a", "H100-80GB", 8).build()
    pending = [
        gang("eco", gpus=2, energy=EnergyPreference.EFFICIENT),
        gang("fast", gpus=2, energy=EnergyPreference.PERFORMANCE),
        gang("mid", gpus=2, energy=EnergyPreference.BALANCED),
    ]
    pol = policy(engine, power_caps=PowerCapRule(enabled=True, max_slowdown=0.1))
    decision = decide(snapshot, pending, pol)
    caps = {p.gang_id: p.power_cap_w for p in decision.placements}
    assert caps["fast"] is None and caps["mid"] is None
    assert caps["eco"] is not None and 200 <= caps["eco"] < 700


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "rule",
    [
        pytest.param(PowerCapRule(), id="policy-caps-off"),
        pytest.param(PowerCapRule(enabled=True, max_slowdown=0.05, cap_all=True), id="energy"),
    ],
)
def test_a_gangs_own_slowdown_bounds_its_power_cap(engine: Engine, rule: PowerCapRule) -> None:
    # TrainingJob spec.energy.maxSlowdownPercent: the owner's tolerance replaces the policy's,
    # looser or tighter, and applies even where the policy caps nothing.
    snapshot = cluster().node("a", "H100-80GB", 8).build()
    h100 = snapshot.catalog["H100-80GB"]
    pending = [
        gang("loose", gpus=2, max_slowdown=0.2),
        gang("tight", gpus=2, max_slowdown=0.02),
        gang("plain", gpus=2),
    ]
    decision = decide(snapshot, pending, policy(engine, power_caps=rule))
    caps = {p.gang_id: p.power_cap_w for p in decision.placements}
    for gid, slowdown in (("loose", 0.2), ("tight", 0.02)):
        expected = choose_power_cap(h100, slowdown)
        assert expected is not None and caps[gid] == expected.cap_w
        assert speed_factor(h100, caps[gid]) >= 1 - slowdown
    assert caps["loose"] < caps["tight"]  # type: ignore[operator]
    plain = choose_power_cap(h100, rule.max_slowdown) if rule.enabled else None
    assert caps["plain"] == (None if plain is None else plain.cap_w)


def test_a_performance_gang_cannot_state_a_slowdown() -> None:
    with pytest.raises(ValueError, match="never power-capped"):
        gang("g", energy=EnergyPreference.PERFORMANCE, max_slowdown=0.1)
    with pytest.raises(ValueError, match=r"max_slowdown must be in \(0, 1\)"):
        gang("g", max_slowdown=1.0)


@pytest.mark.parametrize("engine", ENGINES)
def test_higher_priority_wins_contended_capacity(engine: Engine) -> None:
    snapshot = cluster().node("a", "A10", 4).build()
    pending = [gang("low", "A10", gpus=4), gang("high", "A10", gpus=4, priority=2)]
    decision = decide(snapshot, pending, policy(engine))
    assert decision.admitted_ids == {"high"}


@pytest.mark.parametrize("engine", ENGINES)
def test_packing_keeps_an_idle_node_idle(engine: Engine) -> None:
    snapshot = (
        cluster().node("busy", "A100-80GB").node("idle", "A100-80GB").run("r", "busy", (0,)).build()
    )
    decision = decide(snapshot, [gang("g", "A100-80GB", gpus=2)], policy(engine))
    placement = decision.placement("g")
    assert placement is not None and placement.replicas[0].node == "busy"


def test_cpsat_beats_greedy_where_largest_first_strands_a_gpu() -> None:
    # Two nodes with 4 free GPUs each. Greedy places the 3-GPU gang first (largest first) and
    # strands one GPU: 7 GPUs of work. The optimum drops it for four 2-GPU gangs: 8 GPUs.
    snapshot = (
        cluster()
        .node("a", "A100-80GB", 8)
        .node("b", "A100-80GB", 8)
        .run("r1", "a", (0, 1, 2, 3))
        .run("r2", "b", (0, 1, 2, 3))
        .build()
    )
    pending = [gang("three", "A100-80GB", gpus=3)] + [
        gang(f"two-{i}", "A100-80GB", gpus=2) for i in range(4)
    ]
    pol = policy(Engine.CPSAT)
    greedy = evaluate(snapshot, pending, decide(snapshot, pending, policy(Engine.GREEDY)), pol)
    cpsat = evaluate(snapshot, pending, decide(snapshot, pending, pol), pol)
    assert (greedy.admitted_gpus, cpsat.admitted_gpus) == (7, 8)
    assert cpsat.objective > greedy.objective


def test_cpsat_falls_back_to_greedy_when_out_of_time() -> None:
    snapshot = cluster().nodes_of("n", "A10", 4).build()
    pending = [gang(f"g{i}", "A10", gpus=1 + i % 3) for i in range(10)]
    pol = Policy(solver=SolverSettings(deterministic_time=1e-9, time_limit_s=1e-6))
    decision = decide(snapshot, pending, pol)
    greedy = decide(snapshot, pending, policy(Engine.GREEDY))
    assert decision.stats.engine == "greedy-fallback"
    assert decision.placements == greedy.placements


def test_cpsat_reports_status_and_gap() -> None:
    snapshot = cluster().nodes_of("n", "H100-80GB", 3).build()
    decision = decide(snapshot, [gang("g", gpus=4, replicas=2)], policy(Engine.CPSAT))
    assert decision.stats.engine == "cpsat"
    assert decision.stats.status == "OPTIMAL" and decision.stats.gap == pytest.approx(0.0)


def test_energy_weight_moves_work_to_better_performance_per_watt() -> None:
    snapshot = cluster().node("h", "H100-80GB", 8).node("l", "L4", 8).build()
    # Serving-like job: as fast on L4 as on H100.
    job = gang("infer", ("H100-80GB", "L4"), gpus=2, throughput={"H100-80GB": 1.0, "L4": 1.0})
    fast = decide(snapshot, [job], policy(Engine.CPSAT))
    green = decide(snapshot, [job], policy(Engine.CPSAT, weights=Weights(energy=1.0)))
    fast_p, green_p = fast.placement("infer"), green.placement("infer")
    assert fast_p is not None and green_p is not None
    assert green_p.gpu_type == "L4"


def test_duplicate_pending_ids_are_rejected() -> None:
    snapshot = cluster().node("a", "A10").build()
    with pytest.raises(ValueError, match="unique"):
        place(snapshot, [gang("g", "A10"), gang("g", "A10")], Policy())
