"""Waiting for a switched-off node (`gpufleet.core.boot_wait`), in `place` and in `plan_power`.

Aspects: a gang that would start on a much slower powered type waits for a faster switched-off
node (place leaves it pending with WaitingForFasterGpuType naming the node, plan_power wakes that
node and names the gang as waiting for it); a small speed gain, a long boot, a prior of 0 or the
rule switched off start it now; a gang that fits on no powered node is not held (the what-if
wakes for it as before); two held gangs never wait for the same GPUs, and a booting node counts
its remaining boot only; `boot_waits` lists off and booting nodes with their waits.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang

from gpufleet.core.boot_wait import boot_holds
from gpufleet.core.decision import PendingReason
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, PowerDownRule, SolverSettings
from gpufleet.core.power_down import NodePower, PowerState, boot_waits, plan_power
from gpufleet.core.snapshot import Snapshot

RULE = PowerDownRule(enabled=True, idle_s=600.0, warm_nodes_per_type=0, boot_s=300.0)
FAST, SLOW = "H100-80GB", "T4"


def policy(engine: Engine = Engine.GREEDY, **changes: float | bool) -> Policy:
    rule = replace(RULE, **changes)  # type: ignore[arg-type]
    return Policy(power_down=rule, solver=SolverSettings(engine=engine))


def fleet(waits: dict[str, float]) -> Snapshot:
    """One powered T4 node, two H100 nodes listed in `waits` as switched off or booting."""
    snap = cluster().node("t4", SLOW, 4).node("h0", FAST, 8).node("h1", FAST, 8).build()
    nodes = tuple(replace(n, schedulable=n.name not in waits) for n in snap.nodes)
    return replace(snap, nodes=nodes, boot_wait_s=waits)


def job(gang_id: str, gpus: int = 4, slow_speed: float = 0.2) -> Gang:
    # Per-GPU speed on each type, as the simulator passes the job's own model.
    return gang(
        gang_id,
        (FAST, SLOW),
        gpus=gpus,
        topology=Topology.SAME_NODE,
        throughput={FAST: 1.0, SLOW: slow_speed},
    )


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_much_slower_powered_type_waits_for_the_switched_off_fast_node(engine: Engine) -> None:
    snap = fleet({"h0": 300.0, "h1": 300.0})
    decision = place(snap, [job("g")], policy(engine))
    assert decision.placements == ()
    (why,) = decision.pending
    assert why.reason is PendingReason.WAITING_FOR_FASTER_TYPE
    assert "h0" in why.message and "300 s" in why.message and "T4" in why.message
    power = {
        "t4": NodePower(PowerState.ON, 0.0, None),
        "h0": NodePower(PowerState.OFF, 0.0, None),
        "h1": NodePower(PowerState.OFF, 0.0, None),
    }
    plan = plan_power(snap, [job("g")], power, 1000.0, policy(engine), decision)
    assert plan.wake == ("h0",)
    assert plan.waiting_for == {"g": ("h0",)}


def test_a_small_gain_a_long_boot_or_no_prior_starts_now_on_the_powered_type() -> None:
    off = {"h0": 300.0, "h1": 300.0}
    # 0.9 of the speed: waiting 300 s saves 400 s over a 1 h run, so it waits; at 0.95 not.
    assert boot_holds(fleet(off), [job("g", slow_speed=0.9)], policy()).keys() == {"g"}
    assert boot_holds(fleet(off), [job("g", slow_speed=0.95)], policy()) == {}
    # A boot longer than the whole gain (3600 * (1/0.2 - 1) = 14400 s).
    assert boot_holds(fleet({"h0": 14500.0, "h1": 14500.0}), [job("g")], policy()) == {}
    assert boot_holds(fleet(off), [job("g")], policy(expected_run_s=0.0)) == {}
    # A powered H100 node: nothing to wait for.
    assert boot_holds(fleet({"h0": 300.0}), [job("g")], policy()) == {}
    rule_off = Policy(power_down=replace(RULE, enabled=False))
    assert place(fleet(off), [job("g")], rule_off).admitted_ids == {"g"}


def test_a_gang_that_fits_no_powered_node_is_not_held_but_woken_for() -> None:
    snap = fleet({"h0": 300.0, "h1": 300.0})
    big = job("big", gpus=8)  # wider than the 4-GPU T4 node
    assert boot_holds(snap, [big], policy()) == {}
    power = {"t4": NodePower(PowerState.ON, 0.0, None)} | {
        n: NodePower(PowerState.OFF, 0.0, None) for n in ("h0", "h1")
    }
    plan = plan_power(snap, [big], power, 1000.0, policy(), place(snap, [big], policy()))
    assert plan.wake == ("h0",)


def test_held_gangs_reserve_distinct_gpus_and_a_booting_node_counts_its_rest() -> None:
    # h0 boots in 60 s, h1 is off: the first gang waits for h0 (both halves of it go to the
    # two 4-GPU gangs), a third one for h1.
    snap = fleet({"h0": 60.0, "h1": 300.0})
    holds = boot_holds(snap, [job("a"), job("b"), job("c")], policy())
    nodes = {gid: h.nodes for gid, h in holds.items()}
    assert nodes == {"a": ("h0",), "b": ("h0",), "c": ("h1",)}
    assert holds["a"].wait_s == 60.0 and holds["c"].wait_s == 300.0
    a, b = (set(holds[x].placement.replicas[0].gpus) for x in ("a", "b"))
    assert len(a) == len(b) == 4 and not a & b


def test_boot_waits_lists_off_and_booting_nodes() -> None:
    power = {
        "on": NodePower(PowerState.ON, 0.0, 5.0),
        "off": NodePower(PowerState.OFF, 10.0, None),
        "waking": NodePower(PowerState.WAKING, 900.0, None),
        "late": NodePower(PowerState.WAKING, 100.0, None),
    }
    assert boot_waits(power, 1000.0, RULE) == {"off": 300.0, "waking": 200.0, "late": 0.0}


def test_a_negative_prior_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        PowerDownRule(expected_run_s=-1.0)
