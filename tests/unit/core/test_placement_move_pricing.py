"""Moves priced against the expected workload (core/moves.py with pricing.py).

Aspects: `Pricing.move_price` by hand (a reserve charge for taking the last GPU of a type that
single-type demand needs, or the last free slot for large tasks; fragmentation priced apart);
both engines keep a running flexible gang off the last free GPU of a type that the estimate
expects single-type tasks for, and out of the reserve sized at the move service level (0.99, a
placement's 0.9 would leave it room), and move it when there is room beyond that reserve, the
estimate expects none or there is none; node room: a move never takes the last free slot for large
tasks, takes one when another stays free (even when the estimate reserves more slots than are
free, as whole-node jobs make it), and is not charged for room it frees as much of as it takes;
fragmentation stops a move only when it outweighs the work the move adds.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang

from gpufleet.core.decision import Decision
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings, Weights
from gpufleet.core.preempt import release_gang
from gpufleet.core.pricing import MovePrice, Pricing
from gpufleet.core.scarcity import MOVE_SERVICE_LEVEL, whole_tasks
from gpufleet.core.snapshot import ReplicaPlacement, RunProgress, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from gpufleet.core.workload import TaskShape, WorkloadEstimate

ENGINES = [Engine.GREEDY, Engine.CPSAT]
H100, A100 = "H100-80GB", "A100-80GB"
HOUR = 3600.0
FLEXIBLE = gang("job", (A100, H100))


def job_on_a100(
    a100_held: tuple[int, ...], h100_held: tuple[int, ...], workload: WorkloadEstimate | None
) -> Snapshot:
    """A long one-GPU job that accepts A100 or H100 runs on A100 GPU 6 (other gangs hold
    `a100_held` there and `h100_held` on the 8-GPU H100 node)."""
    builder = cluster().node("a", A100).node("h", H100).run("job", "a", (6,))
    for g in a100_held:
        builder.run(f"a{g}", "a", (g,))
    for g in h100_held:
        builder.run(f"h{g}", "h", (g,))
    built = builder.build()
    progress = RunProgress(10 * HOUR, 0.0, 60.0, 0)
    running = tuple(
        replace(r, demand=FLEXIBLE, progress=progress) if r.id == "job" else r
        for r in built.running
    )
    return replace(built, running=running, workload=workload)


def h100_only(share: float) -> WorkloadEstimate:
    """One-GPU tasks, `share` of them accepting only H100 (the rest A100 or H100)."""
    return WorkloadEstimate.of(
        {TaskShape((H100,), 1): share, TaskShape((A100, H100), 1): 1 - share}
    )


TWO_GPU = WorkloadEstimate.of({TaskShape((A100, H100), 2): 1.0})


def decide(snapshot: Snapshot, engine: Engine, weights: Weights | None = None) -> Decision:
    policy = Policy(weights=weights or Weights(), solver=SolverSettings(engine=engine))
    decision = place(snapshot, [], policy)
    assert decision_problems(snapshot, [], decision) == []
    return decision


def move_price(
    snapshot: Snapshot, to: tuple[int, ...], node: str = "h", gpu_type: str = H100
) -> MovePrice:
    """`move_price` of moving the job to GPUs `to` of `node`, the way plan_moves asks for it."""
    state = ClusterState(snapshot)
    pricing = Pricing(state, Policy(), [])
    (job,) = [r for r in snapshot.running if r.id == "job"]
    release_gang(state, job)
    assert job.demand is not None
    return pricing.move_price(
        state, job.demand, gpu_type, [ReplicaPlacement(node, to)], (), job.replicas
    )


def test_move_charge_of_the_last_reserved_gpu_by_hand() -> None:
    # Empty GPUs: 7 A100 (GPU 6 is the job's) + 1 H100 = 8 spare; an H100-only share of 0.1
    # expects 0.8 H100 GPU, kept as 2 whole GPUs (Poisson(0.8) <= 1 has probability 0.81, <= 2
    # 0.95). One is short already; taking the last one costs scarcity 2 x worth 4.8 x 1 = 9.6.
    snapshot = job_on_a100((), tuple(range(7)), h100_only(0.1))
    assert move_price(snapshot, (7,)).reserved == pytest.approx(2 * 4.8)
    # With three free, 1.0 is expected and 2 are kept: one GPU taken leaves two, no charge.
    assert move_price(job_on_a100((), tuple(range(5)), h100_only(0.1)), (5,)).reserved == 0.0


def test_move_service_level_by_hand() -> None:
    # Poisson(1.0): P(<= 2) = 0.920, P(<= 3) = 0.981, P(<= 4) = 0.996.
    assert whole_tasks(1.0) == 2.0
    assert whole_tasks(1.0, MOVE_SERVICE_LEVEL) == 4.0
    snapshot = job_on_a100((), tuple(range(5)), h100_only(0.1))
    state = ClusterState(snapshot)
    assert Pricing(state, Policy(), []).gpu_reserves[(H100,)].reserved == 2.0
    assert Pricing(state, Policy(), [], MOVE_SERVICE_LEVEL).gpu_reserves[(H100,)].reserved == 4.0


def test_fragmentation_of_a_move_is_priced_apart_from_reserves() -> None:
    # Two-GPU tasks only: the move leaves one H100 GPU free, a fragment of 1 GPU for all of
    # them (weight 1), but takes nothing from a reserve.
    snapshot = job_on_a100((0, 1, 2, 3, 4, 5), (0, 1, 2, 3, 4, 5), TWO_GPU)
    assert move_price(snapshot, (6,)) == MovePrice(0.0, pytest.approx(1.0))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("workload", "free_h100", "moves"),
    [
        # 7 A100 + 1 H100 spare: 0.1 x 8 = 0.8 H100 GPU reserved, the move would take it.
        pytest.param(h100_only(0.1), 1, False, id="keeps-the-last-h100"),
        # 7 + 2 spare: 0.9 expected, 2 GPUs kept: the move would take one of them.
        pytest.param(h100_only(0.1), 2, False, id="keeps-two-for-an-expected-0.9"),
        # 7 + 3 spare: 1.0 expected; a placement keeps 2 (P(<= 2) = 0.92), which the move would
        # leave free, but a move keeps 4 (P(<= 3) = 0.98 < 0.99 <= P(<= 4)).
        pytest.param(h100_only(0.1), 3, False, id="keeps-the-move-service-level"),
        # 7 + 5 spare: 1.2 expected, a move keeps 4 (P(<= 4) = 0.992): 4 stay free after it.
        pytest.param(h100_only(0.1), 5, True, id="room-beyond-the-reserve"),
        pytest.param(WorkloadEstimate.of({TaskShape((A100, H100), 1): 1.0}), 1, True, id="none"),
        pytest.param(None, 1, True, id="no-estimate"),
    ],
)
def test_a_move_stays_out_of_a_reserve(
    engine: Engine, workload: WorkloadEstimate | None, free_h100: int, moves: bool
) -> None:
    snapshot = job_on_a100((), tuple(range(8 - free_h100)), workload)
    decision = decide(snapshot, engine)
    assert [(m.gang_id, m.placement.gpu_type) for m in decision.moves] == (
        [("job", H100)] if moves else []
    )


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("weight", "moves"), [(1.0, True), (3.0, False)])
def test_fragmentation_stops_a_move_that_adds_less_work(
    engine: Engine, weight: float, moves: bool
) -> None:
    # Two H100 GPUs free: the move leaves one, a fragment of 1 GPU for the 2-GPU tasks. It adds
    # 4.8 - 2.8 = 2 of work: made at fragmentation weight 1, not at weight 3.
    snapshot = job_on_a100((), (0, 1, 2, 3, 4, 5), TWO_GPU)
    decision = decide(snapshot, engine, Weights(fragmentation=weight))
    assert [m.gang_id for m in decision.moves] == (["job"] if moves else [])


# ----- node room for large tasks ---------------------------------------------------------------

V100, T4 = "V100-32GB", "T4"


def eight_gpu_tasks(share: float, types: tuple[str, ...] = (V100,)) -> WorkloadEstimate:
    """`share` of the tasks take a whole 8-GPU node of `types`, the rest one GPU of T4 or V100."""
    return WorkloadEstimate.of({TaskShape(types, 8): share, TaskShape((T4, V100), 1): 1 - share})


def job_on_t4(
    empty_v100_nodes: int, workload: WorkloadEstimate, gpus: int = 1, empty_t4_nodes: int = 0
) -> Snapshot:
    """A long job of `gpus` GPUs that accepts T4 or V100 runs on a 4-GPU T4 node;
    `empty_v100_nodes` 8-GPU V100 nodes and `empty_t4_nodes` T4 nodes are empty, one more V100
    node is full."""
    builder = cluster().node("t", T4, 4).node("full", V100).run("job", "t", tuple(range(gpus)))
    builder.run("other", "full", tuple(range(8)))
    builder.nodes_of("v", V100, empty_v100_nodes).nodes_of("e", T4, empty_t4_nodes, 4)
    built = builder.build()
    demand = gang("job", (T4, V100), gpus=gpus)
    running = tuple(
        replace(r, demand=demand, progress=RunProgress(10 * HOUR, 0.0, 60.0, 0))
        if r.id == "job"
        else r
        for r in built.running
    )
    return replace(built, running=running, workload=workload)


def test_move_price_of_the_last_free_slot_by_hand() -> None:
    # 1 % of the tasks are 8-GPU V100 tasks: 8 x 0.01 / (8 x 0.01 + 0.99) = 0.0748 of the GPUs.
    # Spare GPUs: 3 T4 + 8 V100 = 11, so 0.0748 x 11 / 8 = 0.1028 slots are kept, priced at
    # scarcity 2 x 8 GPUs x worth 1.0 (V100) = 16 each. Taking the one free slot costs
    # 16 x 0.1028 = 1.645; the 7 GPUs left are a fragment for the 8-GPU tasks: 7 x 0.01.
    share = 0.08 / (0.08 + 0.99)
    price = move_price(job_on_t4(1, eight_gpu_tasks(0.01)), (0,), "v0", V100)
    assert price.reserved == pytest.approx(16 * share * 11 / 8)
    assert price.fragmentation == pytest.approx(0.07)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("empty_nodes", "share", "moves"),
    [
        # 0.1 slot kept, one free: the move would take the room the next 8-GPU task needs.
        pytest.param(1, 0.01, False, id="keeps-the-last-slot"),
        # Two free: one stays for the next 8-GPU task.
        pytest.param(2, 0.01, True, id="one-slot-stays"),
    ],
)
def test_a_move_keeps_the_last_free_slot_for_large_tasks(
    engine: Engine, empty_nodes: int, share: float, moves: bool
) -> None:
    decision = decide(job_on_t4(empty_nodes, eight_gpu_tasks(share)), engine)
    assert [(m.gang_id, m.placement.gpu_type) for m in decision.moves] == (
        [("job", V100)] if moves else []
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_a_move_takes_a_slot_of_a_reserve_larger_than_the_free_slots(engine: Engine) -> None:
    # As in the live move test: whole-node tasks of the new type (45 %) and as many of another
    # type, and the job's own 4-GPU shape. The 8-GPU V100 tasks are 3.6 / 5.8 of the GPUs, so
    # of 32 spare GPUs (2 V100 and 4 T4 nodes empty) 2.5 slots are kept: more than the 2 free.
    # A placement there pays; the move takes one and leaves the other. Its fragmentation on
    # the V100 node is 4 x 0.45 (8-GPU tasks) - 4 x 0.45 (T4 tasks, no longer free room) = 0.
    workload = WorkloadEstimate.of(
        {TaskShape((V100,), 8): 0.45, TaskShape((T4,), 4): 0.45, TaskShape((T4, V100), 4): 0.1}
    )
    snapshot = job_on_t4(2, workload, gpus=4, empty_t4_nodes=4)
    state = ClusterState(snapshot)
    pricing = Pricing(state, Policy(), [])
    half = [ReplicaPlacement("v0", (0, 1, 2, 3))]
    assert pricing.cost(state, gang("new", (T4, V100), gpus=4), V100, half) > 0
    assert move_price(snapshot, (0, 1, 2, 3), "v0", V100) == MovePrice(0.0, pytest.approx(0.0))
    decision = decide(snapshot, engine)
    assert [(m.gang_id, m.placement.gpu_type) for m in decision.moves] == [("job", V100)]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_move_that_frees_the_room_it_takes_is_not_charged(engine: Engine) -> None:
    # The job holds one GPU of a V100 node, so the only free slot for 8-GPU tasks (V100 or
    # H100) is the empty H100 node. Moving there takes that slot and frees the V100 node's.
    workload = eight_gpu_tasks(0.01, (H100, V100))
    built = cluster().node("v", V100).node("h", H100).run("job", "v", (0,)).build()
    demand = gang("job", (V100, H100))
    progress = RunProgress(10 * HOUR, 0.0, 60.0, 0)
    (job,) = built.running
    snapshot = replace(
        built, running=(replace(job, demand=demand, progress=progress),), workload=workload
    )
    assert move_price(snapshot, tuple(range(1)), "h", H100).reserved == 0.0
    decision = decide(snapshot, engine)
    assert [(m.gang_id, m.placement.gpu_type) for m in decision.moves] == [("job", H100)]
