"""GPU reserves keep whole GPUs, sized for the confined arrivals at a Poisson quantile.

Aspects: `whole_tasks` by hand (a rare class keeps nothing, a mean below one keeps one or two
GPUs, never fewer for a larger mean); both engines keep a flexible gang off the second-to-last
empty H100 when the estimate expects 0.7 H100-only GPU, which the fractional reserve let it take
(the held-out Alibaba `gpuspec10` orders where the next H100-only pod then waited).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from placement_builders import cluster, gang

from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.pricing import Pricing
from gpufleet.core.scarcity import whole_tasks
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from gpufleet.core.workload import TaskShape, WorkloadEstimate

H100, A100 = "H100-80GB", "A100-80GB"


@pytest.mark.parametrize(
    ("expected", "kept"),
    [
        pytest.param(0.0, 0.0, id="none-expected"),
        # P(no arrival) = e^-0.1 = 0.905 >= 0.9: too rare to keep a GPU for.
        pytest.param(0.1, 0.0, id="rare-class"),
        # e^-0.16 = 0.852 < 0.9 <= 0.852 + 0.136.
        pytest.param(0.16, 1.0, id="one-for-a-small-mean"),
        # P(<= 1) = 0.878, P(<= 2) = 0.977.
        pytest.param(0.6, 2.0, id="two-for-0.6"),
        # P(<= 5) = 0.844, P(<= 6) = 0.927.
        pytest.param(3.6, 6.0, id="six-for-3.6"),
    ],
)
def test_whole_tasks_by_hand(expected: float, kept: float) -> None:
    assert whole_tasks(expected) == kept


@given(st.floats(0.0, 50.0), st.floats(0.0, 50.0))
def test_a_larger_mean_never_keeps_fewer(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert whole_tasks(low) <= whole_tasks(high)


def two_h100_free() -> object:
    """One H100 node with two empty GPUs, one A100 node with eight; an estimate where 7 % of
    the one-GPU tasks accept only H100: of the 10 - 1 spare GPUs, 0.63 H100 GPU expected."""
    builder = cluster().node("h", H100).node("a", A100)
    for g in range(6):
        builder.run(f"h{g}", "h", (g,))
    shapes = {TaskShape((H100,), 1): 0.07, TaskShape((A100, H100), 1): 0.93}
    return replace(builder.build(), workload=WorkloadEstimate.of(shapes))


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_flexible_gang_leaves_both_h100s_for_an_expected_0_63(engine: Engine) -> None:
    snapshot = two_h100_free()
    flexible = gang("flex", (H100, A100))
    policy = Policy(solver=SolverSettings(engine=engine))
    reserve = Pricing(ClusterState(snapshot), policy, [flexible]).gpu_reserves[(H100,)]
    # The fractional reserve (0.63) was below the one GPU the gang leaves: no charge, and the
    # gang took an H100 for its speed.
    assert reserve.reserved == 2.0
    decision = place(snapshot, [flexible], policy)
    assert decision_problems(snapshot, [flexible], decision) == []
    assert [(p.gang_id, p.gpu_type) for p in decision.placements] == [("flex", A100)]
