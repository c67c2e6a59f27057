"""MIG geometry: layout validity (placements from the MIG user guide), enumeration of every valid
layout, maximal layouts and the densest layout per profile."""

from __future__ import annotations

import pytest

from gpufleet.model.gpus import load_catalog
from gpufleet.model.mig import (
    MigPlacement,
    densest_layout,
    enumerate_layouts,
    is_valid_layout,
    layout_problem,
    make_layout,
    profile_counts,
)

CATALOG = load_catalog()
H100 = CATALOG["H100-80GB"]
A100_40 = CATALOG["A100-40GB"]


def lay(*specs: str) -> tuple[MigPlacement, ...]:
    return make_layout(MigPlacement(int(s.split("@")[1]), s.split("@")[0]) for s in specs)


VALID = [
    pytest.param(("7g.80gb@0",), id="whole-gpu-instance"),
    pytest.param(("4g.40gb@0", "3g.40gb@4"), id="4g+3g-since-R510"),
    pytest.param(("2g.20gb@0", "2g.20gb@2", "3g.40gb@4"), id="3g@4-with-2g@0,2"),
    pytest.param(tuple(f"1g.10gb@{s}" for s in range(7)), id="seven-1g"),
    pytest.param(("1g.20gb@0", "1g.20gb@2", "1g.20gb@4", "1g.20gb@6"), id="four-1g.20gb"),
    pytest.param(("2g.20gb@0", "2g.20gb@2", "2g.20gb@4", "1g.10gb@6"), id="three-2g+1g"),
    pytest.param((), id="empty"),
]
INVALID = [
    pytest.param(("3g.40gb@0", "2g.20gb@2"), "overlaps", id="2g@2-blocks-3g@0"),
    pytest.param(("1g.10gb@7",), "not a valid start", id="1g-at-slice-7"),
    pytest.param(("3g.40gb@2",), "not a valid start", id="3g-at-2"),
    pytest.param(("7g.80gb@0", "1g.10gb@0"), "overlaps", id="7g-plus-anything"),
    pytest.param(("1g.10gb+me@0", "1g.10gb+me@1"), "more than 1", id="two-media-slices"),
    pytest.param(("4g.40gb@0", "4g.40gb@4"), "not a valid start", id="second-4g"),
    pytest.param(("1g.5gb@0",), "no profile", id="40gb-name-on-80gb-gpu"),
]


@pytest.mark.parametrize("specs", VALID)
def test_valid_layouts(specs: tuple[str, ...]) -> None:
    assert layout_problem(H100, lay(*specs)) is None


@pytest.mark.parametrize(("specs", "why"), INVALID)
def test_invalid_layouts_say_why(specs: tuple[str, ...], why: str) -> None:
    problem = layout_problem(H100, lay(*specs))
    assert problem is not None and why in problem


def test_every_enumerated_layout_fits_in_seven_sm_slices_and_eight_memory_slices() -> None:
    for layout in enumerate_layouts(H100):
        profiles = [H100.mig_profile(p.profile) for p in layout]
        assert sum(p.sm_slices for p in profiles) <= 7
        assert sum(p.memory_slices for p in profiles) <= 8


def test_non_mig_gpu_has_no_valid_layout() -> None:
    assert layout_problem(CATALOG["T4"], ()) == "T4 does not support MIG"
    assert enumerate_layouts(CATALOG["T4"]) == ()


def test_enumeration_yields_only_distinct_valid_layouts() -> None:
    layouts = enumerate_layouts(A100_40)
    assert len(layouts) == len(set(layouts)) > 100
    assert all(is_valid_layout(A100_40, layout) for layout in layouts)
    assert () in layouts and lay("7g.40gb@0") in layouts


def test_enumeration_is_complete_for_a_small_profile_set() -> None:
    # With only 3g and 4g: {}, 3g@0, 3g@4, 4g@0, 3g@0+3g@4, 4g@0+3g@4.
    layouts = set(enumerate_layouts(H100, profiles=["3g.40gb", "4g.40gb"]))
    expected = {
        (),
        lay("3g.40gb@0"),
        lay("3g.40gb@4"),
        lay("4g.40gb@0"),
        lay("3g.40gb@0", "3g.40gb@4"),
        lay("4g.40gb@0", "3g.40gb@4"),
    }
    assert layouts == expected


def test_maximal_layouts_cannot_be_extended() -> None:
    maximal = enumerate_layouts(H100, maximal_only=True)
    candidates = [MigPlacement(s, p.name) for p in H100.mig_profiles for s in p.starts]
    for layout in maximal:
        assert not any(
            c not in layout and is_valid_layout(H100, make_layout((*layout, c))) for c in candidates
        )


@pytest.mark.parametrize(
    ("profile", "count"),
    [
        ("1g.10gb", 7),
        ("1g.20gb", 4),
        ("2g.20gb", 3),
        ("3g.40gb", 2),
        ("4g.40gb", 1),
        ("7g.80gb", 1),
    ],
)
def test_densest_layout_holds_the_documented_maximum(profile: str, count: int) -> None:
    layout = densest_layout(H100, profile)
    assert is_valid_layout(H100, layout)
    assert profile_counts(layout)[profile] == count
