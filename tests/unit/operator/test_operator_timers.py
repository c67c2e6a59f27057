"""The periodic passes over TrainingJobs and ServingJobs run at the period the composition root
gives them (the setting `operator.tick_s`), and only once it registers them."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import kopf
import pytest

from gpufleet.operator import servingjob_handlers, trainingjob_handlers


@pytest.mark.parametrize(
    ("module", "handler"),
    [
        pytest.param(trainingjob_handlers, trainingjob_handlers.follow_pods, id="trainingjob"),
        pytest.param(servingjob_handlers, servingjob_handlers.follow_servingjob, id="servingjob"),
    ],
)
def test_the_timer_runs_at_the_given_period(
    module: ModuleType, handler: Callable[..., Any]
) -> None:
    registry = kopf.OperatorRegistry()
    assert registry._spawning.get_all_handlers() == []
    module.register_timer(0.25, registry)
    (timer,) = registry._spawning.get_all_handlers()
    assert timer.fn is handler and getattr(timer, "interval", None) == 0.25
    assert timer.selector is not None and timer.selector.any_name == module.RESOURCE[2]
