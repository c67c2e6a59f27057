"""The contract's node-power encoders and decoders: applied caps round-trip in whole watts; a
power-down mark round-trips through the node patch (label, since-time, cordon) and clearing it
uncordons and removes both; unreadable values read as absent (a node without the label is on)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.model.contract import names
from gpufleet.model.contract.power import (
    PowerMark,
    PowerState,
    applied_caps,
    format_applied_caps,
    mark_patch,
)


@given(st.dictionaries(st.integers(0, 15), st.integers(50, 1000)))
def test_applied_caps_round_trip(caps: dict[int, int]) -> None:
    text = format_applied_caps({i: w + 0.2 for i, w in caps.items()})
    assert applied_caps({names.APPLIED_POWER_CAPS: text}) == caps


@pytest.mark.parametrize("raw", ["", "not json", "[1, 2]", '{"x": 1}', '{"0": "w"}'])
def test_unreadable_applied_caps_read_as_none(raw: str) -> None:
    assert applied_caps({names.APPLIED_POWER_CAPS: raw}) == {}


def _after(patch: dict[str, Any]) -> tuple[dict[str, str], dict[str, str], bool]:
    """The labels, annotations and cordon a node has after a merge patch on an empty node."""
    meta = patch["metadata"]
    labels = {k: v for k, v in meta["labels"].items() if v is not None}
    annotations = {k: v for k, v in meta["annotations"].items() if v is not None}
    return labels, annotations, patch["spec"]["unschedulable"]


@pytest.mark.parametrize("state", [PowerState.OFF, PowerState.WAKING])
def test_power_mark_round_trips_and_cordons(state: PowerState) -> None:
    labels, annotations, cordoned = _after(mark_patch(PowerMark(state, 1_780_000_000.0)))
    assert cordoned
    assert labels == {names.POWER_STATE_LABEL: state.value}
    assert PowerMark.read(labels, annotations) == PowerMark(state, 1_780_000_000.0)


def test_clearing_the_mark_uncordons_and_removes_label_and_time() -> None:
    patch = mark_patch(PowerMark())
    assert patch["spec"] == {"unschedulable": False}
    assert patch["metadata"]["labels"] == {names.POWER_STATE_LABEL: None}
    assert patch["metadata"]["annotations"] == {names.POWER_STATE_SINCE: None}


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({}, {}, PowerMark()),
        ({names.POWER_STATE_LABEL: "asleep"}, {}, PowerMark()),
        ({names.POWER_STATE_LABEL: "off"}, {}, PowerMark(PowerState.OFF, None)),
        (
            {names.POWER_STATE_LABEL: "waking"},
            {names.POWER_STATE_SINCE: "yesterday"},
            PowerMark(PowerState.WAKING, None),
        ),
    ],
    ids=["no-label", "unknown-state", "no-time", "bad-time"],
)
def test_unreadable_marks(
    labels: dict[str, str], annotations: dict[str, str], expected: PowerMark
) -> None:
    assert PowerMark.read(labels, annotations) == expected
