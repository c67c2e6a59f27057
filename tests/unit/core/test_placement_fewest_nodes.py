"""A wide topology-`any` gang goes on the fewest nodes that can hold it, on both engines, when
free GPUs allow it; otherwise it is placed by per-replica best fit as before."""

from __future__ import annotations

from typing import Any

import pytest
from placement_builders import checked_decision, cluster, gang

from gpufleet.core import cpsat
from gpufleet.core.decision import Decision
from gpufleet.core.demand import Topology
from gpufleet.core.greedy import fewest_nodes
from gpufleet.core.policy import Engine
from gpufleet.core.snapshot import Snapshot

ENGINES = [Engine.GREEDY, Engine.CPSAT]


def nodes_of(decision: Decision, gang_id: str) -> list[str]:
    placement = next(p for p in decision.placements if p.gang_id == gang_id)
    return sorted({r.node for r in placement.replicas})


def t4_fleet() -> Snapshot:
    """Six 4-GPU T4 nodes: t4-0 has 1 GPU free, t4-1 has 3 free, t4-2..t4-5 are empty (the
    shape of the held-out 2017-11-22 Philly sample, where best fit took 5-6 nodes)."""
    builder = cluster()
    for i in range(6):
        builder.node(f"t4-{i}", "T4", 4)
    return builder.run("r0", "t4-0", (0, 1, 2)).run("r1", "t4-1", (0,)).build()


@pytest.mark.parametrize("engine", ENGINES)
def test_sixteen_one_gpu_replicas_take_four_whole_nodes(engine: Engine) -> None:
    # Per-replica best fit fills t4-0 and t4-1 first: 16 replicas on 6 nodes, not 4.
    decision = checked_decision(t4_fleet(), [gang("wide", "T4", replicas=16)], engine)
    assert nodes_of(decision, "wide") == ["t4-2", "t4-3", "t4-4", "t4-5"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_partly_used_node_is_filled_when_the_minimum_stays_reachable(engine: Engine) -> None:
    # 10 one-GPU replicas need 2 of the 8-GPU nodes: the one with 2 free plus one empty node,
    # which keeps the other empty node whole.
    snapshot = cluster().nodes_of("a", "A100-80GB", 3).run("r", "a0", (0, 1, 2, 3, 4, 5)).build()
    decision = checked_decision(snapshot, [gang("g", "A100-80GB", replicas=10)], engine)
    assert nodes_of(decision, "g") == ["a0", "a1"]


@pytest.mark.parametrize("engine", ENGINES)
def test_without_room_on_the_fewest_nodes_the_gang_is_still_placed(engine: Engine) -> None:
    # Every node has 2 of 4 GPUs free: no 2 nodes hold 6 replicas, best fit uses all 3.
    snapshot = (
        cluster()
        .nodes_of("t", "T4", 3, count=4)
        .run("r0", "t0", (0, 1))
        .run("r1", "t1", (0, 1))
        .run("r2", "t2", (0, 1))
        .build()
    )
    decision = checked_decision(snapshot, [gang("g", "T4", replicas=6)], engine)
    assert nodes_of(decision, "g") == ["t0", "t1", "t2"]


def a100_fleet() -> Snapshot:
    """Four 8-GPU A100 nodes: a0 has 2 GPUs free, a1 has 3 free, a2 and a3 are empty."""
    return (
        cluster()
        .nodes_of("a", "A100-80GB", 4)
        .run("r0", "a0", (0, 1, 2, 3, 4, 5))
        .run("r1", "a1", (0, 1, 2, 3, 4))
        .build()
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_an_any_gang_skips_a_partly_used_node_it_does_not_need(engine: Engine) -> None:
    # Best fit would take a0, a1 and 5 GPUs of a2; two nodes hold 10 replicas: a0 and a2.
    decision = checked_decision(a100_fleet(), [gang("g", "A100-80GB", replicas=10)], engine)
    assert nodes_of(decision, "g") == ["a0", "a2"]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_nvlink_gang_keeps_best_fit(engine: Engine) -> None:
    # The same gang with NVLink topology is placed replica by replica, as before.
    pending = [gang("g", "A100-80GB", replicas=10, topology=Topology.NVLINK)]
    decision = checked_decision(a100_fleet(), pending, engine)
    assert nodes_of(decision, "g") == ["a0", "a1", "a2"]


def test_cpsat_keeps_greedys_fewest_nodes_and_solves_the_rest_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The model does not see node spans: left free it spread the wide gang over 5-6 nodes. It
    # keeps greedy's 4 whole nodes from the start (one solve, not a second one after spreading
    # it), and the one-GPU gang still fills a partly used node.
    solves = []
    solve = cpsat._solve

    def counted(*args: Any) -> Any:
        solves.append(args[-1])
        return solve(*args)

    monkeypatch.setattr(cpsat, "_solve", counted)
    pending = [gang("wide", "T4", replicas=16), gang("small", "T4", replicas=1)]
    decision = checked_decision(t4_fleet(), pending, Engine.CPSAT)
    assert decision.stats.engine == "cpsat"
    assert solves == [frozenset({"wide"})]
    assert nodes_of(decision, "wide") == ["t4-2", "t4-3", "t4-4", "t4-5"]
    assert nodes_of(decision, "small") == ["t4-0"]


def test_fewest_nodes_picks_the_fullest_nodes_that_keep_the_minimum() -> None:
    # (room, rank, node): 10 replicas on 2 nodes -> the 2-room node and an 8-room one.
    assert fewest_nodes([(8, 8, 0), (8, 8, 1), (2, 2, 2), (3, 3, 3)], 10, 2) == [(2, 2), (0, 8)]
    # 3 replicas fit on one node: the fullest that holds them, not the emptiest.
    assert fewest_nodes([(8, 8, 0), (5, 5, 1), (3, 3, 2)], 3, 1) == [(2, 3)]
    # The roomiest 2 hold 7 of 8: no placement on 2 nodes.
    assert fewest_nodes([(4, 4, 0), (3, 3, 1), (3, 3, 2)], 8, 2) is None
