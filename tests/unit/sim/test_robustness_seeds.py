"""Choosing the Philly seeds of a robustness run (bench/robustness.py `--seed-list`).

Aspects: seeds and inclusive ranges in the order given, each once; bad lists are usage errors;
the chosen seeds replace `--seeds` (0 to N-1) in the samples, in the order given, and the
option is in `--help`.
"""

from __future__ import annotations

import argparse

import pytest

from tests.benchscripts import bench_module

robustness = bench_module("robustness")


def test_seeds_and_ranges_in_order_each_once() -> None:
    assert robustness.parse_seed_list("3,5,8") == (3, 5, 8)
    assert robustness.parse_seed_list("10-12, 3") == (10, 11, 12, 3)
    assert robustness.parse_seed_list("4,2-5") == (4, 2, 3, 5)
    assert robustness.parse_seed_list("7") == (7,)


@pytest.mark.parametrize("text", ["", "a", "3,,5", "5-3", "-1", "1-", "2.5"])
def test_a_bad_list_is_rejected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        robustness.parse_seed_list(text)


def philly_seeds_run(argv: list[str]) -> list[int]:
    args = robustness.build_parser().parse_args(["--only", "philly", *argv])
    samples = robustness.samples_for(args)
    assert {s.trace for s in samples} == {"philly"}
    seeds: list[int] = []
    for sample in samples:
        if sample.seed not in seeds:
            seeds.append(sample.seed)
    per_seed = len(robustness.PHILLY_FLEETS) * len(robustness.PHILLY_WINDOWS)
    assert len(samples) == per_seed * len(seeds)
    return seeds


def test_the_list_replaces_the_count() -> None:
    assert philly_seeds_run([]) == [0, 1, 2, 3, 4]
    assert philly_seeds_run(["--seeds", "2"]) == [0, 1]
    assert philly_seeds_run(["--seed-list", "13,3-4"]) == [13, 3, 4]
    assert philly_seeds_run(["--seeds", "2", "--seed-list", "9"]) == [9]


def test_a_bad_list_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        robustness.build_parser().parse_args(["--seed-list", "5-3"])
    assert exit_info.value.code == 2
    assert "ranges ascend" in capsys.readouterr().err


def test_the_option_is_in_the_help() -> None:
    assert "--seed-list" in robustness.build_parser().format_help()
