"""Choosing the Alibaba samples of a robustness run (bench/robustness.py `--order-list`,
`--lists`).

Aspects: orders and inclusive ranges in the order given, each once, numbered from 1; bad lists
are usage errors; the chosen orders replace `--orders` (1 to N) and keep its numbering, so order
k is the same sample either way; `--lists` runs the named pod lists only, in the order given;
the options are in `--help`.
"""

from __future__ import annotations

import argparse

import pytest

from tests.benchscripts import bench_module

robustness = bench_module("robustness")


def test_orders_and_ranges_in_order_each_once() -> None:
    assert robustness.parse_order_list("1-3,24") == (1, 2, 3, 24)
    assert robustness.parse_order_list("41-43, 2") == (41, 42, 43, 2)
    assert robustness.parse_order_list("5,4-6") == (5, 4, 6)


@pytest.mark.parametrize("text", ["", "a", "3,,5", "5-3", "0", "0-4", "-1", "2.5"])
def test_a_bad_order_list_is_rejected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        robustness.parse_order_list(text)


def test_lists_are_named_pod_lists_each_once() -> None:
    assert robustness.parse_lists("gpuspec10") == ("gpuspec10",)
    assert robustness.parse_lists("multigpu20, default,multigpu20") == ("multigpu20", "default")
    for bad in ("", "gpuspec", "default,,gpuspec10"):
        with pytest.raises(argparse.ArgumentTypeError):
            robustness.parse_lists(bad)


def alibaba_run(argv: list[str]) -> list[tuple[int, str, str]]:
    args = robustness.build_parser().parse_args(["--only", "alibaba", *argv])
    return [
        (s.seed, s.fleet, s.variant) for s in robustness.samples_for(args) if s.trace == "alibaba"
    ]


def test_the_order_list_replaces_the_count_with_the_same_numbering() -> None:
    counted = alibaba_run(["--orders", "24"])
    chosen = alibaba_run(["--order-list", "24,3-4"])
    assert [k for k, _, _ in counted][:1] == [1]
    assert sorted({k for k, _, _ in counted}) == list(range(1, 25))
    per_order = len(robustness.ALIBABA_FLEETS) * len(robustness.ALIBABA_LISTS)
    assert len(chosen) == 3 * per_order
    assert [k for k, _, _ in chosen[::per_order]] == [24, 3, 4]
    # Order k names the same (order, fleet, list) samples whichever way it was chosen.
    for k in (24, 3, 4):
        assert [s for s in chosen if s[0] == k] == [s for s in counted if s[0] == k]


def test_the_lists_restrict_the_samples() -> None:
    samples = alibaba_run(["--order-list", "24", "--lists", "gpuspec10"])
    assert samples == [(24, fleet, "gpuspec10") for fleet in robustness.ALIBABA_FLEETS]
    both = alibaba_run(["--orders", "1", "--lists", "multigpu20,default"])
    assert [v for _, _, v in both] == ["multigpu20", "default"] * len(robustness.ALIBABA_FLEETS)


def test_the_default_runs_every_list() -> None:
    samples = alibaba_run(["--orders", "1"])
    assert {v for _, _, v in samples} == set(robustness.ALIBABA_LISTS)


def test_the_philly_samples_ignore_the_alibaba_choice() -> None:
    parser = robustness.build_parser()
    plain = robustness.samples_for(parser.parse_args(["--only", "philly", "--seeds", "1"]))
    chosen = robustness.samples_for(
        parser.parse_args(
            ["--only", "philly", "--seeds", "1", "--lists", "gpuspec10", "--order-list", "7"]
        )
    )
    assert chosen == plain


def test_a_bad_choice_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["--order-list", "0-3"], "orders are >= 1"),
        (["--lists", "gpuspec"], "not a pod list"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            robustness.build_parser().parse_args(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_the_options_are_in_the_help() -> None:
    text = robustness.build_parser().format_help()
    assert "--order-list" in text
    assert "--lists" in text
