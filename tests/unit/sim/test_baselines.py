"""Baseline policies on hand-built snapshots: each returns a core Decision with its rule.

Aspects: kube-like spreads pods (least allocated) and places partial gangs; fifo-binpack packs
(best fit), is all-or-nothing and honours a same-node wish; MIG slices are cut from an empty GPU
and empty MIG GPUs are switched back for whole-GPU gangs; Gavel-style gives the fast GPU to the
job that gains most; Tiresias-style preempts the job with the most attained service.
"""

from __future__ import annotations

from gpufleet.core.demand import Gang, Topology, TypeOption
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.model.gpus import Catalog
from gpufleet.model.inventory import Gpu, Node
from gpufleet.sim.baselines import FifoBinPackPolicy, GavelLikePolicy, TiresiasLikePolicy
from gpufleet.sim.kube_like import KubeLikePolicy
from gpufleet.sim.occupancy import initial_layout

POLICY = Policy()


def node(name: str, gpu_type: str = "V100-32GB", gpus: int = 4) -> Node:
    return Node(name, gpu_type, tuple(Gpu(i) for i in range(gpus)))


def gang(
    gid: str, replicas: int = 1, per: int = 1, types: tuple[str, ...] = ("V100-32GB",), **kw: object
) -> Gang:
    return Gang(
        id=gid,
        acceptable=tuple(TypeOption(t) for t in types),
        replicas_min=replicas,
        replicas_max=replicas,
        gpus_per_replica=per,
        **kw,  # type: ignore[arg-type]
    )


def running(
    gid: str, node_name: str, gpus: tuple[int, ...], gpu_type: str = "V100-32GB"
) -> RunningGang:
    return RunningGang(gid, gpu_type, (ReplicaPlacement(node_name, gpus),))


def test_kube_spreads_and_fifo_packs(catalog: Catalog) -> None:
    snap = Snapshot(catalog, (node("a"), node("b")), (running("r", "a", (0, 1)),))
    kube = KubeLikePolicy()(snap, [gang("j")], POLICY)
    fifo = FifoBinPackPolicy()(snap, [gang("j")], POLICY)
    assert kube.placements[0].replicas[0].node == "b"  # least allocated
    assert fifo.placements[0].replicas[0].node == "a"  # best fit


def test_kube_places_partial_gangs_fifo_does_not(catalog: Catalog) -> None:
    snap = Snapshot(catalog, (node("a", gpus=2),))
    big = gang("big", replicas=3)
    kube = KubeLikePolicy()(snap, [big], POLICY)
    assert kube.placements[0].replica_count == 2  # two of three pods bound, holding GPUs
    assert FifoBinPackPolicy()(snap, [big], POLICY).placements == ()


def test_same_node_wish(catalog: Catalog) -> None:
    snap = Snapshot(
        catalog, (node("a"), node("b")), (running("r1", "a", (0,)), running("r2", "b", (0,)))
    )
    wish = gang("w", replicas=3, topology=Topology.SAME_NODE)
    fifo = FifoBinPackPolicy()(snap, [wish], POLICY)
    assert len({r.node for r in fifo.placements[0].replicas}) == 1
    four = gang("w4", replicas=4, topology=Topology.SAME_NODE)  # no node has 4 free
    assert FifoBinPackPolicy()(snap, [four], POLICY).placements == ()


def test_mig_cut_and_switch_back(catalog: Catalog) -> None:
    a100 = catalog["A100-80GB"]
    layout = initial_layout(a100, "all-balanced")
    mig_node = Node("m", "A100-80GB", (Gpu(0, mig_layout=layout), Gpu(1, mig_layout=layout)))
    snap = Snapshot(catalog, (mig_node,))
    slice4 = gang("s", types=("A100-80GB",), mig_profile="4g.40gb")
    d = FifoBinPackPolicy()(snap, [slice4], POLICY)
    assert len(d.repartitions) == 1 and d.repartitions[0].new_layout == initial_layout(
        a100, "all-4g.40gb"
    )
    assert d.placements[0].replicas[0].mig is not None
    whole = gang("g", per=2, types=("A100-80GB",))
    d = FifoBinPackPolicy()(snap, [whole], POLICY)
    assert {r.new_layout for r in d.repartitions} == {None}
    assert d.placements[0].replicas[0].gpus == (0, 1)


def test_gavel_gives_the_fast_gpu_to_the_job_that_gains_most(catalog: Catalog) -> None:
    snap = Snapshot(catalog, (node("h", "H100-80GB", 1), node("t", "T4", 1)))
    types = ("H100-80GB", "T4")
    gains_little = Gang("little", (TypeOption("H100-80GB", 1.2), TypeOption("T4", 1.0)))
    gains_much = Gang("much", (TypeOption("H100-80GB", 6.0), TypeOption("T4", 0.3)))
    assert gains_little.type_names() == types
    d = GavelLikePolicy(lambda: 0.0)(snap, [gains_little, gains_much], POLICY)
    where = {p.gang_id: p.gpu_type for p in d.placements}
    assert where == {"much": "H100-80GB", "little": "T4"}


def test_tiresias_preempts_the_most_served_job(catalog: Catalog) -> None:
    now = [0.0]
    policy = TiresiasLikePolicy(lambda: now[0], thresholds=(3600.0,))
    snap = Snapshot(catalog, (node("a", gpus=1),))
    first = policy(snap, [gang("old")], POLICY)
    assert first.placements[0].gang_id == "old"
    now[0] = 7200.0  # "old" has run 2 GPU-hours: it drops to the second queue
    busy = Snapshot(catalog, (node("a", gpus=1),), (running("old", "a", (0,)),))
    d = policy(busy, [gang("new")], POLICY)
    assert [(p.gang_id, p.for_gang) for p in d.preemptions] == [("old", "new")]
    assert d.placements[0].gang_id == "new"
