"""Tenants from the Philly trace: quotas proportional to each virtual cluster's GPU-hours.

Aspects: largest-remainder apportionment (sums exact, ties by name, zero shares); the quotas of
every type add up to the fleet's GPUs; the history window ends where the replay window starts
and is the only data counted (with the loader's filters); bad windows are refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.sim.tenants import (
    MIN_WEIGHT,
    apportion,
    history_before,
    philly_gpu_hours,
    tenant_setup,
)


def test_apportion_is_proportional_and_sums_exactly() -> None:
    assert apportion(10, {"a": 0.5, "b": 0.3, "c": 0.2}) == {"a": 5, "b": 3, "c": 2}
    # 7 / 3 = 2.33 each: equal remainders, the extra GPU goes by name.
    assert apportion(7, {"c": 1.0, "b": 1.0, "a": 1.0}) == {"a": 3, "b": 2, "c": 2}
    # 64 x (0.6, 0.3, 0.1) = 38.4, 19.2, 6.4: floors 38 + 19 + 6 = 63, largest remainder a/c.
    assert apportion(64, {"a": 0.6, "b": 0.3, "c": 0.1}) == {"a": 39, "b": 19, "c": 6}
    assert apportion(8, {"a": 0.0, "b": 0.0}) == {"a": 0, "b": 0}


def _fleet() -> FleetSpec:
    return FleetSpec(
        node_pools=[
            NodePoolSpec(name="h", count=2, gpu_type="H100-80GB", gpus_per_node=8),
            NodePoolSpec(name="t", count=2, gpu_type="T4", gpus_per_node=4),
        ]
    )


def test_quotas_follow_gpu_hour_shares_and_fill_every_type() -> None:
    setup = tenant_setup({"a": 30.0, "b": 10.0, "idle": 0.0}, _fleet())
    assert setup.shares == {"a": 0.75, "b": 0.25, "idle": 0.0}
    assert setup.nominal("a") == {"H100-80GB": 12, "T4": 6}
    assert setup.nominal("b") == {"H100-80GB": 4, "T4": 2}
    assert setup.nominal("idle") == {"H100-80GB": 0, "T4": 0}
    tree = setup.tree
    assert {q.weight for q in tree.queues.values()} == {1.0}  # equal weights by default
    shared = tenant_setup({"a": 30.0, "b": 10.0, "idle": 0.0}, _fleet(), weights="share").tree
    assert shared.queues["a"].weight == 0.75
    assert shared.queues["idle"].weight == MIN_WEIGHT
    assert shared.queues["a"].quotas == tree.queues["a"].quotas  # weights change nothing else
    for gpu_type, gpus in (("H100-80GB", 16), ("T4", 8)):
        assert sum(q.quota(gpu_type).nominal for q in tree.queues.values()) == gpus
    # No limits: a tenant may borrow all that is unused and lend all it does not use.
    assert all(q.borrowing_limit is None and q.lending_limit is None
               for spec in tree.queues.values() for q in spec.quotas.values())  # fmt: skip


def test_history_ends_where_the_window_starts() -> None:
    assert history_before("2017-11-01", 14) == "2017-10-18T00:00:00,2017-11-01T00:00:00"
    with pytest.raises(ValueError, match="positive"):
        history_before("2017-11-01", 0)
    with pytest.raises(ValueError, match="start"):
        history_before(",2017-11-01", 3)


def test_only_the_history_is_counted_with_the_loaders_filters(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-20 10:00:00,3600,2,7200,aa\n"  # in the history: 2 GPU-h
        "2017-10-25 10:00:00,7200,1,7200,bb\n"  # in the history: 2 GPU-h
        "2017-10-26 10:00:00,30,8,240,bb\n"  # shorter than 60 s: filtered
        "2017-10-27 10:00:00,1800000,2,3600000,aa\n"  # 1,000 GPU-h: filtered
        "2017-11-01 00:00:00,3600,8,28800,aa\n"  # the window's own job: not counted
        "2017-10-01 00:00:00,3600,8,28800,cc\n"  # before the history
    )
    hours = philly_gpu_hours(trace, history_before("2017-11-01", 14))
    assert hours == {"aa": 2.0, "bb": 2.0, "cc": 0.0}
    assert philly_gpu_hours(trace, None)["aa"] == 10.0  # the whole-trace aggregate


def test_unknown_weights_are_refused() -> None:
    with pytest.raises(ValueError, match="weights must be one of equal, share"):
        tenant_setup({"a": 1.0}, _fleet(), weights="gpu-hours")
