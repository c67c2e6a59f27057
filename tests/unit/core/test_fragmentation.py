"""Fragmentation as the FGD paper measures it (core/fragmentation.py) and its price (pricing.py).

Aspects: a node's expected fragmentation on hand-computed cases (tasks that do not fit see all
free capacity, tasks that fit see partly used GPUs, tasks of another type see everything, MIG
tasks see GPUs without a free instance of their profile); the estimate per GPU type; a node's
free capacity from its holdings; properties on random nodes (0 <= F <= free capacity, F is the
free capacity when no task can run there); and that greedy's price of a placement equals the
price the objective gives the same decision.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import CATALOG, cluster, gang, layout

from gpufleet.core.decision import Decision
from gpufleet.core.fragmentation import NodeFree, TypeMass, fragmentation, node_free, type_masses
from gpufleet.core.greedy import Memo, commit, plan_gang
from gpufleet.core.policy import Policy
from gpufleet.core.pricing import Pricing, decision_costs
from gpufleet.core.state import ClusterState
from gpufleet.core.workload import TaskShape, WorkloadEstimate
from gpufleet.model.inventory import make_node
from gpufleet.model.mig import MigPlacement

H100, A100, T4 = "H100-80GB", "A100-80GB", "T4"


def mass(
    mismatch: float = 0.0,
    whole: tuple[tuple[int, bool, float], ...] = (),
    mig: tuple[tuple[str, float], ...] = (),
) -> TypeMass:
    return TypeMass(mismatch, whole, mig)


@pytest.mark.parametrize(
    ("node", "m", "expected"),
    [
        pytest.param(NodeFree((8,), ()), mass(whole=((1, False, 0.5), (8, False, 0.5))), 0.0,
                     id="empty-node-fits-everything"),
        pytest.param(NodeFree((7,), ()), mass(whole=((1, False, 0.5), (8, False, 0.5))), 3.5,
                     id="one-gpu-taken-strands-seven-for-8-gpu-tasks"),
        pytest.param(NodeFree((4, 3), ()), mass(whole=((4, True, 1.0),)), 0.0,
                     id="nvlink-fits-in-the-wider-domain"),
        pytest.param(NodeFree((3, 3), ()), mass(whole=((4, True, 1.0),)), 6.0,
                     id="nvlink-split-over-domains"),
        pytest.param(NodeFree((3, 3), ()), mass(whole=((4, False, 1.0),)), 0.0,
                     id="no-nvlink-may-span-domains"),
        pytest.param(NodeFree((2,), ()), mass(mismatch=0.25, whole=((1, False, 0.75),)), 0.5,
                     id="other-types-tasks-see-everything"),
        pytest.param(NodeFree((1,), ((0.5, frozenset({"3g.40gb"})),)),
                     mass(whole=((1, False, 1.0),)), 0.5, id="partly-used-gpu-is-a-fragment"),
        pytest.param(NodeFree((), ((0.5, frozenset({"3g.40gb"})), (0.25, frozenset()))),
                     mass(mig=(("3g.40gb", 1.0),)), 0.25,
                     id="mig-task-uses-gpus-with-its-instance"),
        pytest.param(NodeFree((), ((0.5, frozenset({"2g.20gb"})),)),
                     mass(mig=(("3g.40gb", 1.0),)), 0.5, id="mig-task-without-an-instance"),
        pytest.param(NodeFree((1,), ((0.5, frozenset({"2g.20gb"})),)),
                     mass(mig=(("3g.40gb", 1.0),)), 0.5, id="mig-task-cuts-the-empty-gpu"),
        pytest.param(NodeFree((), ()), mass(mismatch=1.0), 0.0, id="nothing-free"),
    ],
)  # fmt: skip
def test_fragmentation_by_hand(node: NodeFree, m: TypeMass, expected: float) -> None:
    assert fragmentation(node, m) == pytest.approx(expected)


def test_masses_per_type() -> None:
    estimate = WorkloadEstimate.of(
        {
            TaskShape((A100, H100), 1): 2.0,
            TaskShape((H100,), 8): 1.0,
            TaskShape((A100, H100), 1, "1g.10gb"): 1.0,
        }
    )
    masses = type_masses(estimate, CATALOG, [H100, A100, T4])
    assert masses[H100] == TypeMass(0.0, ((1, False, 0.5), (8, False, 0.25)), (("1g.10gb", 0.25),))
    assert masses[A100] == TypeMass(0.25, ((1, False, 0.5),), (("1g.10gb", 0.25),))
    assert masses[T4] == TypeMass(1.0, (), ())


def test_node_free_from_holdings() -> None:
    node = make_node(
        "h", CATALOG[H100], 8, {0: layout("3g.40gb@0", "3g.40gb@4"), 1: layout("7g.80gb@0")}
    )
    free = node_free(
        node, CATALOG, whole_used=[2, 3], instances_used={0: [MigPlacement(0, "3g.40gb")]}
    )
    # GPU 0 holds one 3g (3/7 in use), GPU 1 is an empty MIG GPU, 2-3 are held, 4-7 empty.
    assert free.empty == (5,)
    ((left, profiles),) = free.partial
    assert left == pytest.approx(4 / 7)
    assert profiles == frozenset({"3g.40gb"})


@st.composite
def nodes_and_masses(draw: st.DrawFn) -> tuple[NodeFree, TypeMass]:
    empty = tuple(sorted(draw(st.lists(st.integers(1, 8), max_size=3)), reverse=True))
    profiles = ("1g.10gb", "2g.20gb", "3g.40gb")
    partial = tuple(
        (draw(st.floats(0.0, 1.0)), frozenset(draw(st.lists(st.sampled_from(profiles)))))
        for _ in range(draw(st.integers(0, 3)))
    )
    weights = draw(st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5))
    total = sum(weights) or 1.0
    w = [x / total for x in weights]
    m = TypeMass(w[0], ((1, False, w[1]), (4, True, w[2]), (8, False, w[3])), (("2g.20gb", w[4]),))
    return NodeFree(empty, partial), m


@settings(max_examples=80, deadline=None, derandomize=True)
@given(case=nodes_and_masses())
def test_fragmentation_is_between_nothing_and_all_free(case: tuple[NodeFree, TypeMass]) -> None:
    node, m = case
    f = fragmentation(node, m)
    assert -1e-9 <= f <= node.total + 1e-9
    assert fragmentation(node, TypeMass(1.0, (), ())) == pytest.approx(node.total)


@pytest.mark.parametrize("busy_h100", [(0, 1, 2), ()], ids=["h100-partly-used", "h100-empty"])
@pytest.mark.parametrize("gpu_type", [H100, A100])
@pytest.mark.parametrize("size", [1, 2, 4])
def test_greedy_price_matches_the_objective(
    gpu_type: str, size: int, busy_h100: tuple[int, ...]
) -> None:
    builder = cluster().node("h", H100).node("a", A100).run("y", "a", (5,))
    if busy_h100:
        builder.run("x", "h", busy_h100)
    snapshot = builder.build()
    estimate = WorkloadEstimate.of(
        {TaskShape((A100, H100), 1): 3.0, TaskShape((H100,), 8): 1.0, TaskShape((A100,), 4): 1.0}
    )
    snapshot = replace(snapshot, workload=estimate)
    policy = Policy()
    pending = [gang("g", (H100, A100), gpus=size)]
    state = ClusterState(snapshot)
    pricing = Pricing(state, policy, pending)
    plan = plan_gang(state, pending[0], gpu_type, policy, Memo())
    assert plan is not None
    greedy_price = pricing.cost(state, pending[0], gpu_type, plan.replicas, plan.repartitions)
    placement = commit(state, plan, policy)
    costs = decision_costs(snapshot, pending, Decision(placements=(placement,)), policy)
    assert greedy_price == pytest.approx(costs.fragmentation + costs.scarcity)
    if not busy_h100 and gpu_type == H100:
        assert costs.scarcity > 0  # it broke the only place for the 8-GPU H100-only tasks
