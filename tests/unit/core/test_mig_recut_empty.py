"""An empty GPU's MIG layout follows the demand on its type, pre-cut or not.

Aspects: `cut_layout` gives a lone slice the layout whose other instances the demand can use
(a `2g` where `4g` pods run keeps a `4g` free, a `2g` among `2g` demand gets as many `2g` as
fit) and counts the gang's own profile when the demand does not; on both engines a `2g` pod
for an empty GPU pre-cut `[1g, 1g, 2g, 3g]` (the mig-parted `all-balanced` shape) re-cuts it
to `[4g, 2g, 1g]` while `4g` pods run on the type, instead of taking the pre-cut `2g@2` that
blocks a `4g`; an empty GPU whose layout already serves the demand is taken as it is; a
policy without repartitions still takes the pre-cut instance; a multi-replica gang gets as
many instances of its profile per cut as it still needs.
"""

from __future__ import annotations

import pytest
from placement_builders import CATALOG, checked_decision, cluster, gang, layout

from gpufleet.core.greedy import cut_layout
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.model.mig import profile_counts

ENGINES = [Engine.GREEDY, Engine.CPSAT]
A100 = "A100-80GB"
GPU = CATALOG[A100]
BALANCED = layout("1g.10gb@0", "1g.10gb@1", "2g.20gb@2", "3g.40gb@4")
ROOM_FOR_4G = layout("4g.40gb@0", "2g.20gb@4", "1g.10gb@6")


def test_a_lone_2g_keeps_room_for_the_4g_demand() -> None:
    assert cut_layout(GPU, "2g.20gb", {"4g.40gb": 5, "3g.40gb": 2, "2g.20gb": 1}) == ROOM_FOR_4G


def test_a_2g_among_2g_demand_gets_every_2g_that_fits() -> None:
    lay = cut_layout(GPU, "2g.20gb", {"2g.20gb": 3})
    assert profile_counts(lay)["2g.20gb"] == 3


def test_the_gangs_own_profile_counts_without_demand() -> None:
    # No demand counted (e.g. a move onto a type nothing runs on): the profile's own.
    assert profile_counts(cut_layout(GPU, "1g.10gb", {}))["1g.10gb"] == 7
    assert profile_counts(cut_layout(GPU, "3g.40gb", {}))["3g.40gb"] == 2


@pytest.mark.parametrize("need", [1, 2, 3])
def test_a_cut_holds_the_replicas_still_needed(need: int) -> None:
    lay = cut_layout(GPU, "2g.20gb", {"4g.40gb": 9, "2g.20gb": 1}, need=need)
    assert profile_counts(lay)["2g.20gb"] >= need
    if need == 1:
        assert lay == ROOM_FOR_4G


def precut(gpu0: tuple[object, ...] = BALANCED) -> Snapshot:
    """One A100 node: GPU 0 empty in `gpu0`; GPUs 1-2 run a 4g pod each in `[4g, 3g]`; GPUs
    3-7 run whole-GPU jobs. The 3g rests are free instances of partly used GPUs."""
    four_three = layout("4g.40gb@0", "3g.40gb@4")
    mig = {0: gpu0, 1: four_three, 2: four_three}
    builder = cluster().node("a", A100, mig=mig)  # type: ignore[arg-type]
    builder.run("four-1", "a", (1,), mig="4g.40gb@0").run("four-2", "a", (2,), mig="4g.40gb@0")
    for g in range(3, 8):
        builder.run(f"whole-{g}", "a", (g,))
    return builder.build()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_2g_recuts_a_precut_empty_gpu_to_keep_4g_room(engine: Engine) -> None:
    snapshot = precut()
    pending = [gang("two", A100, mig="2g.20gb")]
    decision = checked_decision(snapshot, pending, engine)
    (placement,) = decision.placements
    (replica,) = placement.replicas
    assert (replica.node, replica.gpus) == ("a", (0,))
    assert [(r.gpu, r.old_layout, r.new_layout) for r in decision.repartitions] == [
        (0, BALANCED, ROOM_FOR_4G)
    ]
    assert replica.mig is not None and replica.mig.profile == "2g.20gb"
    assert replica.mig.start == 4  # not @2, which blocks the 4g@0


@pytest.mark.parametrize("engine", ENGINES)
def test_a_precut_layout_that_serves_the_demand_is_taken_as_it_is(engine: Engine) -> None:
    snapshot = precut(ROOM_FOR_4G)
    pending = [gang("two", A100, mig="2g.20gb")]
    decision = checked_decision(snapshot, pending, engine)
    (placement,) = decision.placements
    assert [(r.node, r.gpus, str(r.mig)) for r in placement.replicas] == [("a", (0,), "2g.20gb@4")]
    assert decision.repartitions == ()


@pytest.mark.parametrize("engine", ENGINES)
def test_without_repartitions_the_precut_instance_is_taken(engine: Engine) -> None:
    snapshot = precut()
    pending = [gang("two", A100, mig="2g.20gb")]
    policy = Policy(allow_repartition=False, solver=SolverSettings(engine=engine))
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision) == []
    (placement,) = decision.placements
    assert [str(r.mig) for r in placement.replicas] == ["2g.20gb@2"]
    assert decision.repartitions == ()
