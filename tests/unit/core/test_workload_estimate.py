"""The online workload estimate (core/workload.py).

Aspects: a gang's task shape and task count for each topology and for MIG; decayed counts over a
window of recent tasks (hand-computed and as a property: the total follows the geometric series,
shares always sum to one); a prior from history decays like older arrivals; the persisted form
round-trips and bad persisted data is refused with a message naming what is wrong.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import gang

from gpufleet.core.demand import Gang, Topology
from gpufleet.core.workload import ArrivalCounts, ShapeShare, TaskShape, WorkloadEstimate

H100, A100 = "H100-80GB", "A100-80GB"
ONE = TaskShape((A100, H100), 1)
EIGHT = TaskShape((H100,), 8)


@pytest.mark.parametrize(
    ("g", "shape", "tasks"),
    [
        pytest.param(
            gang("a", (H100, A100), gpus=2, replicas=(2, 3)),
            TaskShape((A100, H100), 2),
            3,
            id="replicas-anywhere",
        ),
        pytest.param(
            gang("s", H100, gpus=2, replicas=4, topology=Topology.SAME_NODE),
            TaskShape((H100,), 8),
            1,
            id="same-node-is-one-task",
        ),
        pytest.param(
            gang("n", H100, gpus=4, replicas=2, topology=Topology.NVLINK),
            TaskShape((H100,), 4, None, True),
            2,
            id="nvlink",
        ),
        pytest.param(
            gang("m", (H100, A100), mig="1g.10gb", replicas=2),
            TaskShape((A100, H100), 1, "1g.10gb"),
            2,
            id="mig",
        ),
    ],
)
def test_shape_of_a_gang(g: Gang, shape: TaskShape, tasks: int) -> None:
    assert TaskShape.of_gang(g) == (shape, tasks)


def test_decayed_counts_by_hand() -> None:
    counts = ArrivalCounts(window=4.0).observed(ONE).observed(ONE).observed(EIGHT)
    # Each arrival keeps 3/4 of the older counts: ONE = 1 x 3/4 x 3/4 + 1 x 3/4, EIGHT = 1.
    assert counts.counts[ONE] == pytest.approx(0.5625 + 0.75)
    assert counts.counts[EIGHT] == pytest.approx(1.0)
    shares = {s.shape: s.share for s in counts.estimate().shapes}
    assert shares[EIGHT] == pytest.approx(1.0 / 2.3125)


def test_a_prior_decays_like_older_arrivals() -> None:
    prior = WorkloadEstimate.of({EIGHT: 1.0})
    fresh = ArrivalCounts.seeded(prior, tasks=10.0, window=10.0)
    after = fresh.observed(ONE, tasks=10)
    assert after.counts[EIGHT] == pytest.approx(10.0 * 0.9**10)
    assert after.counts[ONE] == pytest.approx(10.0 * (1 - 0.9**10))


def test_no_arrivals_no_estimate() -> None:
    assert ArrivalCounts().estimate().shapes == ()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    arrivals=st.lists(st.sampled_from([ONE, EIGHT]), min_size=1, max_size=40),
    window=st.floats(1.0, 50.0),
)
def test_counts_follow_the_window(arrivals: list[TaskShape], window: float) -> None:
    counts = ArrivalCounts(window)
    for shape in arrivals:
        counts = counts.observed(shape)
    total = sum(counts.counts.values())
    assert total == pytest.approx(window * (1 - (1 - 1 / window) ** len(arrivals)))
    shares = counts.estimate().shapes
    assert sum(s.share for s in shares) == pytest.approx(1.0)
    assert arrivals[-1] in {s.shape for s in shares} <= set(arrivals)
    # The latest arrival never weighs less than an equal number of older ones.
    latest = arrivals[-1]
    assert counts.counts[latest] >= 1.0 - 1e-9


def test_persisted_form_round_trips() -> None:
    counts = ArrivalCounts(100.0).observed(ONE).observed(EIGHT, tasks=3)
    counts = counts.observed(TaskShape((A100,), 1, "3g.40gb"))
    again = ArrivalCounts.from_dict(counts.to_dict())
    assert again.window == counts.window
    assert again.counts == pytest.approx(dict(counts.counts))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({"shapes": {}}, "shapes must be a list", id="shapes-not-a-list"),
        pytest.param({"shapes": [1]}, "each shape must be an object", id="shape-not-an-object"),
        pytest.param(
            {"shapes": [{"types": [H100], "count": -1}]}, "count must be", id="negative-count"
        ),
        pytest.param({"shapes": [{"types": H100, "count": 1}]}, "types must be", id="types-str"),
        pytest.param(
            {"shapes": [{"types": [H100], "gpus": "8", "count": 1}]},
            "gpus must be an integer",
            id="gpus-str",
        ),
        pytest.param({"window": "x"}, "window must be a number", id="window-str"),
        pytest.param({"window": 0.5}, "at least one task", id="window-too-small"),
    ],
)
def test_bad_persisted_data_is_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ArrivalCounts.from_dict(data)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"types": ()}, "sorted, unique", id="no-types"),
        pytest.param({"types": (H100, A100)}, "sorted, unique", id="unsorted"),
        pytest.param({"types": (H100,), "gpus": 0}, "at least one GPU", id="no-gpus"),
        pytest.param(
            {"types": (H100,), "gpus": 2, "mig_profile": "1g.10gb"}, "one slice", id="mig-2"
        ),
    ],
)
def test_bad_shapes_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TaskShape(**kwargs)  # type: ignore[arg-type]


def test_estimate_shares_must_sum_to_one() -> None:
    with pytest.raises(ValueError, match="sum to 1"):
        WorkloadEstimate((ShapeShare(ONE, 0.5),))
