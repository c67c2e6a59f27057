"""Scoring: the objective's terms (work, priority weight, energy, consolidation, fragmentation,
disruption, evictions) and the per-replica valuation."""

from __future__ import annotations

import pytest
from placement_builders import cluster, gang

from gpufleet.core.decision import Decision, GangPlacement, Preemption, Repartition
from gpufleet.core.objective import evaluate
from gpufleet.core.policy import Policy, Weights
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.core.valuation import START_VALUE, replica_value
from gpufleet.model.gpus import load_catalog

CATALOG = load_catalog()
SNAPSHOT = (
    cluster()
    .node("busy", "A100-80GB", 8)
    .node("idle", "A100-80GB", 8)
    .run("r", "busy", (0, 1), priority=1)
    .build()
)
JOB = gang("g", "A100-80GB", gpus=2, priority=2)
ON_BUSY = GangPlacement("g", "A100-80GB", (ReplicaPlacement("busy", (2, 3)),))
ON_IDLE = GangPlacement("g", "A100-80GB", (ReplicaPlacement("idle", (0, 1)),))


@pytest.mark.parametrize(
    ("decision", "weights", "expected"),
    [
        # 2 GPUs x 2.8 x priority weight 4 = 22.4; busy node left with 4 free.
        pytest.param(Decision((ON_BUSY,)), Weights(), 22.4 - 0.02 * 4, id="packs-busy-node"),
        # Opening the idle node costs consolidation and strands 6 GPUs.
        pytest.param(Decision((ON_IDLE,)), Weights(), 22.4 - 0.05 - 0.02 * 6, id="opens-idle"),
        pytest.param(
            Decision((ON_BUSY,), preemptions=(Preemption("r", "g"),)),
            Weights(),
            # Evicting r (2 x 2.8 x 2) frees its GPUs: the busy node is then only 2/8 used.
            22.4 - 11.2 - 0.1 - 0.02 * 6,
            id="eviction-costs-victim-value",
        ),
        pytest.param(
            Decision((ON_BUSY,), repartitions=(Repartition("idle", 7, None, ()),)),
            Weights(disruption=1.0),
            22.4 - 0.02 * 4 - 1.0,
            id="repartition-is-disruption",
        ),
    ],
)
def test_objective_terms(decision: Decision, weights: Weights, expected: float) -> None:
    metrics = evaluate(SNAPSHOT, [JOB], decision, Policy(weights=weights))
    # Plus the tie-break for the one gang started (test_placement_ties.py).
    assert metrics.objective == pytest.approx(expected + START_VALUE)


def test_energy_weight_lowers_value_but_never_below_a_tenth_of_the_work() -> None:
    gpu = CATALOG["H100-80GB"]
    job = gang("g", gpus=1)
    plain = replica_value(job, gpu, Policy())
    green = replica_value(job, gpu, Policy(weights=Weights(energy=1.0)))
    extreme = replica_value(job, gpu, Policy(weights=Weights(energy=1000.0)))
    assert green.objective == pytest.approx(plain.objective - plain.power_w / 1000)
    assert extreme.objective == pytest.approx(0.1 * plain.objective)
