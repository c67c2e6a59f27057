"""CP-SAT's warm start: greedy's decision is a complete, feasible assignment of the model.

Aspects: on random clusters with a workload estimate (so GPU and node reserves and MIG layouts
are in the model), every variable of the model is hinted and the model solved with every
variable fixed to its hint is feasible; gangs confined to a reserve's types may use all of its
GPUs in the model (the reserve charges only gangs that could run elsewhere), so the single-type
gang of the reserve scenario is admitted by the solve itself, not by the greedy repair pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st
from ortools.sat.python import cp_model
from test_placement_properties import FAST, clusters, gangs
from test_placement_scarcity import FLEXIBLE, SINGLE, last_h100

import gpufleet.core.cpsat as cpsat
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.workload import ArrivalCounts

POLICY = Policy(solver=SolverSettings(engine=Engine.CPSAT))


@contextmanager
def solved_on_the_hint() -> Iterator[list[cpsat._Model]]:
    """place() with CP-SAT fixing every variable to its hint; yields the models built."""
    built: list[cpsat._Model] = []
    hint, solver = cpsat._Model.hint, cpsat._solver

    def recording_hint(self: cpsat._Model, *args: object) -> None:
        hint(self, *args)  # type: ignore[arg-type]
        built.append(self)

    def fixing_solver(policy: Policy) -> cp_model.CpSolver:
        out = solver(policy)
        out.parameters.fix_variables_to_their_hinted_value = True
        return out

    with (
        patch.object(cpsat._Model, "hint", recording_hint),
        patch.object(cpsat, "_solver", fixing_solver),
    ):
        yield built


def unhinted(model: cp_model.CpModel) -> list[str]:
    proto = model.proto
    hinted = set(proto.solution_hint.vars)
    out = []
    for i, v in enumerate(proto.variables):
        bounds = list(v.domain)  # the proto wrapper's domain has no negative indexing
        if i not in hinted and bounds[0] != bounds[-1]:
            out.append(v.name)
    return out


@FAST
@given(snapshot=clusters(), pending=gangs(), seen=gangs(), estimate=st.booleans())
def test_greedy_decision_is_a_complete_feasible_hint(
    snapshot: Snapshot, pending: list[Gang], seen: list[Gang], estimate: bool
) -> None:
    if estimate:
        counts = ArrivalCounts().observed_gangs([*pending, *seen])
        snapshot = Snapshot(snapshot.catalog, snapshot.nodes, snapshot.running, counts.estimate())
    with solved_on_the_hint() as built:
        decision = place(snapshot, pending, POLICY)
    for model in built:
        assert unhinted(model.model) == []
    if built:
        assert decision.stats.status in ("OPTIMAL", "FEASIBLE")


def test_a_confined_gang_may_use_its_own_reserve_in_the_model() -> None:
    # 0.7 H100 GPU reserved for H100-only demand, one H100 empty: the H100-only gang takes it,
    # the flexible one goes to an A100. Greedy decides so, and that is a solution of the model.
    snapshot = last_h100(0.1)
    with solved_on_the_hint() as built:
        decision = place(snapshot, [FLEXIBLE, SINGLE], POLICY)
    assert len(built) == 1 and built[0].scarcity, "the model carries the H100 reserve"
    assert decision.stats.status == "OPTIMAL"
    # Solved freely, the model itself admits both: the greedy repair pass gets nothing to place.
    repaired: list[str] = []
    repair = cpsat.place_greedy

    def recording_repair(state: object, left: list[Gang], *args: object) -> object:
        repaired.extend(g.id for g in left)
        return repair(state, left, *args)  # type: ignore[arg-type]

    with patch.object(cpsat, "place_greedy", recording_repair):
        free = place(snapshot, [FLEXIBLE, SINGLE], POLICY)
    assert repaired == []
    assert free.stats.engine == "cpsat"
    assert {p.gang_id: p.gpu_type for p in free.placements} == {
        "flex": "A100-80GB",
        "only-h100": "H100-80GB",
    }
