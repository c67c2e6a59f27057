"""Named policy presets."""

from __future__ import annotations

import pytest

from gpufleet.core.policy import Engine, SolverSettings, TypeDelay
from gpufleet.core.presets import PRESET_NAMES, preset_policy


def test_presets_differ_where_they_should() -> None:
    performance, balanced, energy = (preset_policy(n) for n in PRESET_NAMES)
    assert PRESET_NAMES == ("performance", "balanced", "energy")
    assert performance.weights.energy == 0 and performance.weights.consolidation == 0
    assert not balanced.power_caps.enabled
    assert energy.power_caps.enabled and energy.power_caps.max_slowdown <= 0.05
    assert energy.weights.energy > balanced.weights.energy


def test_solver_and_type_delay_are_taken_from_the_caller() -> None:
    solver = SolverSettings(engine=Engine.GREEDY, seed=7)
    policy = preset_policy("energy", solver, TypeDelay(min_speed_share=0.5))
    assert policy.solver == solver
    assert policy.type_delay.min_speed_share == 0.5
    assert preset_policy("energy").solver == SolverSettings()


def test_unknown_preset_names_the_choices() -> None:
    with pytest.raises(ValueError, match="choose from performance, balanced, energy"):
        preset_policy("fastest")
