"""Idle GPU-seconds with demand (`tenant_metrics.IdleMonitor`) against hand-computed values.

Aspects: whether a waiting gang fits idle GPUs by their count, node by node (replica by
replica; a same-node gang on one node) and never as a MIG gang; idle GPUs gathered on whole
nodes and those a waiting gang fits once so packed (fragmented, against a shape no node of the
type holds); the integral of a hand-built
timeline (steps clipped to the span, the last step held to its end, idle GPUs of a type counted
only while a waiting gang fits them, the part a decision left apart from the part awaiting the
next cycle); the monitor's steps from the engine's calls (one per change, the last state of one
instant, what the last decision left carried until the next one); replays: a queue held at its
borrowing limit leaves idle GPUs its waiting gang fits (nonzero, left by a decision, for
gpufleet and the Kueue-like baseline alike), an arrival waits for the next cycle with every GPU
idle (nonzero, none of it left by a decision), and watching a replay does not change it.
"""

from __future__ import annotations

import pytest

from gpufleet.core.demand import Gang, Topology, TypeOption
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.engine import SimSettings, Simulation
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.runner import Workload, speed_model
from gpufleet.sim.tenant_metrics import (
    IdleMonitor,
    IdleStep,
    gang_fits_idle,
    idle_gpu_seconds,
    packed,
)
from gpufleet.sim.tenant_run import SimClock, make_tenant_policy, run_tenants
from gpufleet.testing.limit_scene import limited_setup, trace_job

MODEL = "ResNet-50 (batch size 64)"
V100 = "V100-32GB"
FLEET = FleetSpec(node_pools=[NodePoolSpec(name="v", count=2, gpu_type=V100, gpus_per_node=8)])


def _gang(gid: str, replicas: int, per_replica: int = 1, **kw: object) -> Gang:
    return Gang(
        id=gid,
        acceptable=(TypeOption("A"),),
        replicas_min=replicas,
        replicas_max=replicas,
        gpus_per_replica=per_replica,
        **kw,  # type: ignore[arg-type]
    )


def test_a_gang_fits_idle_gpus_by_count_or_node_by_node() -> None:
    spread = [3, 3]  # 6 idle GPUs on two nodes
    two_by_two = _gang("g", 2, per_replica=2)
    assert gang_fits_idle(two_by_two, spread, node_by_node=False)
    assert gang_fits_idle(two_by_two, spread, node_by_node=True)  # one replica per node
    four_by_one_node = _gang("h", 1, per_replica=4)
    assert gang_fits_idle(four_by_one_node, spread, node_by_node=False)
    assert not gang_fits_idle(four_by_one_node, spread, node_by_node=True)  # no node has 4
    same_node = _gang("s", 4, topology=Topology.SAME_NODE)
    assert not gang_fits_idle(same_node, spread, node_by_node=True)
    assert gang_fits_idle(same_node, [4, 1], node_by_node=True)
    assert not gang_fits_idle(_gang("big", 7), spread, node_by_node=False)
    mig = _gang("m", 1, mig_profile="1g.10gb")
    assert not gang_fits_idle(mig, spread, node_by_node=False)  # whole GPUs only


def test_a_hand_built_timeline_integrates_to_hand_computed_seconds() -> None:
    steps = [
        # Before the span: only its part from 10 s counts. A gang fits 4 idle A, awaiting the
        # next cycle (no decision left them so).
        IdleStep(0.0, {"A": 4, "B": 2}, True, {"A": 4}, {"A": 4}),
        # A decision left 4 A placeable and 2 B that fit a waiting gang by count only.
        IdleStep(
            20.0, {"A": 4, "B": 2}, True, {"A": 4, "B": 2}, {"A": 4}, {"A": 4, "B": 2}, {"A": 4}
        ),
        # Nothing fits: a gang waits, no GPU counts with demand.
        IdleStep(50.0, {"A": 1, "B": 2}, True, {}, {}),
        # Nothing waits; the last step holds to the end of the span (100 s), not beyond.
        IdleStep(80.0, {"A": 3, "B": 0}, False, {}, {}),
    ]
    got = idle_gpu_seconds(steps, start=10.0, end=100.0)
    assert got.idle == pytest.approx(6 * 10 + 6 * 30 + 3 * 30 + 3 * 20)
    assert got.while_waiting == pytest.approx(6 * 10 + 6 * 30 + 3 * 30)
    assert got.with_demand == pytest.approx(4 * 10 + 6 * 30)  # must be nonzero
    assert got.placeable == pytest.approx(4 * 10 + 4 * 30)
    assert got.left_with_demand == pytest.approx(6 * 30)
    assert got.left_placeable == pytest.approx(4 * 30)
    assert got.with_demand_by_type == {"A": pytest.approx(160.0), "B": pytest.approx(60.0)}
    assert idle_gpu_seconds([], 0.0, 100.0).idle == 0.0


def test_the_monitor_counts_a_type_while_a_waiting_gang_fits_it() -> None:
    monitor = IdleMonitor()
    two_on_a = _gang("g", 2)  # accepts A only
    three_on_one_node = _gang("h", 1, per_replica=3)
    monitor(0.0, {"A": [1, 1], "B": [8]}, [two_on_a], False)  # an arrival awaits the cycle
    monitor(0.0, {"A": [1, 1], "B": [8]}, [two_on_a], True)  # same instant: the last holds
    monitor(2.0, {"A": [1, 1], "B": [8]}, [two_on_a], True)  # no change: no new step
    monitor(3.0, {"A": [2, 1], "B": [8]}, [two_on_a], False)  # one more A freed
    monitor(9.0, {"A": [2, 1], "B": [8]}, [three_on_one_node], True)
    monitor(12.0, {"A": [0, 1], "B": [8]}, [two_on_a, two_on_a], True)
    assert [s.t for s in monitor.steps] == [0.0, 3.0, 9.0, 12.0]
    decided, freed, by_count, too_few = monitor.steps
    assert decided.idle == {"A": 2, "B": 8} and decided.waiting
    assert decided.with_demand == decided.placeable == {"A": 2}  # B is not accepted
    assert decided.left_with_demand == decided.left_placeable == {"A": 2}
    # The freed GPU awaits the next cycle: 3 with demand, the decision left 2 of them.
    assert freed.with_demand == freed.placeable == {"A": 3}
    assert freed.left_with_demand == freed.left_placeable == {"A": 2}
    # 3 GPUs on one node: they fit the count of 3 idle A, not one node of them.
    assert by_count.with_demand == by_count.left_with_demand == {"A": 3}
    assert by_count.placeable == by_count.left_placeable == {}
    assert too_few.with_demand == {} and too_few.left_with_demand == {} and too_few.waiting


def test_idle_gpus_gathered_on_whole_nodes() -> None:
    assert packed(11, 4) == [4, 4, 3]
    assert packed(8, 8) == [8]
    assert packed(0, 8) == []
    with pytest.raises(ValueError):
        packed(3, 0)


def test_the_monitor_counts_idle_gpus_a_waiting_gang_fits_once_packed() -> None:
    monitor = IdleMonitor({"A": 8, "T": 4})
    wide = Gang(
        id="w",
        acceptable=(TypeOption("A"), TypeOption("T")),
        replicas_min=8,
        replicas_max=8,
        gpus_per_replica=1,
        topology=Topology.SAME_NODE,
    )
    # 9 idle A on three nodes, 8 idle T on two full 4-GPU nodes: the one-node gang of 8 fits
    # neither as it is; packed, A's 9 make a whole node of 8, T's nodes never hold 8.
    monitor(0.0, {"A": [3, 3, 3], "T": [4, 4]}, [wide], True)
    # Once an A node is empty the gang fits it as it is: placeable, and so placeable if packed.
    monitor(5.0, {"A": [8, 1], "T": [4, 4]}, [wide], True)
    fragmented, whole = monitor.steps
    assert fragmented.with_demand == {"A": 9, "T": 8}
    assert fragmented.placeable == {}
    assert fragmented.packable == {"A": 9}
    assert whole.placeable == whole.packable == {"A": 9}
    got = idle_gpu_seconds(monitor.steps, 0.0, 10.0)
    assert got.packable == pytest.approx(9 * 10.0)
    assert got.placeable == pytest.approx(9 * 5.0)
    # Without node sizes nothing counts as placeable if packed.
    plain = IdleMonitor()
    plain(0.0, {"A": [3, 3, 3]}, [wide], True)
    assert plain.steps[0].packable == {}


@pytest.mark.parametrize("policy", ["gpufleet", "kueue"])
def test_a_queue_at_its_limit_leaves_idle_gpus_its_gang_fits(
    catalog: Catalog, profile: GavelProfile, policy: str
) -> None:
    jobs = [
        trace_job("c1", "c", 0.0, 1000.0, 4),
        trace_job("c2", "c", 0.0, 1000.0, 4),  # waits for c1: c's limit, with 12 GPUs idle
        trace_job("a1", "a", 2000.0, 100.0, 1),  # the last arrival ends the span
    ]
    run = run_tenants(policy, FLEET, Workload("test", jobs, profile, catalog), limited_setup())
    rec = {r.job_id: r for r in run.result.jobs}
    assert rec["c2"].first_start_s == 1000.0  # V100 speed 1: c1 ran 1,000 s
    capacity = 16 * 2000.0
    report = run.report
    assert report.idle == pytest.approx(12 * 2000.0 / capacity)
    assert report.idle_while_waiting == pytest.approx(12 * 1000.0 / capacity)
    assert report.idle_with_demand == pytest.approx(12 * 1000.0 / capacity)
    assert report.idle_placeable == pytest.approx(12 * 1000.0 / capacity)
    assert report.idle_packable == pytest.approx(12 * 1000.0 / capacity)  # the fleet's nodes
    assert report.idle_with_demand_left == pytest.approx(12 * 1000.0 / capacity)
    assert report.idle_with_demand_by_type == {V100: pytest.approx(0.375)}


def test_an_arrival_waits_for_the_next_cycle_with_every_gpu_idle(
    catalog: Catalog, profile: GavelProfile
) -> None:
    jobs = [trace_job("x", "a", 5.0, 50.0, 1), trace_job("y", "a", 100.0, 50.0, 1)]
    run = run_tenants("kueue", FLEET, Workload("test", jobs, profile, catalog), limited_setup())
    capacity = 16 * 95.0
    # x waits from 5 s to the cycle at 10 s with all 16 GPUs idle; nothing else waits.
    assert run.report.idle_with_demand == pytest.approx(16 * 5.0 / capacity)
    assert run.report.idle_with_demand_left == 0.0
    assert run.report.idle == pytest.approx((16 * 95.0 - 50.0) / capacity)


def test_watching_a_replay_does_not_change_it(catalog: Catalog, profile: GavelProfile) -> None:
    jobs = [trace_job(f"j{i}", "ac"[i % 2], 40.0 * i, 300.0 + 50 * i, 1 + i % 4) for i in range(12)]
    workload = Workload("test", jobs, profile, catalog)
    outcomes = []
    for observer in (None, IdleMonitor()):
        sim = Simulation(
            SimCluster(FLEET, catalog),
            jobs,
            make_tenant_policy("gpufleet", SimClock()),
            speed_model(FLEET, workload),
            SimSettings(queues=limited_setup().tree),
            on_event=observer,
        )
        result = sim.run()
        outcomes.append([(r.job_id, r.first_start_s, r.completion_s) for r in result.jobs])
    assert outcomes[0] == outcomes[1]
    assert all(done is not None for _, _, done in outcomes[0])
