"""The scheduler's side of GPUQueue namespace selectors: objects, cache and one whole cycle.

Aspects: a GPUQueue's `namespaceSelector` becomes the core's selector (matchLabels and
matchExpressions; absent: none); the cache keeps every namespace's labels from the informer's
list and events, wakes the loop only when labels change, and hands each cycle the mapping; the
view gives pending gangs their namespace and the snapshot the labels; a cycle binds the gang of
the namespace the queue takes and marks the other's pods QueueNotAllowed naming the queue and
the namespace, and binds it once its namespace is relabelled.
"""

from __future__ import annotations

from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import FakeBinder, load, scheduler

from gpufleet.core.label_selector import LabelSelector, Requirement, SelectorOperator
from gpufleet.model.contract import names
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.cluster_view import build_view
from gpufleet.scheduler.queue_objects import queue_spec


def gq(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "status": {"phase": "Active"}}


def job_pod(name: str, ns: str, queue: str) -> dict[str, Any]:
    return PodBuilder(f"{name}-0", ns).gpus(2).gang(name, 1, 0).annotate(names.QUEUE, queue).obj()


def test_the_selector_of_an_object_becomes_the_cores() -> None:
    spec = queue_spec(
        gq(
            "team",
            namespaceSelector={
                "matchLabels": {"team": "a"},
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            },
        )
    )
    assert spec.namespace_selector == LabelSelector(
        (
            Requirement("team", SelectorOperator.IN, frozenset({"a"})),
            Requirement("env", SelectorOperator.IN, frozenset({"prod", "dev"})),
            Requirement("legacy", SelectorOperator.DOES_NOT_EXIST),
        )
    )
    assert queue_spec(gq("open")).namespace_selector is None
    assert queue_spec(gq("all", namespaceSelector={})).namespace_selector == LabelSelector()


def test_the_cache_keeps_namespace_labels_and_wakes_only_on_label_changes() -> None:
    cache = SchedulerCache()
    cache.replace_namespaces([namespace("a", team="a"), namespace("b")])
    assert cache.state().namespace_labels == {"a": {"team": "a"}, "b": {}}
    cache.changed.clear()
    relabelled = namespace("b", team="b")
    relabelled["metadata"]["annotations"] = {"x": "y"}
    cache.namespace_event("MODIFIED", relabelled)
    assert cache.changed.is_set()
    cache.changed.clear()
    held = cache.state().namespace_labels
    cache.namespace_event("MODIFIED", {**relabelled, "status": {"phase": "Terminating"}})
    assert not cache.changed.is_set()  # same labels: nothing to decide again
    assert cache.state().namespace_labels is held
    cache.namespace_event("DELETED", namespace("a", team="a"))
    assert cache.changed.is_set()
    assert cache.state().namespace_labels == {"b": {"team": "b"}}
    assert held == {"a": {"team": "a"}, "b": {"team": "b"}}  # a cycle's copy never changes


def test_the_view_gives_gangs_their_namespace_and_the_snapshot_the_labels() -> None:
    catalog = load_catalog()
    pods = [job_pod("j", "ns-a", "team")]
    labels = {"ns-a": {"team": "a"}}
    view = build_view(catalog, [NodeBuilder("n0").obj()], pods, {}, [gq("team")], labels)
    assert [pg.gang.namespace for pg in view.pending] == ["ns-a"]
    assert view.snapshot.namespace_labels == labels


def test_a_cycle_binds_the_selected_namespace_and_marks_the_other_until_relabelled() -> None:
    cache = SchedulerCache()
    pods = [job_pod("in", "ns-a", "qa"), job_pod("out", "ns-b", "qa")]
    load(cache, [NodeBuilder("n0").obj()], pods)
    cache.replace_queues([gq("qa", namespaceSelector={"matchLabels": {"team": "a"}})])
    cache.replace_namespaces([namespace("ns-a", team="a"), namespace("ns-b", team="b")])
    binder = FakeBinder()
    sched = scheduler(cache, binder)
    sched.run_cycle()
    assert set(binder.bound) == {"ns-a/in-0"}
    assert binder.marked["ns-b/out-0"] == (
        "QueueNotAllowed: queue qa does not take jobs from namespace ns-b: its labels fail "
        "team=a (namespaceSelector team=a)"
    )
    cache.namespace_event("MODIFIED", namespace("ns-b", team="a"))
    sched.run_cycle()
    assert set(binder.bound) == {"ns-a/in-0", "ns-b/out-0"}
