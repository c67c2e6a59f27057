"""The scheduler cache: assumed bindings count until the watch confirms or they are forgotten
or expire; nominations and MIG requests end when their wait is over."""

from __future__ import annotations

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import Clock

from gpufleet.model.contract import names
from gpufleet.scheduler.cache import SchedulerCache, mig_applied


def _bound(state_pods: list[dict], key: str) -> str | None:
    for p in state_pods:
        if f"{p['metadata']['namespace']}/{p['metadata']['name']}" == key:
            return p["spec"].get("nodeName")
    raise KeyError(key)


def test_assumed_pod_appears_bound_with_its_annotations() -> None:
    cache = SchedulerCache()
    pod = PodBuilder("p").gpus(1).obj()
    cache.replace_pods([pod])
    cache.assume("default/p", "h0", {names.ASSIGNED_GPUS: "3"})
    shown = cache.state().pods[0]
    assert shown["spec"]["nodeName"] == "h0"
    assert shown["metadata"]["annotations"][names.ASSIGNED_GPUS] == "3"
    assert "nodeName" not in pod["spec"]  # the informer's copy is untouched


def test_watch_confirmation_ends_the_assumption() -> None:
    cache = SchedulerCache()
    cache.replace_pods([PodBuilder("p").gpus(1).obj()])
    cache.assume("default/p", "h0", {})
    cache.pod_event("MODIFIED", PodBuilder("p").gpus(1).bound("h0", gpus="0").obj())
    assert cache.assumed() == {}


def test_forget_and_expiry_drop_assumptions() -> None:
    clock = Clock()
    cache = SchedulerCache(assume_ttl=5, clock=clock)
    cache.replace_pods([PodBuilder("a").gpus(1).obj(), PodBuilder("b").gpus(1).obj()])
    cache.assume("default/a", "h0", {})
    cache.assume("default/b", "h0", {})
    cache.forget("default/a")
    assert _bound(cache.state().pods, "default/a") is None
    assert _bound(cache.state().pods, "default/b") == "h0"
    clock.t = 6
    assert _bound(cache.state().pods, "default/b") is None


def test_deleted_pod_drops_its_assumption() -> None:
    cache = SchedulerCache()
    pod = PodBuilder("p").gpus(1).obj()
    cache.replace_pods([pod])
    cache.assume("default/p", "h0", {})
    cache.pod_event("DELETED", pod)
    assert cache.assumed() == {} and cache.state().pods == []


def test_nomination_lasts_while_a_victim_exists() -> None:
    cache = SchedulerCache()
    victim = PodBuilder("v").gpus(1).bound("h0", gpus="0").obj()
    cache.replace_pods([victim])
    cache.nominate("default/hi", frozenset({"default/v"}))
    assert "default/hi" in cache.state().nominations
    cache.pod_event("DELETED", victim)
    assert cache.state().nominations == {}


def test_a_nomination_extended_lasts_while_any_of_its_pods_exists() -> None:
    # A gang placed on GPUs of gangs moved for it waits for the moved pods beside its victims.
    clock = Clock()
    cache = SchedulerCache(assume_ttl=30.0, clock=clock)
    victim = PodBuilder("v").gpus(1).bound("h0", gpus="0").obj()
    moved = PodBuilder("m").gpus(1).bound("h0", gpus="1").obj()
    moved["metadata"]["uid"] = "uid-m"
    cache.replace_pods([victim, moved])
    cache.nominate("default/hi", frozenset({"default/v"}))
    cache.nominate_also("default/hi", {("default/m", "uid-m")}, "waiting for m", 100.0)
    nomination = cache.state().nominations["default/hi"]
    assert nomination.message == "waiting for m" and nomination.expires == 100.0
    assert {k for k, _ in nomination.victims} == {"default/v", "default/m"}
    cache.pod_event("DELETED", victim)
    clock.t = 60.0  # past the usual wait, within the one asked for
    assert "default/hi" in cache.state().nominations
    cache.pod_event("DELETED", moved)
    assert cache.state().nominations == {}
    # Nothing to wait for: no nomination is made.
    cache.nominate_also("default/lo", (), "decided again")
    assert cache.state().nominations == {}


def test_mig_request_lasts_until_the_config_is_applied() -> None:
    cache = SchedulerCache()
    node = NodeBuilder("a0", "A100-80GB").mig("gpufleet-x", "pending").obj()
    cache.replace_nodes([node])
    cache.request_mig("a0", "gpufleet-x", frozenset({"default/g"}))
    assert "a0" in cache.state().mig_requests
    done = NodeBuilder("a0", "A100-80GB").mig("gpufleet-x", "success")
    done.annotate("gpufleet.io/mig-config-applied", "gpufleet-x")
    assert mig_applied(done.obj(), "gpufleet-x")
    cache.node_event("MODIFIED", done.obj())
    assert cache.state().mig_requests == {}


def test_configmap_is_parsed() -> None:
    cache = SchedulerCache()
    cm = {
        "metadata": {"name": names.MIG_CONFIGMAP_NAME},
        "data": {names.MIG_CONFIGMAP_KEY: "version: v1\nmig-configs: {x: []}\n"},
    }
    cache.replace_configmaps([cm, {"metadata": {"name": "other"}, "data": {}}])
    assert cache.state().mig_configs["mig-configs"] == {"x": []}


def test_a_recreated_victim_of_the_same_name_does_not_keep_the_nomination() -> None:
    cache = SchedulerCache()
    victim = PodBuilder("v").gpus(1).bound("h0", gpus="0").obj()
    cache.replace_pods([victim])
    cache.nominate("default/hi", frozenset({"default/v"}))
    cache.pod_event("DELETED", victim)
    again = PodBuilder("v").gpus(1).obj()
    again["metadata"]["uid"] = "a-new-uid"
    cache.pod_event("ADDED", again)
    assert cache.state().nominations == {}


def test_pods_are_indexed_by_their_job_and_deletions_are_reported() -> None:
    cache = SchedulerCache()
    deleted: list[str] = []
    cache.on_pod_deleted(lambda pod: deleted.append(pod["metadata"]["name"]))
    worker = PodBuilder("j-worker-0").gpus(1).obj()
    worker["metadata"]["labels"]["gpufleet.io/trainingjob"] = "j"
    other = PodBuilder("x").gpus(1).obj()
    cache.replace_pods([worker, other])
    assert [p["metadata"]["name"] for p in cache.owned_pods("default", "j")] == ["j-worker-0"]
    assert cache.owned_pods("elsewhere", "j") == []
    # A ServingJob's pods by its label (a TrainingJob of the same name is another owner).
    replica = PodBuilder("j-server-0").gpus(1).obj()
    replica["metadata"]["labels"]["gpufleet.io/servingjob"] = "j"
    cache.pod_event("ADDED", replica)
    serving = cache.labelled_pods("gpufleet.io/servingjob", "default", "j")
    assert [p["metadata"]["name"] for p in serving] == ["j-server-0"]
    assert [p["metadata"]["name"] for p in cache.owned_pods("default", "j")] == ["j-worker-0"]
    cache.pod_event("DELETED", worker)
    assert cache.owned_pods("default", "j") == [] and deleted == ["j-worker-0"]


def test_only_updates_that_can_change_a_decision_wake_the_loop() -> None:
    cache = SchedulerCache()
    pending = PodBuilder("p").gpus(1).obj()
    cache.replace_pods([pending])
    cache.changed.clear()

    def wakes(obj: dict) -> bool:
        cache.changed.clear()
        cache.pod_event("MODIFIED", obj)
        return cache.changed.is_set()

    explained = {**pending, "status": {"phase": "Pending", "conditions": [{"type": "x"}]}}
    assert not wakes(explained)  # gpufleet's own "why pending" condition
    cache.assume("default/p", "h0", {names.ASSIGNED_GPUS: "0"})
    bound = PodBuilder("p").gpus(1).bound("h0", gpus="0").obj()
    assert not wakes(bound)  # the watch confirming an assumed binding
    running = {**bound, "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}}
    assert not wakes(running)  # a kubelet (kwok) reporting the pod Running
    assert wakes(PodBuilder("p").gpus(1).bound("h0", gpus="0").phase("Succeeded").obj())
    other = PodBuilder("q").gpus(1).obj()
    cache.pod_event("ADDED", other)
    assert wakes(PodBuilder("q").gpus(1).bound("h1").obj())  # bound by another scheduler
