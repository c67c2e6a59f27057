"""Fragmentation against the expected workload: reserves for constrained demand, MIG cuts.

Aspects: the reserve's incremental and aggregate charges on hand-computed cases; both engines keep
the last empty GPU of a type that single-type demand needs away from a gang with a choice, take it
when there is no alternative or no such demand, and never hold it back from a single-type gang;
the objective prices the reserve the same way; a reserve over a set of types (MIG-capable GPUs
for slice requests) by hand, who pays for it, both engines keeping a gang that could use a V100
off the last MIG-capable GPUs when slices are expected, and the objective's charge for it; node
reserves keep a whole node of a type free for the large single-type tasks the estimate expects
(not just GPUs), spend it on such a task, and cost nothing without such tasks; an empty GPU cut
for a MIG profile gets a layout that instances every compute slice, keeps the densest count of
the profile when nothing else is asked for and follows demand.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import CATALOG, cluster, gang

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.greedy import cut_layout
from gpufleet.core.objective import evaluate
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings, Weights
from gpufleet.core.pricing import Pricing
from gpufleet.core.scarcity import Reserve, constrained_shares, pays_for
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from gpufleet.core.workload import TaskShape, WorkloadEstimate
from gpufleet.model.mig import densest_layout, enumerate_layouts, is_valid_layout, profile_counts

ENGINES = [Engine.GREEDY, Engine.CPSAT]
H100, A100 = "H100-80GB", "A100-80GB"


def decide(snapshot: Snapshot, pending: list[Gang], engine: Engine, **weights: float) -> Decision:
    pol = Policy(weights=Weights(**weights), solver=SolverSettings(engine=engine))
    decision = place(snapshot, pending, pol)
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@pytest.mark.parametrize(
    ("reserved", "free_now", "take", "expected"),
    [
        pytest.param(0.8, 8.0, 1.0, 0.0, id="well-above-the-reserve"),
        pytest.param(0.8, 1.5, 1.0, 0.3, id="dips-into-the-reserve"),
        pytest.param(0.8, 1.0, 1.0, 0.8, id="takes-the-last-gpu"),
        pytest.param(2.5, 2.0, 2.0, 2.0, id="inside-the-reserve-throughout"),
        pytest.param(0.0, 1.0, 1.0, 0.0, id="no-reserve"),
    ],
)
def test_reserve_charge_by_hand(
    reserved: float, free_now: float, take: float, expected: float
) -> None:
    reserve = Reserve("H100-80GB", free=8.0, reserved=reserved, price=2.0)
    assert reserve.charge(free_now, take) == pytest.approx(2.0 * expected)


@pytest.mark.parametrize(
    ("taken", "flexible", "expected"),
    [
        pytest.param(3.0, 3.0, 0.0, id="leaves-the-reserve-free"),
        pytest.param(8.0, 8.0, 0.8, id="flexible-gangs-empty-the-type"),
        pytest.param(8.0, 0.0, 0.0, id="single-type-gangs-use-their-reserve"),
        pytest.param(8.0, 0.5, 0.5, id="charged-at-most-what-flexible-gangs-took"),
    ],
)
def test_reserve_aggregate_by_hand(taken: float, flexible: float, expected: float) -> None:
    reserve = Reserve("H100-80GB", free=8.0, reserved=0.8, price=3.0)
    assert reserve.aggregate(taken, flexible) == pytest.approx(3.0 * expected)


def estimate(h100_only: float) -> WorkloadEstimate | None:
    """One-GPU tasks, a share of them accepting only H100."""
    if not h100_only:
        return None
    return WorkloadEstimate.of(
        {TaskShape((H100,), 1): h100_only, TaskShape((A100, H100), 1): 1 - h100_only}
    )


def last_h100(share: float, a100_busy: int = 0) -> Snapshot:
    """One H100 node with one empty GPU, one A100 node with `8 - a100_busy` empty GPUs."""
    builder = cluster().node("h", H100).node("a", A100)
    for g in range(7):
        builder.run(f"h{g}", "h", (g,))
    for g in range(a100_busy):
        builder.run(f"a{g}", "a", (g,))
    # A share of 0.1 of the demand keeps 0.1 x the spare GPUs (9 empty, less what the one
    # pending gang asks for: 8) = 0.8 H100 GPU.
    return replace(builder.build(), workload=estimate(share))


FLEXIBLE = gang("flex", (H100, A100))
SINGLE = gang("only-h100", H100)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("share", "a100_busy", "pending", "where"),
    [
        pytest.param(0.1, 0, [FLEXIBLE], {"flex": A100}, id="flexible-keeps-off-the-reserve"),
        pytest.param(0.0, 0, [FLEXIBLE], {"flex": H100}, id="no-estimate-fastest-type"),
        pytest.param(0.1, 8, [FLEXIBLE], {"flex": H100}, id="no-alternative-takes-it"),
        pytest.param(0.1, 0, [SINGLE], {"only-h100": H100}, id="single-type-gang-gets-it"),
        pytest.param(
            0.1,
            0,
            [FLEXIBLE, SINGLE],
            {"flex": A100, "only-h100": H100},
            id="both-placed-when-flexible-yields",
        ),
    ],
)
def test_single_type_reserve(
    engine: Engine, share: float, a100_busy: int, pending: list[Gang], where: dict[str, str]
) -> None:
    decision = decide(last_h100(share, a100_busy), pending, engine)
    assert {p.gang_id: p.gpu_type for p in decision.placements} == where


V100 = "V100-32GB"
SLICES = TaskShape((A100, H100), 1, "2g.20gb")  # MIG: only the MIG-capable types serve it
ANY_GPU = TaskShape((A100, H100, V100), 1)


def mig_types_nearly_full(slice_share: float | None) -> Snapshot:
    """One empty GPU on an A100 and one on an H100 node, four on a V100 node; the estimate
    expects `slice_share` of the tasks to be 2g.20gb slices (the rest whole GPUs of any type)."""
    builder = cluster().node("a", A100).node("h", H100).node("v", V100, count=4)
    for g in range(7):
        builder.run(f"a{g}", "a", (g,)).run(f"h{g}", "h", (g,))
    workload = None
    if slice_share is not None:
        workload = WorkloadEstimate.of({SLICES: slice_share, ANY_GPU: 1 - slice_share})
    return replace(builder.build(), workload=workload)


ANYWHERE = gang("anywhere", (A100, H100, V100))


def test_type_set_shares_and_reserve_by_hand() -> None:
    # Task shares 0.9 / 0.1; a 2g.20gb slice is 2/7 of a GPU, so the slices' share of GPU
    # capacity is 0.9 x 2/7 / (0.9 x 2/7 + 0.1) = 0.72, for the set {A100, H100}; whole GPUs of
    # any type confine nothing. Spare: 6 empty GPUs less the pending gang's 1 = 5, so 3.6 GPUs
    # are expected, kept as 6 whole GPUs (Poisson(3.6) <= 5 has probability 0.84, <= 6 0.93)
    # of the 2 empty A100/H100 GPUs, at 2 x 4.8 (the H100's worth to the gang) each.
    snapshot = mig_types_nearly_full(0.9)
    per_set, per_slot = constrained_shares(snapshot)
    assert per_set == {(A100, H100): pytest.approx(0.72)} and per_slot == {}
    pricing = Pricing(ClusterState(snapshot), Policy(), [ANYWHERE])
    (reserve,) = pricing.gpu_reserves.values()
    assert (reserve.free, reserve.price) == (2.0, pytest.approx(9.6))
    assert reserve.reserved == 6.0


@pytest.mark.parametrize(
    ("usable", "types", "pays"),
    [
        pytest.param({A100, V100}, (A100, H100), True, id="could-use-a-v100"),
        pytest.param({A100, H100}, (A100, H100), False, id="confined-to-the-set"),
        pytest.param({A100}, (A100, H100), False, id="confined-to-part-of-it"),
        pytest.param({A100, H100}, (H100,), True, id="single-type-reserve-as-before"),
    ],
)
def test_who_pays_for_a_reserve(usable: set[str], types: tuple[str, ...], pays: bool) -> None:
    assert pays_for(usable, types) is pays


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("slice_share", "where"),
    [
        # 1.6 GPUs of the reserve taken by the gang on top of the 1.6 already short: 2 x 4.8 x 1
        # = 9.6 costs more than the H100's 4.8 - 1.0 over a V100.
        pytest.param(0.9, V100, id="keeps-the-mig-types-for-slices"),
        # 0.1 x 2/7 / (0.1 x 2/7 + 0.9) = 0.031 x 5 = 0.16 GPU kept: the last but one is free.
        pytest.param(0.1, H100, id="few-slices-expected"),
        pytest.param(None, H100, id="no-estimate"),
    ],
)
def test_a_type_set_reserve_keeps_mig_capable_gpus_for_slices(
    engine: Engine, slice_share: float | None, where: str
) -> None:
    decision = decide(mig_types_nearly_full(slice_share), [ANYWHERE], engine)
    assert [p.gpu_type for p in decision.placements] == [where]


def test_objective_charges_a_type_set_reserve() -> None:
    snapshot = mig_types_nearly_full(0.9)
    pol = Policy(weights=Weights(fragmentation=0.0), solver=SolverSettings(engine=Engine.GREEDY))
    on_h100 = place(replace(snapshot, workload=None), [ANYWHERE], pol)
    assert on_h100.placements[0].gpu_type == H100
    plain = evaluate(replace(snapshot, workload=None), [ANYWHERE], on_h100, pol)
    priced = evaluate(snapshot, [ANYWHERE], on_h100, pol)
    # Reserve 3.6 of 2 free GPUs: the GPU taken is inside it, at 2 x 4.8.
    assert plain.objective - priced.objective == pytest.approx(2 * 4.8)


@pytest.mark.parametrize("engine", ENGINES)
def test_reserve_weight_zero_turns_it_off(engine: Engine) -> None:
    decision = decide(last_h100(0.1), [FLEXIBLE], engine, scarcity=0.0, fragmentation=0.0)
    assert [p.gpu_type for p in decision.placements] == [H100]


def test_objective_charges_a_flexible_gang_for_the_reserve() -> None:
    snapshot = last_h100(0.1)
    pol = Policy(weights=Weights(fragmentation=0.0), solver=SolverSettings(engine=Engine.GREEDY))
    on_h100 = place(replace(snapshot, workload=None), [FLEXIBLE], pol)
    assert on_h100.placements[0].gpu_type == H100
    plain = evaluate(replace(snapshot, workload=None), [FLEXIBLE], on_h100, pol)
    priced = evaluate(snapshot, [FLEXIBLE], on_h100, pol)
    # 0.8 GPU expected, 2 kept of the 1 free: the gang takes 1 more of them; the price is
    # 2 x 4.8 (the H100's value to this gang).
    assert plain.objective - priced.objective == pytest.approx(2 * 4.8)
    single = evaluate(snapshot, [SINGLE], replace(on_h100, placements=()), pol)
    assert single.objective == pytest.approx(0.0)


def whole_h100_node(eight_share: float, a100_free: int = 8) -> Snapshot:
    """One partly used H100 node (7 GPUs free), one empty H100 node, one A100 node with
    `a100_free` empty GPUs; an estimate where 8-GPU H100-only tasks take `eight_share` of the
    tasks and one-GPU tasks that accept either type the rest."""
    builder = cluster().node("h0", H100).node("h1", H100).node("a", A100)
    builder.run("busy", "h0", (0,))
    for g in range(8 - a100_free):
        builder.run(f"a{g}", "a", (g,))
    shapes = {TaskShape((A100, H100), 1): 1 - eight_share}
    if eight_share:
        shapes[TaskShape((H100,), 8)] = eight_share
    return replace(builder.build(), workload=WorkloadEstimate.of(shapes))


FOUR_FLEX = gang("four", (H100, A100), gpus=4)
SEVEN_FLEX = gang("seven", (H100, A100), gpus=7, topology=Topology.SAME_NODE)
EIGHT_H100 = gang("eight", H100, gpus=8)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("share", "a100_free", "pending", "where"),
    [
        # The 4-GPU gang fits on h0 (best fit) either way; a 7-GPU one too. Two of them:
        # the second would break h1, the only node an 8-GPU H100 task fits on.
        pytest.param(
            0.05, 8, [FOUR_FLEX, replace(FOUR_FLEX, id="four-b"), replace(FOUR_FLEX, id="four-c")],
            {"four": H100, "four-b": A100, "four-c": A100},
            id="keeps-the-whole-node",
        ),
        pytest.param(
            0.0, 8, [FOUR_FLEX, replace(FOUR_FLEX, id="four-b"), replace(FOUR_FLEX, id="four-c")],
            {"four": H100, "four-b": H100, "four-c": H100},
            id="no-large-tasks-no-reserve",
        ),
        pytest.param(
            0.05, 8, [EIGHT_H100, SEVEN_FLEX],
            {"eight": H100, "seven": H100},
            id="the-large-task-takes-the-slot",
        ),
    ],
)  # fmt: skip
def test_node_reserve(
    engine: Engine, share: float, a100_free: int, pending: list[Gang], where: dict[str, str]
) -> None:
    decision = decide(whole_h100_node(share, a100_free), pending, engine)
    assert {p.gang_id: p.gpu_type for p in decision.placements} == where
    if share and "eight" not in where:
        assert "h1" not in {r.node for p in decision.placements for r in p.replicas}


GPU = CATALOG[A100]


@pytest.mark.parametrize(
    ("profile", "demand"),
    [
        pytest.param("4g.40gb", {}, id="4g-no-other-demand"),
        pytest.param("4g.40gb", {"4g.40gb": 5, "2g.20gb": 4, "1g.10gb": 1}, id="4g-with-2g-demand"),
        pytest.param("4g.40gb", {"4g.40gb": 5, "3g.40gb": 6}, id="4g-with-3g-demand"),
        pytest.param("2g.20gb", {"2g.20gb": 3}, id="2g"),
        pytest.param("3g.40gb", {"3g.40gb": 2, "1g.10gb": 2}, id="3g-with-1g-demand"),
        pytest.param("1g.10gb", {}, id="1g"),
    ],
)
def test_cut_layout_instances_every_compute_slice(profile: str, demand: dict[str, int]) -> None:
    lay = cut_layout(GPU, profile, demand)
    assert is_valid_layout(GPU, lay)
    # The densest count of the profile is kept when no other profile is asked for (else the
    # rest of the GPU goes to what the demand can use, test_mig_recut_empty.py) ...
    count = profile_counts(lay)[profile]
    assert count >= 1
    if set(demand) <= {profile}:
        assert count == len(densest_layout(GPU, profile))
    # ... and as much compute is instanced as any valid layout with that count allows (7 slices,
    # or 6 for two 3g.40gb, whose memory slices fill the GPU).
    best = max(
        sum(GPU.mig_profile(i.profile).sm_slices for i in other)
        for other in enumerate_layouts(GPU)
        if profile_counts(other)[profile] == count
    )
    assert sum(GPU.mig_profile(i.profile).sm_slices for i in lay) == best
    assert best == (6 if profile == "3g.40gb" and count == 2 else 7)
    # Other instances come from profiles that are asked for when there are any.
    others = {i.profile for i in lay if i.profile != profile}
    asked = {p for p, c in demand.items() if c and p != profile}
    if asked:
        assert others <= asked or sum(GPU.mig_profile(p).sm_slices for p in asked) < 3


def test_cut_layout_follows_demand() -> None:
    with_2g = cut_layout(GPU, "4g.40gb", {"4g.40gb": 5, "2g.20gb": 4, "1g.10gb": 1})
    with_3g = cut_layout(GPU, "4g.40gb", {"4g.40gb": 5, "3g.40gb": 6})
    assert "2g.20gb" in profile_counts(with_2g)
    assert "3g.40gb" in profile_counts(with_3g)


@pytest.mark.parametrize("engine", ENGINES)
def test_mig_gang_on_an_empty_gpu_leaves_no_stranded_slices(engine: Engine) -> None:
    snapshot = cluster().node("a", A100, count=1).build()
    pending = [gang("m", A100, mig="4g.40gb")]
    decision = decide(snapshot, pending, engine)
    assert [p.gang_id for p in decision.placements] == ["m"]
    (rep,) = decision.repartitions
    assert "4g.40gb" in profile_counts(rep.new_layout)
    assert sum(GPU.mig_profile(i.profile).sm_slices for i in rep.new_layout) == 7
