"""The live policy's document and its watch (no cluster):

- a stored document replaces the settings' preset and weights, keeping the settings' solver;
- a document that does not parse keeps the settings' policy in force and says why;
- list, update and delete events switch the policy in force and tell the listeners once per
  change; the public form shows the weights in force and who stored them.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpufleet.admin.policy import parser, public
from gpufleet.core.policy import Engine
from gpufleet.scheduler.policy_watch import POLICY_KEY, LivePolicy, PolicyWatch
from gpufleet.settings import PlacementSettings, SolverGroup

BASE = PlacementSettings(solver=SolverGroup(engine=Engine.GREEDY))


def _watch() -> PolicyWatch:
    return PolicyWatch(
        LivePolicy(BASE.preset.value, BASE.policy()), parser(BASE), "gpufleet-system", "p"
    )


def _configmap(document: Any, version: str = "7", by: str = "alice") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "resourceVersion": version,
            "annotations": {
                "gpufleet.io/updated-by": by,
                "gpufleet.io/updated-at": "2026-12-03T06:00:00Z",
            },
        },
        "data": {POLICY_KEY: yaml.safe_dump(document)},
    }


def test_a_document_overrides_preset_and_weights_not_the_solver() -> None:
    live = _watch().read(_configmap({"preset": "energy", "weights": {"work": 2.0}}))
    assert (live.name, live.source, live.version, live.error) == ("energy", "configmap", "7", None)
    assert live.policy.weights.work == 2.0 and live.policy.weights.energy == 1.0
    assert live.policy.power_caps.enabled and live.policy.solver.engine is Engine.GREEDY
    shown = public(live, _configmap({})["metadata"])
    assert shown.preset.value == "energy" and shown.weights.work == 2.0
    assert shown.effective_weights.energy == 1.0 and shown.updated_by == "alice"


def test_a_bad_document_keeps_the_settings_policy() -> None:
    watch = _watch()
    for document, error in [
        ({"preset": "fastest"}, "preset"),
        ({"preset": "energy", "weights": {"work": -1}}, "weights.work"),
        ({"preset": "energy", "colour": "red"}, "colour"),
        (["a", "list"], "mapping"),
    ]:
        live = watch.read(_configmap(document))
        assert live.policy == BASE.policy() and live.source == "settings"
        assert live.error is not None and error in live.error, live.error


def test_events_switch_the_policy_and_tell_listeners() -> None:
    watch = _watch()
    seen: list[str] = []
    watch.on_change(lambda live: seen.append(f"{live.name}/{live.source}"))
    watch.replace([])  # nothing stored: the settings' policy, no change
    watch.replace([_configmap({"preset": "performance"})])
    watch.event("MODIFIED", _configmap({"preset": "performance"}))  # same: no change
    watch.event("MODIFIED", _configmap({"preset": "energy"}, version="8"))
    watch.event("DELETED", _configmap({"preset": "energy"}, version="8"))
    assert seen == ["performance/configmap", "energy/configmap", "balanced/settings"]
    assert watch.current() == watch.base
