"""Node heartbeats scale with the fleet: small fleets (the tests') keep kwok's and the
node-lifecycle controller's defaults, large ones get proportionally longer leases and grace
periods so that kwok renews about the same number of Leases a second at any size."""

from __future__ import annotations

import pytest

from gpufleet.sandbox import fleetnodes


@pytest.mark.parametrize(
    ("nodes", "factor"), [(1, 1), (16, 1), (250, 1), (251, 2), (1000, 4), (5000, 20)]
)
def test_heartbeat_factor_grows_with_the_fleet(nodes: int, factor: int) -> None:
    assert fleetnodes.heartbeat_factor(nodes) == factor


def test_lease_renewals_per_second_stay_bounded_at_any_size() -> None:
    # kwok renews a node's Lease at a quarter of its duration.
    rates = [
        n / (fleetnodes.NODE_LEASE_S * fleetnodes.heartbeat_factor(n) / 4)
        for n in (250, 1000, 2500, 5000, 10000)
    ]
    assert max(rates) <= 25.0
    assert min(rates) >= 24.0  # and no slower than a 250-node fleet's


def _node(ready: str, *taints: str) -> dict[str, object]:
    return {
        "spec": {"taints": [{"key": t, "effect": "NoSchedule"} for t in taints]},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_a_node_counts_as_ready_only_once_its_not_ready_taint_is_gone() -> None:
    # On 5,000 nodes the taint stayed on most nodes for minutes after they were Ready, and a
    # benchmark's pods waited for it.
    assert fleetnodes.usable(_node("True", "nvidia.com/gpu"))
    assert not fleetnodes.usable(_node("True", "node.kubernetes.io/not-ready"))
    assert not fleetnodes.usable(_node("True", "node.kubernetes.io/unreachable"))
    assert not fleetnodes.usable(_node("False"))
