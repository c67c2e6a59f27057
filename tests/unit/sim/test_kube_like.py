"""The kube-scheduler-like baseline on hand-built snapshots.

Aspects: pod by pod, higher priority first (PrioritySort), least allocated by the node's free
GPU share (so a half-empty 4-GPU node ranks with a half-empty 8-GPU one), ties broken at random
from a seed (reproducibly); a gang's pods may land on several nodes and types, and a gang that
does not fit completely keeps its bound pods (partial); MIG as the nodes have it: a slice pod
takes only an existing instance of its profile, spread by the node's free share, a whole-GPU
pod never takes a MIG-mode GPU, and nothing is repartitioned; cordoned nodes are filtered out.
"""

from __future__ import annotations

import dataclasses

from gpufleet.core.demand import Gang, TypeOption
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.model.gpus import Catalog
from gpufleet.model.inventory import Gpu, Node
from gpufleet.model.mig import MigPlacement
from gpufleet.sim.kube_like import KubeLikePolicy, partial_placements
from gpufleet.sim.occupancy import initial_layout

POLICY = Policy()


def node(name: str, gpu_type: str = "A10", gpus: int = 4, schedulable: bool = True) -> Node:
    return Node(name, gpu_type, tuple(Gpu(i) for i in range(gpus)), schedulable)


def gang(
    gid: str,
    per: int = 1,
    replicas: int = 1,
    types: tuple[str, ...] = ("A10",),
    mig: str | None = None,
) -> Gang:
    return Gang(
        gid,
        tuple(TypeOption(t) for t in types),
        replicas_min=replicas,
        replicas_max=replicas,
        gpus_per_replica=per,
        mig_profile=mig,
    )


def running(gid: str, where: str, gpus: tuple[int, ...], gpu_type: str = "A10") -> RunningGang:
    return RunningGang(gid, gpu_type, (ReplicaPlacement(where, gpus),))


def test_spreads_pod_by_pod_and_strands_partial_gangs(catalog: Catalog) -> None:
    snapshot = Snapshot(
        catalog,
        (node("a"), node("b")),
        (RunningGang("ra", "A10", (ReplicaPlacement("a", (0, 1)),)), running("rb", "b", (0,))),
    )
    pending = [
        gang("one"),  # least allocated: b (3 free) before a (2 free)
        gang("trio", per=2, replicas=3),  # one pod on a, one on b, no room for the third
    ]
    decision = KubeLikePolicy()(snapshot, pending, POLICY)
    partial = partial_placements(decision, pending)
    one = decision.placement("one")
    assert one is not None and one.replicas[0].node == "b"
    assert [p.gang_id for p in partial] == ["trio"]
    assert sum(len(r.gpus) for p in partial for r in p.replicas) == 4
    assert {r.node for r in partial[0].replicas} == {"a", "b"}


def test_least_allocated_is_a_share_of_the_node(
    catalog: Catalog,
) -> None:
    # a: 4 of 8 GPUs free (3/8 after a pod); b: 3 of 4 free (2/4 after). The share, not the
    # count, decides: the first pod goes to b, the second to a (3/8 after vs 1/4 on b).
    snapshot = Snapshot(
        catalog,
        (node("a", gpus=8), node("b", gpus=4)),
        (running("ra", "a", (0, 1, 2, 3)), running("rb", "b", (0,))),
    )
    decision = KubeLikePolicy()(snapshot, [gang("x"), gang("y")], POLICY)
    assert [(p.gang_id, p.replicas[0].node) for p in decision.placements] == [
        ("x", "b"),
        ("y", "a"),
    ]


def test_ties_are_broken_at_random_reproducibly(catalog: Catalog) -> None:
    # a, b and c score alike (all free); d is busier and never chosen for one pod.
    snapshot = Snapshot(
        catalog,
        (node("a"), node("b"), node("c"), node("d")),
        (running("rd", "d", (0,)),),
    )

    def choice(seed: int) -> str:
        decision = KubeLikePolicy(seed)(snapshot, [gang("t")], POLICY)
        return decision.placements[0].replicas[0].node

    chosen = [choice(seed) for seed in range(30)]
    assert set(chosen) == {"a", "b", "c"}
    assert chosen == [choice(seed) for seed in range(30)]


def test_pods_of_one_gang_may_land_on_several_types(catalog: Catalog) -> None:
    snapshot = Snapshot(catalog, (node("t", "T4", 1), node("l", "L4", 1)))
    pair = gang("pair", replicas=2, types=("L4", "T4"))
    decision = KubeLikePolicy()(snapshot, [pair], POLICY)
    (placement,) = decision.placements
    assert {snapshot.node(r.node).gpu_type for r in placement.replicas} == {"L4", "T4"}
    assert partial_placements(decision, [pair]) == []


def test_mig_layouts_stay_as_the_nodes_have_them(catalog: Catalog) -> None:
    a100 = catalog["A100-80GB"]
    balanced = initial_layout(a100, "all-balanced")  # 3g + 2g + 1g + 1g
    assert balanced is not None
    mig_node = Node(
        "m", "A100-80GB", (Gpu(0, mig_layout=balanced), Gpu(1, mig_layout=balanced), Gpu(2))
    )
    snapshot = Snapshot(catalog, (mig_node,))
    types = ("A100-80GB",)
    kube = KubeLikePolicy()
    # A 4g slice exists nowhere: the pod waits, nothing is cut for it.
    four = kube(snapshot, [gang("four", types=types, mig="4g.40gb")], POLICY)
    assert four.placements == () and four.repartitions == ()
    # Two whole GPUs: only GPU 2 is in whole mode, so the pod does not fit.
    whole = kube(snapshot, [gang("two", per=2, types=types)], POLICY)
    assert whole.placements == () and whole.repartitions == ()
    one = kube(snapshot, [gang("one", types=types)], POLICY)
    assert one.placements[0].replicas[0].gpus == (2,)
    # 1g slices: the existing instances, first GPU first.
    small = kube(snapshot, [gang("s", replicas=3, types=types, mig="1g.10gb")], POLICY)
    got = [(r.gpus[0], r.mig) for r in small.placements[0].replicas]
    ones = [p for p in balanced if p.profile == "1g.10gb"]
    assert got == [(0, ones[0]), (0, ones[1]), (1, ones[0])]
    assert small.repartitions == ()


def test_slice_pods_spread_by_the_nodes_free_share(catalog: Catalog) -> None:
    a100 = catalog["A100-80GB"]
    balanced = initial_layout(a100, "all-balanced")
    assert balanced is not None
    three = next(p for p in balanced if p.profile == "3g.40gb")
    snapshot = Snapshot(
        catalog,
        (
            Node("busy", "A100-80GB", (Gpu(0, mig_layout=balanced), Gpu(1))),
            Node("free", "A100-80GB", (Gpu(0, mig_layout=balanced), Gpu(1))),
        ),
        (RunningGang("r", "A100-80GB", (ReplicaPlacement("busy", (0,), three),)),),
    )
    decision = KubeLikePolicy()(snapshot, [gang("s", types=("A100-80GB",), mig="1g.10gb")], POLICY)
    assert decision.placements[0].replicas[0].node == "free"
    assert decision.placements[0].replicas[0].mig == MigPlacement(
        next(p.start for p in balanced if p.profile == "1g.10gb"), "1g.10gb"
    )


def test_higher_priority_pods_are_scheduled_first(catalog: Catalog) -> None:
    snapshot = Snapshot(catalog, (node("only", gpus=1),))
    low, high = gang("low"), dataclasses.replace(gang("high"), priority=2)
    decision = KubeLikePolicy()(snapshot, [low, high], POLICY)
    assert [p.gang_id for p in decision.placements] == ["high"]


def test_cordoned_nodes_are_filtered_out(catalog: Catalog) -> None:
    snapshot = Snapshot(catalog, (node("off", schedulable=False), node("on", gpus=1)))
    decision = KubeLikePolicy()(snapshot, [gang("a"), gang("b")], POLICY)
    assert [(p.gang_id, p.replicas[0].node) for p in decision.placements] == [("a", "on")]
