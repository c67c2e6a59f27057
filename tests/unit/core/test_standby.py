"""The standby rule (`gpufleet.core.standby.plan_standby`), shared by the simulator and the
operator.

Aspects: a scale-up wakes asleep replicas before it creates any; a scale-down puts replicas to
sleep up to the standby count and removes the rest; a lowered standby count retires the asleep
replicas beyond it; the totals a plan leads to; negative counts are refused.
"""

from __future__ import annotations

import pytest

from gpufleet.core.standby import StandbyPlan, plan_standby, queue_wake

CASES = [
    # awake, asleep, desired, standby -> plan
    pytest.param(1, 2, 2, 2, StandbyPlan(wake=1), id="up-within-the-standbys-wakes-only"),
    pytest.param(1, 2, 5, 2, StandbyPlan(wake=2, create=2), id="up-beyond-wakes-all-then-creates"),
    pytest.param(1, 0, 3, 2, StandbyPlan(create=2), id="up-without-standbys-creates"),
    pytest.param(4, 0, 1, 2, StandbyPlan(sleep=2, remove=1), id="down-sleeps-up-to-standby"),
    pytest.param(4, 1, 2, 2, StandbyPlan(sleep=1, remove=1), id="down-fills-the-standby-room"),
    pytest.param(3, 2, 1, 2, StandbyPlan(remove=2), id="down-with-full-standby-removes"),
    pytest.param(3, 0, 1, 0, StandbyPlan(remove=2), id="down-without-standby-removes"),
    pytest.param(2, 3, 2, 1, StandbyPlan(retire=2), id="standby-lowered-retires-asleep"),
    pytest.param(1, 3, 2, 1, StandbyPlan(wake=1, retire=2), id="retired-ones-are-not-woken"),
    pytest.param(2, 1, 2, 1, StandbyPlan(), id="steady"),
]


@pytest.mark.parametrize(("awake", "asleep", "desired", "standby", "expected"), CASES)
def test_plan(awake: int, asleep: int, desired: int, standby: int, expected: StandbyPlan) -> None:
    plan = plan_standby(awake, asleep, desired, standby)
    assert plan == expected
    # Whatever the plan, the pool ends with `desired` awake and at most `standby` asleep.
    assert plan.total_after(awake, asleep) - plan.asleep_after(asleep) == desired
    assert 0 <= plan.asleep_after(asleep) <= max(standby, 0)


def test_a_scale_up_never_creates_while_a_standby_sleeps() -> None:
    for awake in range(6):
        for asleep in range(6):
            for desired in range(awake + 1, 10):
                plan = plan_standby(awake, asleep, desired, standby=5)
                assert plan.create == 0 or plan.asleep_after(asleep) == 0


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        plan_standby(1, 0, 1, -1)


# Hand-computed: one replica clears 10,000 tokens/s x 5 s = 50,000 tokens within the horizon.
WAKE_CASES = [
    pytest.param(0, 2, 3, 0, id="empty-queue-wakes-none"),
    pytest.param(100_000, 2, 3, 0, id="two-awake-clear-exactly-100k"),
    pytest.param(100_001, 2, 3, 1, id="one-token-more-wakes-one"),
    pytest.param(240_000, 2, 3, 3, id="needs-five-wakes-three"),
    pytest.param(1_000_000, 2, 3, 3, id="never-more-than-asleep"),
    pytest.param(240_000, 2, 0, 0, id="no-standby-nothing-to-wake"),
]


@pytest.mark.parametrize(("backlog", "awake", "asleep", "expected"), WAKE_CASES)
def test_queue_wake(backlog: int, awake: int, asleep: int, expected: int) -> None:
    assert queue_wake(backlog, awake, asleep, tokens_per_s=10_000.0, horizon_s=5.0) == expected


def test_queue_wake_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        queue_wake(-1, 1, 1, 10_000.0, 5.0)
    with pytest.raises(ValueError, match="> 0"):
        queue_wake(1, 1, 1, 10_000.0, 0.0)
