"""The simulated fleet's occupancy over the core ledger.

Aspects: holding and releasing a gang keeps the ledger, the owners and the GPU shares in step;
a double booking, a whole GPU in MIG mode or a missing instance raise `ClusterError` and leave
nothing held; only an empty GPU is repartitioned; a gang whose pods sit on two GPU types (only
the kube-like baseline makes those) is shown to the core as one running gang per type.
"""

from __future__ import annotations

import pytest

from gpufleet.core.snapshot import ReplicaPlacement, RunningGang
from gpufleet.core.state import ClusterState
from gpufleet.model.fleet import FleetSpec, MigSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.occupancy import ClusterError, SimCluster, initial_layout

FLEET = FleetSpec(
    node_pools=[
        NodePoolSpec(name="t", count=1, gpu_type="T4", gpus_per_node=2),
        NodePoolSpec(
            name="m",
            count=1,
            gpu_type="A100-80GB",
            gpus_per_node=2,
            mig=MigSpec(config="all-balanced"),
        ),
    ]
)


def test_hold_and_release_keep_ledger_owners_and_shares_in_step(catalog: Catalog) -> None:
    cluster = SimCluster(FLEET, catalog)
    balanced = initial_layout(catalog["A100-80GB"], "all-balanced")
    assert balanced is not None
    three = next(p for p in balanced if p.profile == "3g.40gb")
    gang = RunningGang(
        "g", "T4", (ReplicaPlacement("t-0", (0, 1)), ReplicaPlacement("m-0", (1,), three))
    )
    assert cluster.hold(gang) == {"t-0", "m-0"}
    assert cluster.gpu_owner("t-0", 1) == "g" and cluster.mig_owner("m-0", 1, three) == "g"
    assert cluster.allocated_share == pytest.approx(2 + 3 / 7)
    assert not cluster.is_empty("m-0")
    with pytest.raises(ClusterError, match="g2: GPU t-0/0 is taken"):
        cluster.hold(RunningGang("g2", "T4", (ReplicaPlacement("t-0", (0,)),)))
    assert cluster.release("g") == {"t-0", "m-0"}
    assert cluster.allocated_share == 0 and cluster.gpu_owner("t-0", 1) is None
    # Everything is free again in the ledger: the same GPUs can be held once more.
    cluster.hold(RunningGang("g3", "T4", (ReplicaPlacement("t-0", (0, 1)),)))


def test_a_failed_hold_leaves_nothing_held(catalog: Catalog) -> None:
    cluster = SimCluster(FLEET, catalog)
    bad = RunningGang("bad", "T4", (ReplicaPlacement("t-0", (0,)), ReplicaPlacement("m-0", (0,))))
    with pytest.raises(ClusterError, match="m-0/0 is in MIG mode"):
        cluster.hold(bad)
    assert cluster.allocated_share == 0 and cluster.gpu_owner("t-0", 0) is None
    cluster.hold(RunningGang("ok", "T4", (ReplicaPlacement("t-0", (0,)),)))  # t-0/0 is free


def test_only_an_empty_gpu_is_repartitioned(catalog: Catalog) -> None:
    cluster = SimCluster(FLEET, catalog)
    balanced = initial_layout(catalog["A100-80GB"], "all-balanced")
    assert balanced is not None
    cluster.hold(RunningGang("s", "A100-80GB", (ReplicaPlacement("m-0", (0,), balanced[0]),)))
    with pytest.raises(ClusterError, match="busy GPU m-0/0"):
        cluster.repartition("m-0", 0, None)
    cluster.repartition("m-0", 1, None)
    assert cluster.nodes["m-0"].gpus[1].mig_layout is None
    cluster.hold(RunningGang("w", "A100-80GB", (ReplicaPlacement("m-0", (1,)),)))


def test_a_gang_on_two_types_is_one_running_gang_per_type(catalog: Catalog) -> None:
    cluster = SimCluster(FLEET, catalog)
    balanced = initial_layout(catalog["A100-80GB"], "all-balanced")
    assert balanced is not None
    cluster.repartition("m-0", 1, None)
    mixed = RunningGang(
        "k",
        "T4",
        (ReplicaPlacement("t-0", (0,)), ReplicaPlacement("m-0", (1,))),
        relative_throughput=0.5,
    )
    cluster.hold(mixed)
    running = cluster.snapshot().running
    assert [(g.id, g.gpu_type, g.relative_throughput) for g in running] == [
        ("k#T4", "T4", 0.5),
        ("k#A100-80GB", "A100-80GB", None),
    ]
    ClusterState(cluster.snapshot())  # the core accepts it (it refuses a gang off its type)
    single = RunningGang("one", "T4", (ReplicaPlacement("t-0", (1,)),))
    cluster.hold(single)
    assert cluster.snapshot().running[-1] is single
