"""Usable idle GPUs (`usable_idle.py`) against hand-computed values.

Aspects: the fill takes idle GPUs only for gangs whose queue's quota allows them (counting the
gangs taken before), node by node (best fit, a same-node gang on one node), on the fastest type
that fits, each GPU once; the monitor splits what a decision left from what awaits the next
cycle and gives each GPU left its cause (a move's freed GPUs, the reserved node, the gang's
pending reason, a gang not offered); the integral; the count with quotas ignored; replays: a
queue at its borrowing limit leaves idle GPUs its gang fits but may not use (none usable, where
the quota-blind figures count them), an arrival awaits the next cycle, and watching (with the
tap on the policy) does not change a replay.
"""

from __future__ import annotations

import pytest

from gpufleet.core.decision import Decision, GangPlacement, Move, Pending
from gpufleet.core.demand import Gang, Topology, TypeOption
from gpufleet.core.policy import Policy
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.quota import QuotaBook
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.model.contract.reasons import PendingReason
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.engine import SimSettings, Simulation
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.runner import Workload, speed_model
from gpufleet.sim.tenant_run import SimClock, make_tenant_policy, run_tenants
from gpufleet.sim.usable_idle import (
    DecisionTap,
    Take,
    UsableIdleMonitor,
    UsableStep,
    fill,
    none_fits,
    usable_gpu_seconds,
)
from gpufleet.testing.limit_scene import limited_setup, trace_job

V100 = "V100-32GB"
T4 = "T4"
MODEL = "ResNet-50 (batch size 64)"


def _fleet(nodes: int = 2, extra: list[NodePoolSpec] | None = None) -> FleetSpec:
    pools = [NodePoolSpec(name="v", count=nodes, gpu_type=V100, gpus_per_node=8)]
    return FleetSpec(node_pools=pools + (extra or []))


def _gang(gid: str, queue: str, replicas: int, per: int = 1, **kw: object) -> Gang:
    kw.setdefault("acceptable", (TypeOption(V100),))
    return Gang(
        id=gid,
        replicas_min=replicas,
        replicas_max=replicas,
        gpus_per_replica=per,
        queue=queue,
        **kw,  # type: ignore[arg-type]
    )


def _running(gid: str, node: str, gpus: tuple[int, ...], queue: str = "a") -> RunningGang:
    return RunningGang(gid, V100, (ReplicaPlacement(node, gpus),), queue=queue)


def _tree() -> QueueTree:
    # a may use the whole fleet; c 4 V100s and never borrows; b 2 and never borrows.
    return QueueTree.build(
        [
            QueueSpec("a", quotas={V100: Quota(10), T4: Quota(8)}),
            QueueSpec("b", quotas={V100: Quota(2, borrowing_limit=0)}),
            QueueSpec("c", quotas={V100: Quota(4, borrowing_limit=0)}),
        ]
    )


def test_the_fill_takes_only_what_the_quota_allows_node_by_node(catalog: Catalog) -> None:
    cluster = SimCluster(_fleet(), catalog)
    cluster.hold(_running("c-run", "v-0", (0, 1, 2, 3), queue="c"))  # c at its limit
    type_of = {n: V100 for n in ("v-0", "v-1")}
    waiting = [
        _gang("c-more", "c", 2),  # fits, but c may not borrow
        _gang("one-node", "a", 1, per=4),  # best fit: v-0's 4 idle GPUs
        _gang("spread", "a", 3, per=2),  # three replicas of 2 on v-1
        _gang("same-node", "a", 4, topology=Topology.SAME_NODE),  # 2 left on v-1: no node
        _gang("b1", "b", 2),  # b's nominal 2 on v-1's last GPUs
    ]
    idle = {"v-0": 4, "v-1": 8}
    book = QuotaBook(_tree(), cluster.snapshot())
    assert fill(idle, type_of, waiting, book) == [
        Take("one-node", V100, "v-0", 4),
        Take("spread", V100, "v-1", 6),
        Take("b1", V100, "v-1", 2),
    ]
    # Quotas ignored, c's gang takes the first GPUs (the quota-blind count).
    blind = fill(idle, type_of, waiting, None)
    assert blind[0] == Take("c-more", V100, "v-0", 2)
    # The quota counts the gangs taken before: b's second gang finds b's nominal used.
    book = QuotaBook(_tree(), cluster.snapshot())
    two_of_b = [_gang("b1", "b", 2), _gang("b2", "b", 1)]
    assert fill(idle, type_of, two_of_b, book) == [Take("b1", V100, "v-0", 2)]


def test_the_fill_tries_the_fastest_type_first(catalog: Catalog) -> None:
    fleet = _fleet(1, [NodePoolSpec(name="t", count=1, gpu_type=T4, gpus_per_node=4)])
    cluster = SimCluster(fleet, catalog)
    type_of = {"v-0": V100, "t-0": T4}
    both = (TypeOption(T4, 1.0), TypeOption(V100, 3.0))  # V100 listed second, faster
    waiting = [_gang("g", "a", 2, acceptable=both), _gang("h", "a", 1, per=8, acceptable=both)]
    book = QuotaBook(_tree(), cluster.snapshot())
    # g on V100 (fastest); h's 8 GPUs on one node: V100's node has 6 left, T4's 4: no room.
    assert fill({"v-0": 8, "t-0": 4}, type_of, waiting, book) == [Take("g", V100, "v-0", 2)]


def test_idle_gpus_no_waiting_gang_fits_are_split_by_why() -> None:
    h100, a100 = "H100-80GB", "A100-80GB"
    type_of = {"v-0": V100, "v-1": V100, "t-0": T4, "h-0": h100, "a-0": a100}
    node_size = {V100: 8, T4: 4, h100: 8, a100: 8}
    idle = {"v-0": 4, "v-1": 5, "t-0": 4, "h-0": 2, "a-0": 8}
    types = (TypeOption(V100), TypeOption(T4), TypeOption(h100))
    waiting = [
        _gang("small", "a", 1),  # counted on v-0 by the fill
        _gang("wide", "a", 8, topology=Topology.SAME_NODE, acceptable=types),
    ]
    takes = [Take("small", V100, "v-0", 1)]
    assert none_fits(idle, type_of, node_size, waiting, takes) == {
        "fragmented": 8,  # V100: 3 + 5 left, 8 needed on one node
        "node too small": 4,  # T4 nodes hold 4
        "too few": 2,  # H100: 2 idle
        "no taker": 8,  # no waiting gang wants A100
    }
    # A gang of one node's GPUs per replica fits a T4 node replica by replica.
    spread = [_gang("spread", "a", 2, per=4, acceptable=(TypeOption(T4),))]
    assert none_fits({"t-0": 4}, type_of, node_size, spread, []) == {"too few": 4}


def _three_node_scene(catalog: Catalog) -> tuple[SimCluster, DecisionTap, list[Gang]]:
    """After a decision that moved m from v-0 to v-2: v-0 has 2 idle (freed by the move),
    v-1 4, v-2 6; an aged gang of 8 GPUs on one node fits nowhere (its reserved node: v-2)."""
    cluster = SimCluster(_fleet(3), catalog)
    big, other = _running("big", "v-0", tuple(range(6))), _running("o", "v-1", (0, 1, 2, 3))
    moved_from = _running("m", "v-0", (6, 7))
    moved_to = GangPlacement("m", V100, (ReplicaPlacement("v-2", (0, 1)),))
    for gang in (big, other, _running("m", "v-2", (0, 1))):
        cluster.hold(gang)
    before = Snapshot(catalog, tuple(cluster.nodes.values()), (big, other, moved_from))
    waiting = [
        _gang("x", "a", 1, per=2),  # lost to others; takes v-0's 2 freed by the move
        _gang("y", "a", 2),  # not offered; takes 2 of v-1
        _gang("z", "a", 1),  # the core found too few GPUs; 1 of v-1
        _gang("w", "a", 1, per=4),  # lost to others; only v-2 holds 4: the reserved node
        _gang("r", "a", 8, topology=Topology.SAME_NODE, waited_s=7200.0),  # aged, fits nowhere
    ]
    decision = Decision(
        moves=(Move("m", V100, moved_to, gain_s=100.0),),
        pending=(
            Pending("x", PendingReason.LOST_TO_OTHERS, ""),
            Pending("z", PendingReason.INSUFFICIENT_GPUS, ""),
            Pending("w", PendingReason.LOST_TO_OTHERS, ""),
            Pending("r", PendingReason.TOPOLOGY, ""),
        ),
    )
    tap = DecisionTap(lambda snapshot, pending, policy: decision)
    offered = [g for g in waiting if g.id != "y"]
    tap(before, offered, Policy())
    return cluster, tap, waiting


def test_the_monitor_gives_each_gpu_a_decision_left_its_cause(catalog: Catalog) -> None:
    cluster, tap, waiting = _three_node_scene(catalog)
    monitor = UsableIdleMonitor(cluster, _tree(), tap, aging_s=3600.0)
    idle = {V100: [2, 4, 6]}
    monitor(10.0, idle, waiting, False)  # the decision's instant: the last call holds
    monitor(10.0, idle, waiting, True)
    arrived = [*waiting, _gang("q", "a", 1)]
    monitor(15.0, idle, arrived, False)  # an arrival awaits the next cycle
    monitor(20.0, idle, [], True)  # the next decision leaves nothing waiting
    decided, awaiting, empty = monitor.steps
    assert decided.usable == {V100: 9}  # x 2, y 2, z 1, w 4; r fits nowhere
    assert decided.blind == 9  # a may borrow what b and c do not use
    assert decided.left == {
        (V100, "move"): 2,
        (V100, "not offered"): 2,
        (V100, "shape"): 1,
        (V100, "reservation"): 4,
    }
    assert awaiting.usable == {V100: 10} and awaiting.left == decided.left
    assert awaiting.blind == 10
    assert empty.usable == {} and empty.left == {}
    # Left over: v-1 1, v-2 2; r (8 on one node) needs more than the 3 idle.
    assert decided.none_fits == {"too few": 3} and awaiting.none_fits == {"too few": 2}
    assert empty.none_fits == {}
    got = usable_gpu_seconds(monitor.steps, 0.0, 30.0)
    assert got.none_fits == {"too few": pytest.approx(3 * 5 + 2 * 5)}
    assert got.usable == pytest.approx(9 * 5 + 10 * 5)
    assert got.left == pytest.approx(9 * 10)
    assert got.next_cycle == pytest.approx(1 * 5)
    assert got.blind == got.usable
    assert got.left_by_cause == {
        "reservation": pytest.approx(40.0),
        "move": pytest.approx(20.0),
        "shape": pytest.approx(10.0),
        "not offered": pytest.approx(20.0),
    }
    # Without the policy's aging no node is reserved: w's GPUs are its own reason's.
    plain = UsableIdleMonitor(cluster, _tree(), tap)
    plain(10.0, idle, waiting, True)
    assert plain.steps[0].left[(V100, "lost to others")] == 4


def test_what_a_decision_left_shrinks_with_what_stays_usable(catalog: Catalog) -> None:
    cluster = SimCluster(_fleet(1), catalog)
    monitor = UsableIdleMonitor(cluster, _tree())  # no tap: every cause unexplained
    monitor(0.0, {V100: [8]}, [_gang("g", "a", 3)], True)
    cluster.hold(_running("h", "v-0", tuple(range(6))))  # 2 left: g no longer fits
    monitor(4.0, {V100: [2]}, [_gang("g", "a", 3), _gang("k", "a", 1)], False)
    first, second = monitor.steps
    assert first.left == {(V100, "unexplained"): 3}
    assert second.usable == {V100: 1}  # k's one GPU
    assert second.left == {(V100, "unexplained"): 1}  # min(3 left, 1 usable)
    assert usable_gpu_seconds([UsableStep(0.0, {V100: 2})], 1.0, 3.0).usable == 4.0


def test_the_monitor_needs_every_node_on(catalog: Catalog) -> None:
    monitor = UsableIdleMonitor(SimCluster(_fleet(1), catalog), _tree())
    with pytest.raises(ValueError, match="every node on"):
        monitor(0.0, {V100: []}, [_gang("g", "a", 1)], True)  # v-0 switched off


@pytest.mark.parametrize("policy", ["gpufleet", "kueue"])
def test_a_queue_at_its_limit_leaves_no_usable_gpus(
    catalog: Catalog, profile: GavelProfile, policy: str
) -> None:
    jobs = [
        trace_job("c1", "c", 0.0, 1000.0, 4),
        trace_job("c2", "c", 0.0, 1000.0, 4),  # waits for c1: c's limit, with 12 GPUs idle
        trace_job("a1", "a", 2000.0, 100.0, 1),
    ]
    run = run_tenants(policy, _fleet(), Workload("test", jobs, profile, catalog), limited_setup())
    capacity = 16 * 2000.0
    assert run.report.idle_placeable == pytest.approx(12 * 1000.0 / capacity)  # quota-blind
    # With quotas ignored c2 would take 4 of them until c1 ends at 1,000 s.
    assert run.report.usable_idle_quota_blind == pytest.approx(4 * 1000.0 / capacity)
    # c may not borrow: nothing is usable (the first cycle runs at 0 s, on the arrivals).
    assert run.report.usable_idle == 0.0
    assert run.report.usable_idle_left == 0.0


def test_an_arrival_awaits_the_next_cycle(catalog: Catalog, profile: GavelProfile) -> None:
    jobs = [trace_job("x", "a", 5.0, 50.0, 2), trace_job("y", "a", 100.0, 50.0, 1)]
    run = run_tenants(
        "gpufleet", _fleet(), Workload("test", jobs, profile, catalog), limited_setup()
    )
    capacity = 16 * 95.0
    assert run.report.usable_idle == pytest.approx(2 * 5.0 / capacity)  # x's 2 GPUs, 5 s
    assert run.report.usable_idle_left == 0.0
    assert run.report.usable_idle_left_by_cause == {}


def test_watching_with_the_tap_does_not_change_a_replay(
    catalog: Catalog, profile: GavelProfile
) -> None:
    jobs = [trace_job(f"j{i}", "ac"[i % 2], 40.0 * i, 300.0 + 50 * i, 1 + i % 4) for i in range(12)]
    workload = Workload("test", jobs, profile, catalog)
    plain = Simulation(
        SimCluster(_fleet(), catalog),
        jobs,
        make_tenant_policy("gpufleet", SimClock()),
        speed_model(_fleet(), workload),
        SimSettings(queues=limited_setup().tree),
    ).run()
    watched = run_tenants("gpufleet", _fleet(), workload, limited_setup()).result
    outcome = [
        [(r.job_id, r.first_start_s, r.completion_s) for r in res.jobs] for res in (plain, watched)
    ]
    assert outcome[0] == outcome[1]
    assert all(done is not None for _, _, done in outcome[0])
