"""A type no single-type task has named yet gets one task's share of the estimate.

Aspects: `unseen_share` by hand; both engines keep a flexible gang off the last empty H100 of a
fleet with 240 empty A100 GPUs when the history has A100-only but no H100-only tasks (Alibaba
`gpuspec10` held-out order 37: the first H100-only pod found every H100 taken by flexible pods
and waited 148k s with 180 A100 GPUs free); no reserve without any single-type demand (Philly);
none once the fleet is nearly full.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang

from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.pricing import Pricing
from gpufleet.core.scarcity import unseen_share
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from gpufleet.core.workload import TaskShape, WorkloadEstimate

H100, A100 = "H100-80GB", "A100-80GB"


def fleet(a100_nodes: int, confined: float) -> Snapshot:
    """One H100 node with one empty GPU, `a100_nodes` empty A100 nodes; one-GPU tasks of which
    `confined` accept only A100, the rest any type; none H100-only."""
    builder = cluster().node("h", H100).nodes_of("a", A100, a100_nodes)
    for g in range(7):
        builder.run(f"h{g}", "h", (g,))
    shapes = {TaskShape((A100, H100), 1): 1.0 - confined}
    if confined:
        shapes[TaskShape((A100,), 1)] = confined
    return replace(builder.build(), workload=WorkloadEstimate.of(shapes))


def test_unseen_share_by_hand() -> None:
    # Mean task 1 GPU: one task in 2000 (+1).
    assert unseen_share(fleet(1, 0.05)) == pytest.approx(1 / 2001)


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_flexible_gang_leaves_the_last_h100_for_a_type_not_seen_yet(engine: Engine) -> None:
    snapshot = fleet(30, 0.05)
    flexible = gang("flex", (H100, A100))
    policy = Policy(solver=SolverSettings(engine=engine))
    reserves = Pricing(ClusterState(snapshot), policy, [flexible]).gpu_reserves
    # 240 spare GPUs x 1/2001 = 0.12 expected: P(0) = 0.887 < 0.9, so one GPU is kept.
    assert reserves[(H100,)].reserved == 1.0
    decision = place(snapshot, [flexible], policy)
    assert decision_problems(snapshot, [flexible], decision) == []
    assert [(p.gang_id, p.gpu_type) for p in decision.placements] == [("flex", A100)]


@pytest.mark.parametrize(
    ("a100_nodes", "confined"),
    [
        pytest.param(30, 0.0, id="no-single-type-demand"),
        pytest.param(3, 0.05, id="little-spare"),
    ],
)
def test_no_reserve_for_an_unseen_type(a100_nodes: int, confined: float) -> None:
    snapshot = fleet(a100_nodes, confined)
    flexible = gang("flex", (H100, A100))
    policy = Policy()
    reserves = Pricing(ClusterState(snapshot), policy, [flexible]).gpu_reserves
    assert (H100,) not in reserves or reserves[(H100,)].reserved == 0.0
    decision = place(snapshot, [flexible], policy)
    assert [(p.gang_id, p.gpu_type) for p in decision.placements] == [("flex", H100)]
