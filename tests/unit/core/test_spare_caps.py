"""Power caps only on spare capacity (core/spare_caps.py, `PowerCapRule.spare_only`, the
`energy` preset).

Aspects, with both engines: the energy preset caps a gang on a type with room to spare; it
does not cap a gang on a type that a gang left pending accepts, nor on a type the decision
fills, per type in one decision; caps a gang asked for (`efficient`, its own max_slowdown) stay
on a contended type; without `spare_only` the policy's caps stay everywhere; a move onto a type
it fills is not capped, onto a type with room it is; `contended_types` by hand.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang

from gpufleet.core.decision import Decision
from gpufleet.core.demand import EnergyPreference, Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, PowerCapRule, SolverSettings
from gpufleet.core.presets import preset_policy
from gpufleet.core.snapshot import RunProgress, Snapshot
from gpufleet.core.spare_caps import contended_types
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from gpufleet.model.power import choose_power_cap

ENGINES = [Engine.GREEDY, Engine.CPSAT]
H100, A100, T4 = "H100-80GB", "A100-80GB", "T4"
HOUR = 3600.0


def energy(engine: Engine) -> Policy:
    return preset_policy("energy", SolverSettings(engine=engine))


def cap_w(snapshot: Snapshot, gpu_type: str) -> float:
    choice = choose_power_cap(snapshot.catalog[gpu_type], 0.05)
    assert choice is not None
    return choice.cap_w


def decide(snapshot: Snapshot, pending: list[Gang], policy: Policy) -> Decision:
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision) == []
    return decision


def caps(decision: Decision) -> dict[str, float | None]:
    return {p.gang_id: p.power_cap_w for p in decision.placements}


def test_the_energy_preset_caps_only_on_spare_types() -> None:
    rule = preset_policy("energy").power_caps
    assert rule.enabled and rule.cap_all and rule.spare_only and rule.max_slowdown == 0.05
    assert not preset_policy("balanced").power_caps.spare_only


@pytest.mark.parametrize("engine", ENGINES)
def test_a_gang_on_a_type_with_room_to_spare_is_capped(engine: Engine) -> None:
    snapshot = cluster().node("h", H100).build()
    decision = decide(snapshot, [gang("g", H100, gpus=2)], energy(engine))
    assert caps(decision) == {"g": cap_w(snapshot, H100)}


@pytest.mark.parametrize("engine", ENGINES)
def test_no_cap_on_a_type_a_pending_gang_waits_for(engine: Engine) -> None:
    # Only one of the two fits; the other waits for these H100s, so a capped gang would hold
    # them longer: no cap, though two GPUs stay empty.
    snapshot = cluster().node("h", H100).build()
    pending = [gang("big", H100, gpus=6), gang("wide", H100, gpus=4)]
    decision = decide(snapshot, pending, energy(engine))
    assert decision.admitted_ids == {"big"}
    assert caps(decision) == {"big": None}


@pytest.mark.parametrize("engine", ENGINES)
def test_no_cap_on_a_type_the_decision_fills_a_cap_on_the_other(engine: Engine) -> None:
    snapshot = cluster().node("h", H100).node("a", A100).build()
    pending = [gang("fills", H100, gpus=8), gang("room", A100, gpus=2)]
    decision = decide(snapshot, pending, energy(engine))
    assert caps(decision) == {"fills": None, "room": cap_w(snapshot, A100)}


@pytest.mark.parametrize("engine", ENGINES)
def test_caps_a_gang_asked_for_stay_on_a_contended_type(engine: Engine) -> None:
    snapshot = cluster().node("h", H100).build()
    pending = [
        gang("eco", H100, gpus=2, energy=EnergyPreference.EFFICIENT),
        gang("own", H100, gpus=2, max_slowdown=0.02),
        gang("plain", H100, gpus=4),
    ]
    decision = decide(snapshot, pending, energy(engine))
    own = choose_power_cap(snapshot.catalog[H100], 0.02)
    assert own is not None
    assert caps(decision) == {"eco": cap_w(snapshot, H100), "own": own.cap_w, "plain": None}


@pytest.mark.parametrize("engine", ENGINES)
def test_without_spare_only_the_policy_caps_a_contended_type_too(engine: Engine) -> None:
    snapshot = cluster().node("h", H100).build()
    rule = PowerCapRule(enabled=True, max_slowdown=0.05, cap_all=True)
    policy = replace(energy(engine), power_caps=rule)
    decision = decide(snapshot, [gang("fills", H100, gpus=8)], policy)
    assert caps(decision) == {"fills": cap_w(snapshot, H100)}


def on_t4(h100_gpus: int) -> Snapshot:
    """A 4-GPU job running on a T4 node for hours yet; an empty H100 node beside it."""
    built = (
        cluster().node("t", T4, count=4).node("h", H100, h100_gpus).run("job", "t", (0, 1, 2, 3))
    ).build()
    (job,) = built.running
    progress = RunProgress(10 * HOUR, 0.0, 60.0, 0)
    demand = gang("job", (H100, T4), gpus=4)
    return replace(built, running=(replace(job, demand=demand, progress=progress),))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("h100_gpus", "capped"), [(4, False), (8, True)])
def test_a_move_is_capped_only_where_it_leaves_room(
    engine: Engine, h100_gpus: int, capped: bool
) -> None:
    snapshot = on_t4(h100_gpus)
    decision = decide(snapshot, [], energy(engine))
    (move,) = decision.moves
    assert move.placement.gpu_type == H100
    assert move.placement.power_cap_w == (cap_w(snapshot, H100) if capped else None)


def test_contended_types_by_hand() -> None:
    snapshot = (
        cluster()
        .node("h", H100, 2)
        .node("a", A100, 2)
        .node("t", T4, 2)
        .run("x", "h", (0, 1))
        .run("y", "a", (0,))
    ).build()
    state = ClusterState(snapshot)
    assert contended_types(state, []) == {H100}  # full
    assert contended_types(state, [gang("w", (T4,), gpus=4)]) == {H100, T4}  # a gang waits
