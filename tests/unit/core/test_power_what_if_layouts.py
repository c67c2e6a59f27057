"""The power plan's wake what-if holds its first placements on the MIG layouts they need
(`gpufleet.core.power_down.plan_power`).

Aspects: a pending gang the first what-if places whole on an empty MIG-mode GPU (as a decision
would, switching it back) is held there while the next what-if looks for room on switched-off
nodes, and the gang that fits nowhere powered still wakes one node; the same for a MIG gang the
first what-if places by cutting a whole GPU.
"""

from __future__ import annotations

from dataclasses import replace

from placement_builders import cluster, gang, layout

from gpufleet.core.policy import Policy, PowerDownRule
from gpufleet.core.power_down import NodePower, PowerState, plan_power
from gpufleet.core.snapshot import Snapshot

H100 = "H100-80GB"
RULE = PowerDownRule(enabled=True, idle_s=600.0, warm_nodes_per_type=0, boot_s=300.0)


def fleet(cut: bool) -> Snapshot:
    """a: 2 empty GPUs, both cut 3g + 3g (`cut`) or whole; off1: a switched-off 8-GPU node."""
    halves = layout("3g.40gb@0", "3g.40gb@4")
    snapshot = (
        cluster()
        .node("a", H100, 2, mig={0: halves, 1: halves} if cut else None)
        .node("off1", H100, 8)
        .build()
    )
    nodes = tuple(replace(n, schedulable=n.name != "off1") for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes)


def test_a_whole_gang_on_an_empty_mig_mode_gpu_is_held_there_in_the_next_what_if() -> None:
    power = {"a": NodePower(PowerState.ON, 0.0, None), "off1": NodePower(PowerState.OFF, 0.0, None)}
    pending = [gang("one", gpus=1), gang("big", gpus=4)]
    plan = plan_power(fleet(cut=True), pending, power, 1000.0, Policy(power_down=RULE))
    assert plan.wake == ("off1",) and plan.waiting_for == {"big": ("off1",)}


def test_a_mig_gang_that_cuts_a_whole_gpu_is_held_there_in_the_next_what_if() -> None:
    power = {"a": NodePower(PowerState.ON, 0.0, None), "off1": NodePower(PowerState.OFF, 0.0, None)}
    pending = [gang("slice", mig="1g.10gb"), gang("big", gpus=4)]
    plan = plan_power(fleet(cut=False), pending, power, 1000.0, Policy(power_down=RULE))
    assert plan.wake == ("off1",) and plan.waiting_for == {"big": ("off1",)}
