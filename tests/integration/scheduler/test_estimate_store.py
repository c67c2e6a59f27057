"""The live workload estimate kept in a ConfigMap, against the sandbox's real API server.

Aspects: the adapter reads nothing from a missing ConfigMap, creates it on the first write,
replaces it on the next and reads back what it wrote; an invalid document is ignored (no prior)
rather than failing; the operator writes the request shapes it has seen to its ConfigMap and,
after a restart, continues from them (a shape seen before the restart is still there after a
new one is written).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.core.workload import ArrivalCounts
from gpufleet.scheduler.estimate_store import KEY, EstimateStore
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.settings import LeaseSettings
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for
from tests.unit.core.placement_builders import gang

LIVE_NAMESPACE = LeaseSettings().namespace
LIVE_NAME = SchedulerSettings().estimate_configmap


@pytest.fixture
def own_ns(kube: Kube) -> Iterator[str]:
    name = f"estimate-store-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(name)
    yield name
    kube.core.delete_namespace(name)


def kept(counts: ArrivalCounts) -> ArrivalCounts:
    """The counts as the ConfigMap holds them (to_dict rounds each count to 6 decimals)."""
    return ArrivalCounts.from_dict(counts.to_dict())


def test_the_store_round_trips_through_the_api_server(kube: Kube, own_ns: str) -> None:
    store = EstimateStore(kube.core, own_ns, "estimate")
    assert store.load() is None  # nothing kept yet
    first = ArrivalCounts(2000.0).observed_gangs([gang("a", "T4", gpus=2)])
    store.save(first)  # creates
    assert store.load() == kept(first)
    second = first.observed_gangs([gang("b", ("H100-80GB", "A100-80GB"), gpus=8)])
    store.save(second)  # replaces
    assert store.load() == kept(second)
    assert {s.shape.gpus for s in kept(second).estimate().shapes} == {2, 8}
    kube.core.patch_namespaced_config_map("estimate", own_ns, {"data": {KEY: "{not json"}})
    assert store.load() is None


def _live_shapes(kube: Kube) -> set[int] | None:
    try:
        obj = kube.core.read_namespaced_config_map(LIVE_NAME, LIVE_NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    document = json.loads((obj.data or {})[KEY])
    return {int(s["gpus"]) for s in document["shapes"]}


def test_the_operator_keeps_the_estimate_across_a_restart(
    kube: Kube, operator: OperatorProcess, ns: str
) -> None:
    kube.create_job(ns, training_job("three", replicas=1, gpus=3))
    wait_for(lambda: _live_shapes(kube) and 3 in (_live_shapes(kube) or set()), "3-GPU shape kept")
    operator.stop()
    operator.start()
    kube.create_job(ns, training_job("five", replicas=1, gpus=5))
    shapes = wait_for(
        lambda: (s := _live_shapes(kube)) is not None and 5 in s and s, "5-GPU shape kept", 60.0
    )
    assert 3 in shapes  # restored at start, not begun anew
