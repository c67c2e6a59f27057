"""Moves never change the MIG layout of a GPU a moved gang still holds.

Aspects: a MIG gang moves from an A100 slice to a faster H100 slice, and a whole-GPU job on a
V100 that would be faster on an A100 does not take the A100 GPU the slice leaves (that needs
the GPU switched to whole mode, and a decision's repartitions are carried out before its
moves: the simulator refused "repartition of busy GPU" on a held-out Alibaba order); both
engines; the decision passes `decision_problems`.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang, layout

from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import RunProgress, Snapshot
from gpufleet.core.validate import decision_problems

A100, H100, V100 = "A100-80GB", "H100-80GB", "V100-32GB"
SLICES = layout("3g.40gb@0", "3g.40gb@4")


def fleet() -> Snapshot:
    """A100 node: GPU 0 cut in two 3g.40gb slices (the MIG job on one), the rest taken. H100
    node: GPU 0 cut the same way with both slices free, the rest taken. V100 node: the whole-GPU
    job on GPU 0."""
    builder = cluster().node("a", A100, mig={0: SLICES}).node("h", H100, mig={0: SLICES})
    builder.node("v", V100).run("mig", "a", (0,), mig="3g.40gb@4").run("whole", "v", (0,))
    for name in ("a", "h"):
        for g in range(1, 8):
            builder.run(f"{name}{g}", name, (g,))
    built = builder.build()
    demands = {
        "mig": gang("mig", (A100, H100), mig="3g.40gb"),
        "whole": gang("whole", (A100, V100)),
    }
    progress = RunProgress(10 * 3600.0, 0.0, 60.0, 0)
    running = tuple(
        replace(r, demand=demands[r.id], progress=progress) if r.id in demands else r
        for r in built.running
    )
    return replace(built, running=running)


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_move_does_not_switch_a_gpu_another_move_leaves(engine: Engine) -> None:
    snapshot = fleet()
    decision = place(snapshot, [], Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snapshot, [], decision) == []
    assert [(m.gang_id, m.placement.gpu_type) for m in decision.moves] == [("mig", H100)]
    assert [(r.node, r.gpu) for r in decision.repartitions] == []
