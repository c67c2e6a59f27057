"""A gang's spread slowdown (core/spread.py, `Gang.spread_speed`).

Aspects: a placement on more nodes of a type than the fewest that could hold it runs at the
gang's spread speed, one on the fewest (whatever their size) at full speed; a gang that states no
slowdown, a one-replica gang and MIG slices are never slowed; the fewest nodes follow the type's
largest node; a spread speed outside (0, 1] is refused.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang

from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.core.spread import fewest_node_count, spread_factor
from gpufleet.core.state import ClusterState

H100, T4 = "H100-80GB", "T4"


def state() -> ClusterState:
    # Two 8-GPU H100 nodes, one 4-GPU H100 node, four 4-GPU T4 nodes.
    snapshot = cluster().nodes_of("h", H100, 2).node("s", H100, 4).nodes_of("t", T4, 4, 4).build()
    return ClusterState(snapshot)


def on(*nodes: str, gpus: int = 2) -> tuple[ReplicaPlacement, ...]:
    return tuple(ReplicaPlacement(n, tuple(range(gpus))) for n in nodes)


def test_fewest_nodes_follow_the_largest_node_of_the_type() -> None:
    s = state()
    assert fewest_node_count(s, H100, 2, 4) == 1  # 4 x 2 GPUs on one 8-GPU node
    assert fewest_node_count(s, H100, 2, 5) == 2
    assert fewest_node_count(s, T4, 2, 4) == 2  # T4 nodes hold 4 GPUs: two replicas each
    assert fewest_node_count(s, T4, 8, 1) is None  # no T4 node holds one


@pytest.mark.parametrize(
    ("gpu_type", "nodes", "expected"),
    [
        pytest.param(H100, ("h0", "h0", "h0", "h0"), 1.0, id="packed-on-one-node"),
        pytest.param(H100, ("h0", "h0", "h1", "h1"), 0.3, id="two-nodes-where-one-holds-it"),
        pytest.param(H100, ("h0", "h1", "s", "s"), 0.3, id="three-nodes"),
        pytest.param(T4, ("t0", "t0", "t1", "t1"), 1.0, id="fewest-small-nodes"),
        pytest.param(T4, ("t0", "t1", "t2", "t2"), 0.3, id="more-small-nodes"),
    ],
)
def test_a_placement_on_more_nodes_than_needed_runs_at_the_spread_speed(
    gpu_type: str, nodes: tuple[str, ...], expected: float
) -> None:
    wide = replace(gang("g", (H100, T4), gpus=2, replicas=4), spread_speed=0.3)
    assert spread_factor(state(), wide, gpu_type, on(*nodes)) == pytest.approx(expected)


def test_gangs_that_are_never_slowed() -> None:
    s = state()
    stated_none = gang("g", H100, gpus=2, replicas=4)
    assert stated_none.spread_speed == 1.0
    assert spread_factor(s, stated_none, H100, on("h0", "h1", "s", "s")) == 1.0
    one = replace(gang("one", H100, gpus=2), spread_speed=0.3)
    assert spread_factor(s, one, H100, on("h0")) == 1.0
    sliced = replace(gang("mig", H100, mig="1g.10gb", replicas=2), spread_speed=0.3)
    assert spread_factor(s, sliced, H100, on("h0", "h1", gpus=1)) == 1.0


@pytest.mark.parametrize("speed", [0.0, -0.5, 1.5, float("nan")])
def test_a_spread_speed_outside_0_1_is_refused(speed: float) -> None:
    with pytest.raises(ValueError, match="spread_speed"):
        replace(gang("g", H100, gpus=2, replicas=4), spread_speed=speed)
