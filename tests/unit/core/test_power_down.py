"""The core's idle-node power-down plan (`gpufleet.core.power_down.plan_power`).

Aspects: an empty node is switched off only after the rule's idle time, longest idle first,
keeping the warm nodes of each GPU type; a node holding anything (running, or placed by the
decision) never is; switched-off nodes are woken only for pending gangs that fit nowhere
powered, and no more of them than the gangs need; a booting node counts as coming capacity;
boots end after the rule's boot time; the plan's next change time; the rule switched off wakes
every node; bad rule values are refused. Moves are demand too: a node a running gang would move
to (the core's move rule) stays on, or is woken if off, but not for a move that gains less than
the boot, nor with moves off, nor before pending work; a node the decision moves a gang to is
not switched off, and that gang is not moved again.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang

from gpufleet.core.decision import Decision, GangPlacement, Move
from gpufleet.core.policy import MoveRule, Policy, PowerDownRule
from gpufleet.core.power_down import NodePower, PowerState, plan_power
from gpufleet.core.snapshot import ReplicaPlacement, RunProgress, Snapshot

RULE = PowerDownRule(enabled=True, idle_s=600.0, warm_nodes_per_type=0, boot_s=300.0)


def policy(**changes: float | int | bool) -> Policy:
    return Policy(power_down=replace(RULE, **changes))  # type: ignore[arg-type]


def on(empty_since: float | None) -> NodePower:
    return NodePower(PowerState.ON, 0.0, empty_since)


def unschedulable(snapshot: Snapshot, *names: str) -> Snapshot:
    """The snapshot as the caller gives it: switched-off and booting nodes cordoned."""
    nodes = tuple(replace(n, schedulable=n.name not in names) for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes)


def test_empty_node_goes_off_after_its_idle_time_and_not_before() -> None:
    snap = cluster().node("a", "H100-80GB").node("b", "H100-80GB").run("g", "a", (0,)).build()
    power = {"a": on(None), "b": on(100.0)}
    early = plan_power(snap, [], power, 699.0, policy())
    assert early.power_off == ()
    assert early.next_change_s == pytest.approx(700.0)
    due = plan_power(snap, [], power, 700.0, policy())
    assert due.power_off == ("b",)  # a runs a gang: never switched off
    assert due.changes


def test_warm_nodes_per_type_stay_on_longest_idle_goes_first() -> None:
    snap = (
        cluster()
        .nodes_of("h", "H100-80GB", 3)
        .node("v0", "V100-32GB")
        .node("v1", "V100-32GB")
        .build()
    )
    power = {"h0": on(50.0), "h1": on(0.0), "h2": on(20.0), "v0": on(0.0), "v1": on(0.0)}
    plan = plan_power(snap, [], power, 5000.0, policy(warm_nodes_per_type=1))
    # One warm node per type: h0 (emptied last) and one of the V100s stay on.
    assert plan.power_off == ("h1", "h2", "v0")


def test_node_the_decision_places_on_is_not_switched_off() -> None:
    snap = cluster().node("a", "H100-80GB").node("b", "H100-80GB").build()
    placed = GangPlacement("p", "H100-80GB", (ReplicaPlacement("a", (0,)),))
    plan = plan_power(
        snap, [], {"a": on(0.0), "b": on(0.0)}, 5000.0, policy(), Decision(placements=(placed,))
    )
    assert plan.power_off == ("b",)


def test_off_node_is_woken_only_for_a_gang_that_fits_nowhere_powered() -> None:
    base = cluster().node("a", "H100-80GB", 2).node("off1", "H100-80GB", 8)
    snap = unschedulable(
        base.node("off2", "H100-80GB", 8).run("r", "a", (0,)).build(), "off1", "off2"
    )
    off = NodePower(PowerState.OFF, 10.0, None)
    power = {"a": on(None), "off1": off, "off2": off}
    # One GPU is free on a: a one-GPU gang waits there (the decision left it for another
    # reason), nothing is woken.
    small = plan_power(snap, [gang("s", gpus=1)], power, 1000.0, policy())
    assert small.wake == () and small.waiting_for == {}
    # A 4-GPU gang fits on no powered node: exactly one switched-off node is woken for it.
    big = plan_power(snap, [gang("big", gpus=4)], power, 1000.0, policy())
    assert len(big.wake) == 1 and big.wake[0] in ("off1", "off2")
    assert big.waiting_for == {"big": big.wake}
    assert big.next_change_s == pytest.approx(1300.0)  # the woken node's boot ends
    # A gang of a type the fleet lacks wakes nothing.
    none = plan_power(snap, [gang("t4", types="T4")], power, 1000.0, policy())
    assert none.wake == ()


def test_booting_node_is_coming_capacity_and_boots_after_boot_time() -> None:
    snap = unschedulable(
        cluster().node("w", "H100-80GB").node("off", "H100-80GB").build(), "w", "off"
    )
    power = {"w": NodePower(PowerState.WAKING, 1000.0, None), "off": NodePower(PowerState.OFF)}
    waiting = plan_power(snap, [gang("g", gpus=8)], power, 1100.0, policy())
    assert waiting.wake == ()  # the booting node will hold it
    assert waiting.booted == ()
    assert waiting.waiting_for == {"g": ("w",)}
    assert waiting.next_change_s == pytest.approx(1300.0)
    done = plan_power(snap, [gang("g", gpus=8)], power, 1300.0, policy())
    assert done.booted == ("w",)
    assert done.wake == ()  # the booted node holds the gang


def test_rule_off_switches_nothing_and_wakes_every_node() -> None:
    snap = unschedulable(cluster().node("a", "H100-80GB").node("b", "H100-80GB").build(), "b")
    power = {"a": on(0.0), "b": NodePower(PowerState.OFF)}
    plan = plan_power(snap, [], power, 1e6, policy(enabled=False))
    assert plan.power_off == ()
    assert plan.wake == ("b",)


@pytest.mark.parametrize(
    "field", [{"idle_s": -1.0}, {"boot_s": -1.0}, {"warm_nodes_per_type": -1}], ids=str
)
def test_negative_rule_values_are_refused(field: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        PowerDownRule(enabled=True, **field)  # type: ignore[arg-type]


H100, T4 = "H100-80GB", "T4"
OFF = NodePower(PowerState.OFF, 10.0, None)


def t4_job(remaining_s: float = 36_000.0, *h100: str) -> Snapshot:
    """A 4-GPU job running on a T4 node with `remaining_s` left (a move to an H100, 13.7x as
    fast, is worth it), and empty H100 nodes `h100`."""
    builder = cluster().node("t", T4, count=4)
    for name in h100:
        builder.node(name, H100)
    built = builder.run("job", "t", (0, 1, 2, 3)).build()
    (job,) = built.running
    progress = RunProgress(remaining_s, 0.0, 60.0, 0)
    demand = gang("job", (H100, T4), gpus=4)
    return replace(built, running=(replace(job, demand=demand, progress=progress),))


def test_idle_node_a_running_gang_would_move_to_stays_on() -> None:
    snap = t4_job(36_000.0, "h")
    plan = plan_power(snap, [], {"t": on(None), "h": on(0.0)}, 5000.0, policy())
    assert plan.power_off == ()


def test_switched_off_node_a_running_gang_would_move_to_is_woken() -> None:
    snap = unschedulable(t4_job(36_000.0, "h0", "h1"), "h0", "h1")
    plan = plan_power(snap, [], {"t": on(None), "h0": OFF, "h1": OFF}, 5000.0, policy())
    assert len(plan.wake) == 1 and plan.wake[0] in ("h0", "h1")  # one node holds the move
    assert plan.waiting_for == {}  # only pending gangs wait for a boot


@pytest.mark.parametrize(
    ("remaining_s", "moves"),
    [
        # 240 s left: a move gains 240 - (60 + 240 / 13.7) s now, nothing after a 300 s boot.
        pytest.param(240.0, MoveRule(), id="gain-less-than-the-boot"),
        pytest.param(36_000.0, MoveRule(enabled=False), id="moves-off"),
        pytest.param(36_000.0, MoveRule(max_per_hour=0), id="no-moves-left-this-hour"),
    ],
)
def test_no_wake_for_a_move_not_worth_it(remaining_s: float, moves: MoveRule) -> None:
    snap = unschedulable(t4_job(remaining_s, "h"), "h")
    plan = plan_power(snap, [], {"t": on(None), "h": OFF}, 5000.0, replace(policy(), moves=moves))
    assert plan.wake == ()


def test_pending_work_comes_before_a_move() -> None:
    # One switched-off H100 node: the pending 8-GPU gang gets it, the move nothing more.
    snap = unschedulable(t4_job(36_000.0, "h"), "h")
    plan = plan_power(snap, [gang("p", H100, gpus=8)], {"t": on(None), "h": OFF}, 5000.0, policy())
    assert plan.wake == ("h",)
    assert plan.waiting_for == {"p": ("h",)}


def test_node_the_decision_moves_a_gang_to_is_not_switched_off() -> None:
    snap = t4_job(36_000.0, "h0", "h1")
    replicas = (ReplicaPlacement("h0", (0, 1, 2, 3)),)
    move = Move("job", T4, GangPlacement("job", H100, replicas), 30_000.0)
    power = {"t": on(None), "h0": on(0.0), "h1": on(0.0)}
    plan = plan_power(snap, [], power, 5000.0, policy(), Decision(moves=(move,)))
    # h0 holds the moved gang; it is not moved again, so h1 is not needed.
    assert plan.power_off == ("h1",)
