"""Delay scheduling across GPU types (Policy.type_delay, Gang.waited_s).

Aspects: the speed bar falls hyperbolically with waiting time; with both engines a gang that has
not waited long does not start on a much slower type, and waits with a stable reason that names
the type; it takes that type once it has waited long enough, when the delay is off, or when the
type is fast enough; its fastest type is never delayed; invalid settings are refused.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang

from gpufleet.core.decision import Decision, PendingReason
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings, TypeDelay
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems

ENGINES = [Engine.GREEDY, Engine.CPSAT]
H100, T4, A100 = "H100-80GB", "T4", "A100-80GB"
DELAY = TypeDelay(min_speed_share=0.5, patience_s=1800.0)


@pytest.mark.parametrize(
    ("waited", "bar"),
    [
        pytest.param(0.0, 0.5, id="just-arrived"),
        pytest.param(1800.0, 0.25, id="one-patience"),
        pytest.param(5400.0, 0.125, id="three-patiences"),
    ],
)
def test_bar_falls_with_waiting(waited: float, bar: float) -> None:
    assert DELAY.bar(waited) == pytest.approx(bar)
    assert TypeDelay().bar(waited) == 0.0  # off by default


@pytest.mark.parametrize("bad", [{"min_speed_share": 1.5}, {"patience_s": 0.0}])
def test_invalid_settings(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        TypeDelay(**bad)


def busy_fast_free_slow() -> Snapshot:
    """Every H100 and A100 GPU busy, four T4s free."""
    builder = cluster().node("h", H100, count=2).node("t", T4, count=4).node("a", A100, count=2)
    builder.run("r0", "h", (0,)).run("r1", "h", (1,)).run("r2", "a", (0,)).run("r3", "a", (1,))
    return builder.build()


def decide(pending: list[Gang], engine: Engine, delay: TypeDelay) -> Decision:
    snapshot = busy_fast_free_slow()
    pol = Policy(solver=SolverSettings(engine=engine), type_delay=delay)
    decision = place(snapshot, pending, pol)
    assert decision_problems(snapshot, pending, decision) == []
    return decision


def job(waited: float, throughput: dict[str, float] | None = None) -> Gang:
    return replace(gang("j", (H100, A100, T4), throughput=throughput), waited_s=waited)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("waited", "delay", "throughput", "placed_on"),
    [
        pytest.param(0.0, DELAY, None, None, id="new-gang-waits-for-a-faster-type"),
        pytest.param(20 * 3600.0, DELAY, None, T4, id="long-wait-takes-the-slow-type"),
        pytest.param(0.0, TypeDelay(), None, T4, id="delay-off-takes-what-is-free"),
        pytest.param(
            0.0, DELAY, {H100: 1.2, A100: 1.1, T4: 1.0}, T4, id="insensitive-job-not-delayed"
        ),
    ],
)
def test_type_delay(
    engine: Engine,
    waited: float,
    delay: TypeDelay,
    throughput: dict[str, float] | None,
    placed_on: str | None,
) -> None:
    decision = decide([job(waited, throughput)], engine, delay)
    if placed_on is None:
        assert decision.placements == ()
        (pending,) = decision.pending
        assert pending.reason is PendingReason.WAITING_FOR_FASTER_TYPE
        assert T4 in pending.message
    else:
        assert [p.gpu_type for p in decision.placements] == [placed_on]


@pytest.mark.parametrize("engine", ENGINES)
def test_fastest_type_is_never_delayed(engine: Engine) -> None:
    snapshot = cluster().node("h", H100, count=2).node("t", T4, count=2).build()
    pol = Policy(solver=SolverSettings(engine=engine), type_delay=DELAY)
    decision = place(snapshot, [gang("j", (H100, T4))], pol)
    assert [p.gpu_type for p in decision.placements] == [H100]
