"""Pending reasons: one stable reason code and a message with the numbers that matter for every
kind of unplaceable gang, from "type unknown" to "free GPUs exist but not on one node"."""

from __future__ import annotations

import pytest
from placement_builders import cluster, gang, layout

from gpufleet.core.decision import PendingReason
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import Snapshot

# Two H100 nodes with 4 free GPUs each, an idle A10 node, a cordoned L4 node.
FRAGMENTED = (
    cluster()
    .node("h0", "H100-80GB")
    .node("h1", "H100-80GB")
    .node("a0", "A10")
    .node("l0", "L4", schedulable=False)
    .run("r0", "h0", (0, 1, 2, 3))
    .run("r1", "h1", (0, 1, 2, 3))
    .build()
)

CASES = [
    pytest.param(
        FRAGMENTED,
        gang("g", "B300"),
        PendingReason.UNKNOWN_GPU_TYPE,
        "none of the acceptable GPU types B300 is in the GPU catalogue",
        id="unknown-type",
    ),
    pytest.param(
        FRAGMENTED,
        gang("g", "L4"),
        PendingReason.NO_NODES_OF_TYPE,
        "no schedulable node has L4 GPUs",
        id="only-cordoned-nodes",
    ),
    pytest.param(
        FRAGMENTED,
        gang("g", "A10", mig="1g.10gb"),
        PendingReason.MIG_PROFILE_UNSUPPORTED,
        "MIG profile 1g.10gb is not offered by A10",
        id="mig-on-non-mig-type",
    ),
    pytest.param(
        FRAGMENTED,
        gang("g", gpus=16),
        PendingReason.REPLICA_TOO_LARGE,
        "needs 16 x H100-80GB on one node; the largest node has 8 GPUs",
        id="replica-bigger-than-node",
    ),
    pytest.param(
        FRAGMENTED,
        gang("g", gpus=8, replicas=3),
        PendingReason.GANG_TOO_LARGE,
        "needs 24 x H100-80GB; the cluster has 16 such GPUs",
        id="gang-bigger-than-cluster",
    ),
    pytest.param(
        FRAGMENTED,
        gang("g", gpus=8),
        PendingReason.TOPOLOGY,
        "needs 8 x H100-80GB on one node; the best node has 4 free",
        id="fragmented-8-gpu-gang",
    ),
    pytest.param(
        FRAGMENTED,
        gang("g", gpus=2, replicas=3, topology=Topology.SAME_NODE),
        PendingReason.TOPOLOGY,
        "needs 6 x H100-80GB on one node; the best node has 4 free",
        id="same-node-gang",
    ),
    pytest.param(
        cluster()
        .node("a", "A10", 4)
        .node("b", "A10", 4)
        .run("r0", "a", (0,))
        .run("r1", "b", (0,))
        .build(),
        gang("g", "A10", gpus=2, replicas=3),
        PendingReason.TOPOLOGY,
        "needs 3 replicas of 2 x A10, each on one node; free GPUs fit 2 such replicas "
        "(the best node has 3 free)",
        id="replicas-do-not-pack",
    ),
    pytest.param(
        FRAGMENTED,
        gang("g", gpus=4, replicas=3),
        PendingReason.INSUFFICIENT_GPUS,
        "needs 12 x H100-80GB; 8 free",
        id="not-enough-free",
    ),
    pytest.param(
        FRAGMENTED,
        gang("g", "A10", gpus=2, topology=Topology.NVLINK),
        PendingReason.TOPOLOGY,
        "needs 2 x A10 in one NVLink domain; the largest domain has 1 GPUs",
        id="no-nvlink-on-pcie",
    ),
    pytest.param(
        cluster()
        .node("m", "A100-80GB", 1, mig={0: layout("3g.40gb@0", "3g.40gb@4")})
        .run("r", "m", (0,), mig="3g.40gb@0")
        .build(),
        gang("g", "A100-80GB", mig="3g.40gb", replicas=2),
        PendingReason.INSUFFICIENT_MIG,
        "needs 2 x 3g.40gb slices on A100-80GB; 1 free slices and 0 empty GPUs to repartition",
        id="mig-slices-short",
    ),
]


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
@pytest.mark.parametrize(("snapshot", "job", "reason", "message"), CASES)
def test_pending_reason(
    snapshot: Snapshot, job: Gang, reason: PendingReason, message: str, engine: Engine
) -> None:
    decision = place(snapshot, [job], Policy(solver=SolverSettings(engine=engine)))
    pending = decision.pending_for(job.id)
    assert pending is not None
    assert (pending.reason, pending.message) == (reason, message)


def test_gang_that_fits_alone_but_lost_the_capacity_says_so() -> None:
    snapshot = cluster().node("a", "A10", 4).build()
    pending = [gang("low", "A10", gpus=4), gang("high", "A10", gpus=4, priority=1)]
    decision = place(snapshot, pending, Policy())
    low = decision.pending_for("low")
    assert low is not None and low.reason is PendingReason.LOST_TO_OTHERS
    assert "fits on free A10 GPUs on its own" in low.message


def test_reason_codes_are_stable_strings() -> None:
    # Condition reasons in the API depend on these exact values.
    assert {r.value for r in PendingReason} == {
        "UnknownGpuType",
        "NoNodesOfAcceptableType",
        "NoEligibleNode",
        "MigProfileUnsupported",
        "ReplicaExceedsNode",
        "GangExceedsCluster",
        "InsufficientFreeGpus",
        "TopologyUnsatisfiable",
        "InsufficientMigSlices",
        "CapacityGivenToOtherGangs",
        "WaitingForFasterGpuType",
        "QueueNotFound",
        "QueueNotAllowed",
        "QuotaExceeded",
        "WaitingForReclaim",
        "PreemptionBlockedByDisruptionBudget",
    }
