"""The contract's encoders and decoders round-trip: gang wishes and GPU type lists, assignments
(GPUs, type, MIG instance `profile@start`, power cap), MIG layout records, pending notes (every
reason code), GPU resource requests, disruption marks; the CRD spellings map one to one onto
the wishes; unreadable values read as the documented defaults."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.model import trainingjob as crd
from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import (
    Assignment,
    format_mig,
    layout_annotation,
    parse_mig,
    recorded_layouts,
)
from gpufleet.model.contract.moves import (
    Checkpoint,
    checkpoint_annotations,
    move_marker,
    move_times_annotations,
    moved_at,
    read_move_times,
)
from gpufleet.model.contract.reasons import (
    PendingNote,
    PendingReason,
    SchedulerReason,
    disruption_marker,
    disruption_reason,
    pending_condition,
    pending_text,
    read_pending,
)
from gpufleet.model.contract.resources import gpu_request, gpu_resources
from gpufleet.model.contract.wishes import (
    EnergyPreference,
    GangWishes,
    Topology,
    TypeOption,
    format_gpu_types,
    parse_gpu_types,
    read_rank,
    wish_annotations,
)
from gpufleet.model.crd_common import NAME_PATTERN
from gpufleet.model.mig import MigPlacement, make_layout
from gpufleet.model.mig_profiles import MIG_PROFILE_NAMES

type_names = st.from_regex(r"[A-Z][A-Za-z0-9-]{0,15}", fullmatch=True)
throughputs = st.none() | st.floats(min_value=0.01, max_value=1000).map(lambda x: float(f"{x:g}"))
type_options = st.builds(TypeOption, type_names, throughputs)
profiles = st.sampled_from(MIG_PROFILE_NAMES)
instances = st.builds(MigPlacement, st.integers(0, 7), profiles)
wait_reasons = st.sampled_from([*PendingReason, *SchedulerReason])


@given(
    st.builds(
        GangWishes,
        size=st.integers(1, 10_000),
        priority=st.integers(0, 1000),
        preemptible=st.booleans(),
        topology=st.sampled_from(Topology),
        energy=st.sampled_from(EnergyPreference),
        gpu_types=st.none() | st.lists(type_options, min_size=1, max_size=6).map(tuple),
        max_slowdown_percent=st.none() | st.integers(1, 99),
        queue=st.none() | st.from_regex(NAME_PATTERN, fullmatch=True),
        spread_slowdown_percent=st.integers(0, 99),
    ).filter(
        lambda w: w.energy is not EnergyPreference.PERFORMANCE or w.max_slowdown_percent is None
    )
)
def test_gang_wishes_round_trip(wishes: GangWishes) -> None:
    assert GangWishes.read(wishes.annotations()) == wishes


@given(st.lists(type_options, min_size=1, max_size=8))
def test_gpu_type_list_round_trip(options: list[TypeOption]) -> None:
    assert parse_gpu_types(format_gpu_types(options)) == tuple(options)


@given(st.integers(0, 1000), st.booleans())
def test_wishes_left_out_read_as_the_defaults(priority: int, preemptible: bool) -> None:
    read = GangWishes.read(wish_annotations(priority=priority, preemptible=preemptible))
    assert read == GangWishes(priority=priority, preemptible=preemptible)


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({}, id="none"),
        pytest.param(
            {
                names.GANG_SIZE: "many",
                names.PRIORITY: "-3",
                names.TOPOLOGY: "ring",
                names.ENERGY: "green",
                names.GPU_TYPES: " , ",
                names.MAX_SLOWDOWN: "half",
            },
            id="unreadable",
        ),
        pytest.param({names.MAX_SLOWDOWN: "0"}, id="no-slowdown"),
        pytest.param({names.MAX_SLOWDOWN: "100"}, id="all-slowdown"),
        pytest.param({names.SPREAD_SLOWDOWN: "100"}, id="spread-stops-it"),
        pytest.param({names.SPREAD_SLOWDOWN: "-5"}, id="spread-speeds-it-up"),
        pytest.param({names.SPREAD_SLOWDOWN: "a lot"}, id="spread-unreadable"),
    ],
)
def test_unreadable_wishes_are_the_defaults(annotations: dict[str, str]) -> None:
    assert GangWishes.read(annotations) == GangWishes()


def test_a_performance_gang_states_no_slowdown() -> None:
    # The CRD refuses the combination; a pod written by another client is read leniently.
    read = GangWishes.read({names.ENERGY: "performance", names.MAX_SLOWDOWN: "20"})
    assert read.energy is EnergyPreference.PERFORMANCE and read.max_slowdown is None
    assert GangWishes.read({names.MAX_SLOWDOWN: "20"}).max_slowdown == 0.2


def test_a_gang_states_its_spread_slowdown_as_a_speed() -> None:
    assert GangWishes.read({names.SPREAD_SLOWDOWN: "40"}).spread_speed == pytest.approx(0.6)
    assert GangWishes.read({}).spread_speed == 1.0  # not stated: no slowdown known


def test_throughputs_that_are_not_positive_numbers_read_as_none() -> None:
    assert parse_gpu_types("H100-80GB=fast,L4=0,T4=-1,A10=nan") == (
        TypeOption("H100-80GB"),
        TypeOption("L4"),
        TypeOption("T4"),
        TypeOption("A10"),
    )


@pytest.mark.parametrize(("raw", "rank"), [("3", 3), ("", None), ("x", None), ("-1", None)])
def test_rank_label(raw: str, rank: int | None) -> None:
    assert read_rank({names.RANK_LABEL: raw} if raw else {}) == rank


def test_every_crd_spelling_maps_to_one_wish() -> None:
    assert sorted(t.wish for t in crd.Topology) == sorted(Topology)
    assert sorted(e.wish for e in crd.EnergyPreference) == sorted(EnergyPreference)
    assert crd.Topology.SAME_NODE.wish is Topology.SAME_NODE
    assert crd.EnergyPreference.ENERGY.wish is EnergyPreference.EFFICIENT


@given(instances)
def test_mig_instance_round_trip(instance: MigPlacement) -> None:
    assert parse_mig(format_mig(instance)) == instance
    assert format_mig(instance) == str(instance)


@pytest.mark.parametrize("text", ["3g.40gb", "@4", "3g.40gb@", "3g.40gb@x", "3g.40gb@-1"])
def test_unreadable_mig_instance_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="profile@start"):
        parse_mig(text)


@given(
    st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True).map(tuple),
    type_names,
    st.none() | instances,
    st.none() | st.integers(50, 1000).map(float),
)
def test_assignment_round_trip(
    gpus: tuple[int, ...], gpu_type: str, mig: MigPlacement | None, cap: float | None
) -> None:
    assignment = Assignment(gpus[:1] if mig else gpus, gpu_type, mig, cap)
    assert Assignment.read(assignment.annotations()) == assignment


@given(
    st.text(min_size=1, max_size=20),
    st.lists(st.none() | st.lists(instances, max_size=4).map(make_layout), max_size=8),
)
def test_layout_record_round_trip(config: str, layouts: list[Any]) -> None:
    record = {names.MIG_LAYOUT_ANNOTATION: layout_annotation(config, layouts)}
    expected = {i: lay for i, lay in enumerate(layouts) if lay is not None}
    assert recorded_layouts(record, config) == expected
    assert recorded_layouts(record, config + "-other") == {}


def test_unreadable_layout_record_reads_as_none() -> None:
    bad = {names.MIG_LAYOUT_ANNOTATION: '{"config": "c", "gpus": {"0": ["1g.10gb@x"]}}'}
    assert recorded_layouts(bad, "c") == {}


@given(wait_reasons, st.text(max_size=80))
def test_pending_note_round_trip(reason: PendingReason | SchedulerReason, detail: str) -> None:
    text = pending_text(reason, detail)
    pod = {"status": {"conditions": [pending_condition(text, "2026-01-01T00:00:00Z")]}}
    assert read_pending(pod) == PendingNote(reason, detail)
    assert PendingNote.parse(text).text == text


@given(st.text(max_size=80))
def test_any_message_survives_a_pending_note(text: str) -> None:
    assert PendingNote.parse(text).text == text


def test_pending_condition_is_kubernetes_unschedulable() -> None:
    condition = pending_condition("ReplicaExceedsNode: too big", "t")
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )


@given(st.integers(1, 16), st.none() | profiles)
def test_gpu_resources_round_trip(gpus: int, profile: str | None) -> None:
    pod = {"spec": {"containers": [{"resources": {"limits": gpu_resources(gpus, profile)}}]}}
    request = gpu_request(pod)
    assert (request.gpus, request.mig_profile) == ((0, profile) if profile else (gpus, None))


@given(st.text(min_size=1, max_size=40))
def test_disruption_mark_round_trip(reason: str) -> None:
    pod = {"metadata": {"annotations": disruption_marker(reason)}}
    assert disruption_reason(pod) == reason


def test_disruption_without_a_mark_is_the_condition_reason() -> None:
    condition = {"type": names.DISRUPTION_TARGET, "status": "True", "reason": "EvictionByAPI"}
    pod = {"metadata": {}, "status": {"conditions": [condition]}}
    assert disruption_reason(pod) == "EvictionByAPI"
    assert disruption_reason({"metadata": {}}) is None


# -- moves -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("interval=600", Checkpoint(interval_s=600)),
        ("signal=30", Checkpoint(grace_s=30)),
        ("signal=0", None),
        ("interval=-5", None),
        ("interval=", None),
        ("hourly=60", None),
        ("", None),
    ],
)
def test_checkpoint_annotation_reads_leniently(raw: str, expected: Checkpoint | None) -> None:
    assert Checkpoint.read({names.CHECKPOINT: raw}) == expected


def test_checkpoint_modes_round_trip_and_are_checked() -> None:
    for mode in (Checkpoint(interval_s=60), Checkpoint(grace_s=5)):
        assert Checkpoint.read(mode.annotations()) == mode
    assert checkpoint_annotations(None, None) == {}
    with pytest.raises(ValueError, match="grace period"):
        Checkpoint()
    with pytest.raises(ValueError, match="no grace period"):
        Checkpoint(interval_s=60, grace_s=5)


def test_move_times_and_marker_round_trip() -> None:
    times = [datetime(2026, 1, 1, 10, tzinfo=UTC), datetime(2026, 1, 1, 11, tzinfo=UTC)]
    annotations = move_times_annotations(times)
    assert read_move_times(annotations) == tuple(times)
    assert read_move_times({names.MOVE_TIMES: "garbage,2026-01-01T11:00:00Z"}) == (times[1],)
    assert move_times_annotations([]) == {}
    pod = {"metadata": {"annotations": move_marker(times[0])}}
    assert moved_at(pod) == times[0]
    preempted = {"metadata": {"annotations": {names.DISRUPTED_BY: names.PREEMPTED_REASON}}}
    assert moved_at(preempted) is None
