"""Working state and fill patterns: free-capacity bookkeeping, best-fit GPU picks, NVLink domain
packing and pattern enumeration."""

from __future__ import annotations

import pytest
from placement_builders import cluster, layout

from gpufleet.core.patterns import canonical_item, enumerate_patterns, feasible
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.mig import MigPlacement


def test_state_counts_running_whole_gpus_and_slices() -> None:
    snapshot = (
        cluster()
        .node("a", "A100-80GB", 4, mig={3: layout("3g.40gb@0", "3g.40gb@4")})
        .run("r", "a", (0, 1))
        .run("m", "a", (3,), mig="3g.40gb@0")
        .build()
    )
    state = ClusterState(snapshot)
    assert state.empty[0] == {2}
    assert state.type_nodes("A100-80GB")[1] == [0]
    assert state.free_instances("A100-80GB", "3g.40gb") == [(0, 0, 3, 4)]


@pytest.mark.parametrize(
    ("gpus", "error"),
    [((0,), "taken"), ((9,), "has no GPU")],
)
def test_state_rejects_inconsistent_snapshots(gpus: tuple[int, ...], error: str) -> None:
    builder = cluster().node("a", "A10", 4).run("r1", "a", (0,))
    builder.run("r2", "a", gpus)
    with pytest.raises(ValueError, match=error):
        ClusterState(builder.build())


def test_state_rejects_a_running_gang_on_the_wrong_gpu_type() -> None:
    snapshot = cluster().node("a", "A10", 2).build()
    bad = RunningGang("r", "H100-80GB", (ReplicaPlacement("a", (0,)),))
    with pytest.raises(ValueError, match="has A10 GPUs, not H100-80GB"):
        ClusterState(Snapshot(snapshot.catalog, snapshot.nodes, (bad,)))


def test_take_and_release_round_trip_and_copy_is_independent() -> None:
    state = ClusterState(cluster().node("a", "H100-80GB", 2).build())
    twin = state.copy()
    state.repartition(0, 1, layout("3g.40gb@0", "3g.40gb@4"))
    state.take_instance(0, 1, MigPlacement(0, "3g.40gb"))
    state.take_whole(0, (0,))
    assert state.empty[0] == set() and state.free_instances("H100-80GB", "3g.40gb")
    assert twin.empty[0] == {0, 1} and not twin.free_instances("H100-80GB", "3g.40gb")
    state.release(ReplicaPlacement("a", (0,)))
    state.release(ReplicaPlacement("a", (1,), MigPlacement(0, "3g.40gb")))
    assert state.empty[0] == {0, 1}
    # GPU 1 keeps its new layout; both its instances are free (tier 1: empty GPU).
    assert [k[0] for k in state.free_instances("H100-80GB", "3g.40gb")] == [1, 1]


def test_running_on_lists_each_gang_once_per_node_in_snapshot_order() -> None:
    snapshot = (
        cluster()
        .node("a", "A10", 4)
        .node("b", "A10", 4)
        .run("w", "b", (0,))
        .run("w", "a", (0,))
        .run("w", "a", (1,))
        .run("x", "a", (2,))
        .build()
    )
    state = ClusterState(snapshot)
    twin = state.copy()
    assert [g.id for g in state.running_on("a")] == ["w", "x"]
    assert [g.id for g in twin.running_on("b")] == ["w"]
    assert state.running_on("c") == []


def test_whole_mode_free_after_counts_what_releasing_on_a_copy_would() -> None:
    snapshot = (
        cluster()
        .node("a", "A100-80GB", 4, mig={3: layout("3g.40gb@0", "3g.40gb@4")})
        .node("b", "A100-80GB", 4)
        .run("w", "a", (0, 1))
        .run("w", "b", (0,))
        .run("m", "a", (3,), mig="3g.40gb@0")
        .build()
    )
    state = ClusterState(snapshot)
    replicas = [r for g in snapshot.running for r in g.replicas]
    trial = state.copy()
    for replica in replicas:
        trial.release(replica)
    # GPUs 0 and 1 come free in whole mode; GPU 3 empties but keeps its MIG layout.
    assert state.whole_mode_free_after(0, replicas) == len(trial.whole_mode_gpus(0)) == 3
    assert state.whole_mode_free_after(1, replicas[:1]) == len(state.whole_mode_gpus(1)) == 3
    assert state.empty[0] == {2}  # the state itself is left as it is


def test_repartition_refuses_a_busy_gpu() -> None:
    state = ClusterState(cluster().node("a", "H100-80GB", 1).run("r", "a", (0,)).build())
    with pytest.raises(ValueError, match="not empty"):
        state.repartition(0, 0, layout("7g.80gb@0"))


def test_hold_records_a_replica_where_it_says_and_refuses_anything_else() -> None:
    snapshot = cluster().node("a", "A100-80GB", 4, mig={3: layout("3g.40gb@0", "3g.40gb@4")})
    state = ClusterState(snapshot.run("r", "a", (0,)).build())
    state.hold(ReplicaPlacement("a", (1, 2)))
    state.hold(ReplicaPlacement("a", (3,), MigPlacement(4, "3g.40gb")))
    assert state.empty[0] == set() and state.type_nodes("A100-80GB")[0] == [0]
    assert state.free_instances("A100-80GB", "3g.40gb") == [(0, 0, 3, 0)]
    for bad, error in [
        (ReplicaPlacement("a", (1,)), "a/1 is taken"),
        (ReplicaPlacement("a", (3,)), "a/3 is in MIG mode"),  # never switched to whole
        (ReplicaPlacement("a", (7,)), "has no GPU 7"),
        (ReplicaPlacement("b", (0,)), "unknown node b"),
        (ReplicaPlacement("a", (3,), MigPlacement(4, "3g.40gb")), "is taken"),
        (ReplicaPlacement("a", (3,), MigPlacement(0, "4g.40gb")), "has no instance"),
    ]:
        with pytest.raises(ValueError, match=error):
            state.hold(bad)
    assert state.repartitions() == []  # nothing held was repartitioned


def test_node_queries_and_switching_an_empty_gpu_back_to_whole_mode() -> None:
    mig = {0: layout("3g.40gb@0", "3g.40gb@4"), 2: layout("3g.40gb@4")}
    state = ClusterState(cluster().node("a", "A100-80GB", 4, mig=mig).run("r", "a", (1,)).build())
    assert state.whole_mode_gpus(0) == [3]
    assert state.node_instances(0, "3g.40gb") == [
        (0, MigPlacement(0, "3g.40gb")),
        (0, MigPlacement(4, "3g.40gb")),
        (2, MigPlacement(4, "3g.40gb")),
    ]
    state.repartition(0, 2, None)
    assert state.whole_mode_gpus(0) == [2, 3]
    assert [g for g, _inst in state.node_instances(0, "3g.40gb")] == [0, 0]
    assert [(n, g, new) for n, g, _old, new in state.repartitions()] == [(0, 2, None)]


def test_pick_gpus_prefers_the_tightest_nvlink_domain_and_whole_mode_gpus() -> None:
    snapshot = cluster().node("a", "A100-40GB", 8, mig={0: layout("7g.40gb@0")}).build()
    state = ClusterState(snapshot)
    state.domain_of[0] = [0, 0, 0, 0, 1, 1, 2, 2]  # three domains: sizes 4, 2, 2
    assert state.pick_gpus(0, 2, nvlink=True) == (4, 5)
    assert state.pick_gpus(0, 3, nvlink=True) == (1, 2, 3)  # skips the MIG-mode GPU 0
    assert state.pick_gpus(0, 5, nvlink=True) is None
    assert state.pick_gpus(0, 5, nvlink=False) is not None


@pytest.mark.parametrize(
    ("pattern", "signature", "ok"),
    [
        (((4, True), (4, True)), (4, 4), True),
        (((4, True), (4, True)), (8,), True),
        (((4, True),), (2, 2), False),
        (((4, False),), (2, 2), True),
        (((2, True), (2, True), (1, True)), (3, 2), True),
        (((3, True), (3, True)), (4, 2), False),
    ],
)
def test_pattern_feasibility(
    pattern: tuple[tuple[int, bool], ...], signature: tuple[int, ...], ok: bool
) -> None:
    assert feasible(pattern, signature) is ok


def test_patterns_are_all_feasible_and_include_the_empty_one() -> None:
    items = [(1, False), (2, True), (4, False), (8, False)]
    patterns = enumerate_patterns(items, (4, 4))
    assert () in patterns and len(set(patterns)) == len(patterns)
    assert all(feasible(p, (4, 4)) for p in patterns)
    assert ((4, False), (4, False)) in patterns
    # An 8-GPU item without an NVLink wish may span both domains; 2-GPU NVLink items pack 4.
    assert ((8, False),) in patterns and ((2, True),) * 4 in patterns
    assert all(sum(size for size, _ in p) <= 8 for p in patterns)


def test_canonical_items_merge_equivalent_kinds() -> None:
    assert canonical_item(1, False, (4, 4)) == (1, True)
    assert canonical_item(4, False, (8,)) == (4, True)
    assert canonical_item(4, False, (4, 4)) == (4, False)
