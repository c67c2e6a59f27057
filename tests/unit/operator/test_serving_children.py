"""Deployments built from a ServingJob: one per pool, names, selector labels, owner reference,
scheduler name, GPU/MIG requests, the scheduler's annotations (read back with the scheduler's
own readers; no submission time, unlike a TrainingJob's workers), the role variable, the awake
readiness gate on the pools that list standbys (with autoscaling on or off, next to the user's
own gates), the spec's replica bounds, and drift detection that ignores replicas."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.model.contract import names
from gpufleet.model.contract.submitted import read_submitted
from gpufleet.model.servingjob import PoolSpec
from gpufleet.operator import serving_children as sc
from gpufleet.operator.objects import ServingJobObject
from gpufleet.scheduler.pods import (
    gang_id,
    gang_size,
    gpu_request,
    gpu_types,
    preemptible,
    priority,
    queue,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def job(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "prefill": {
            "minReplicas": 1,
            "maxReplicas": 4,
            "gpusPerReplica": 2,
            "gpuTypes": [{"name": "H100-80GB"}],
            "template": {
                "metadata": {"labels": {"team": "llm"}, "annotations": {"a": "b"}},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "x",
                            "env": [{"name": sc.ROLE_ENV, "value": "?"}],
                        },
                        {"name": "sidecar", "image": "y"},
                    ],
                    "restartPolicy": "Never",
                },
            },
        },
        "decode": {
            "minReplicas": 2,
            "migProfile": "3g.40gb",
            "gpuTypes": [{"name": "H100-80GB", "throughput": 1.0}, {"name": "A100-80GB"}],
            "template": {"spec": {"containers": [{"name": "vllm", "image": "x"}]}},
        },
        "priority": 800,
    }
    base.update(spec)
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ServingJob",
        "metadata": {"name": "llm", "namespace": "serve", "uid": "u-1", "generation": 1},
        "spec": base,
    }


def typed(manifest: dict[str, Any]) -> ServingJobObject:
    return ServingJobObject.of(manifest)


def deployment(manifest: dict[str, Any], pool: str, replicas: int, **kwargs: Any) -> dict[str, Any]:
    return sc.deployment(typed(manifest), pool, replicas, **kwargs)


def service(manifest: dict[str, Any], pool: str) -> dict[str, Any]:
    return sc.service(typed(manifest), pool)


def pod_of(deployment: dict[str, Any]) -> dict[str, Any]:
    """A pod as the ReplicaSet controller would create it from the template."""
    template = deployment["spec"]["template"]
    meta = {**template["metadata"], "name": "llm-prefill-abc12", "namespace": "serve"}
    return {"metadata": meta, "spec": template["spec"]}


def test_one_deployment_per_pool_with_selector_and_owner() -> None:
    j = job()
    assert list(typed(j).pools()) == ["prefill", "decode"]
    d = deployment(j, "prefill", 3)
    assert d["metadata"]["name"] == "llm-prefill"
    assert d["metadata"]["namespace"] == "serve"
    assert d["spec"]["replicas"] == 3
    labels = {sc.SERVINGJOB_LABEL: "llm", sc.POOL_LABEL: "prefill"}
    assert d["metadata"]["labels"] == labels
    assert d["spec"]["selector"] == {"matchLabels": labels}
    assert d["spec"]["template"]["metadata"]["labels"] == {"team": "llm", **labels}
    (owner,) = d["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ServingJob",
        "name": "llm",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_one_service_per_pool_on_the_job_port() -> None:
    j = job(port=9000)
    svc = service(j, "decode")
    labels = {sc.SERVINGJOB_LABEL: "llm", sc.POOL_LABEL: "decode"}
    assert svc["metadata"]["name"] == "llm-decode"
    assert svc["spec"]["selector"] == labels
    assert svc["spec"]["ports"] == [{"name": "http", "port": 9000, "targetPort": 9000}]
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert service(job(), "prefill")["spec"]["ports"][0]["port"] == 8000


def test_pod_template_is_for_the_gpufleet_scheduler() -> None:
    d = deployment(job(), "prefill", 1)
    pod = pod_of(d)
    assert pod["spec"]["schedulerName"] == names.SCHEDULER_NAME
    assert pod["spec"]["restartPolicy"] == "Always"
    assert gpu_request(pod).gpus == 2
    assert pod["spec"]["containers"][1].get("resources") is None  # only the first container
    assert gang_id(pod) == "serve/pod:llm-prefill-abc12"  # a gang of one per replica
    assert gang_size(pod) == 1
    assert priority(pod) == 800
    assert preemptible(pod) is False  # the CRD's default for serving
    assert [t.gpu_type for t in gpu_types(pod) or ()] == ["H100-80GB"]
    assert pod["metadata"]["annotations"]["a"] == "b"


def test_replicas_are_charged_to_the_jobs_queue() -> None:
    # Every pool's replicas name the ServingJob's queue; none named: the default queue.
    for pool in ("prefill", "decode"):
        assert queue(pod_of(deployment(job(queue="serving"), pool, 1))) == "serving"
        assert queue(pod_of(deployment(job(), pool, 1))) == "default"


def test_replicas_carry_no_submission_time() -> None:
    # Unlike a TrainingJob's workers (test_operator_children.py): a replica is in line from its
    # own pod's creation, so one the autoscaler adds is not ahead of jobs submitted before it.
    manifest = job()
    manifest["metadata"]["creationTimestamp"] = "2026-12-05T10:00:00Z"
    for pool in ("prefill", "decode"):
        annotations = pod_of(deployment(manifest, pool, 3))["metadata"]["annotations"]
        assert names.SUBMITTED_AT not in annotations
        assert read_submitted(annotations) is None


def test_pools_with_standbys_carry_the_awake_readiness_gate() -> None:
    autoscaling = {
        "prometheus": {"url": "http://prom:9090"},
        "capacity": {"prefillTokensPerSecond": 10000, "decodeBatchSize": 32},
        "standby": {"prefill": {"replicas": 1}},
    }
    gate = {"conditionType": names.AWAKE_CONDITION}
    for enabled in (True, False):
        slo = {"ttftP90Seconds": 1.0, "itlP90Seconds": 0.05}
        manifest = job(autoscaling={**autoscaling, "enabled": enabled}, slo=slo)
        own = {"conditionType": "example.com/warm"}
        manifest["spec"]["prefill"]["template"]["spec"]["readinessGates"] = [own, gate]
        assert pod_of(deployment(manifest, "prefill", 1))["spec"]["readinessGates"] == [own, gate]
        assert "readinessGates" not in pod_of(deployment(manifest, "decode", 1))["spec"]
    assert "readinessGates" not in pod_of(deployment(job(), "prefill", 1))["spec"]


def test_replicas_tolerate_the_gpu_taint() -> None:
    pod = pod_of(deployment(job(), "prefill", 1))
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_pod_template_names_the_configured_scheduler() -> None:
    d = sc.deployment(typed(job()), "decode", 1, scheduler_name="gpufleet-b")
    assert pod_of(d)["spec"]["schedulerName"] == "gpufleet-b"
    assert sc.needs_update(deployment(job(), "decode", 1), d)  # a new name is a new template


def test_mig_pool_requests_one_slice_and_lists_types_with_throughput() -> None:
    pod = pod_of(deployment(job(preemptible=True), "decode", 2))
    request = gpu_request(pod)
    assert (request.gpus, request.mig_profile) == (0, "3g.40gb")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert pod["metadata"]["annotations"][names.GPU_TYPES] == "H100-80GB=1,A100-80GB"
    assert preemptible(pod) is True


@pytest.mark.parametrize(
    ("pool", "role"),
    [
        pytest.param("prefill", "prefill", id="prefill"),
        pytest.param("decode", "decode", id="decode"),
    ],
)
def test_role_variable_replaces_user_entry_in_every_container(pool: str, role: str) -> None:
    pod = pod_of(deployment(job(), pool, 1))
    for container in pod["spec"]["containers"]:
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env[sc.ROLE_ENV] == role
        assert env[sc.SERVINGJOB_ENV] == "llm"
        assert [e["name"] for e in container["env"]].count(sc.ROLE_ENV) == 1


def test_single_pool_server_is_unified() -> None:
    spec = job()["spec"]
    server = spec.pop("prefill")
    spec.pop("decode")
    j = job(server=server)
    j["spec"].pop("prefill")
    j["spec"].pop("decode")
    assert list(typed(j).pools()) == ["server"]
    pod = pod_of(deployment(j, "server", 1))
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env[sc.ROLE_ENV] == "unified"


def test_builder_does_not_mutate_the_job() -> None:
    j = job()
    before = copy.deepcopy(j)
    deployment(j, "prefill", 1)
    assert j == before


CAPACITY = {"prefillTokensPerSecond": 1000, "decodeBatchSize": 8}
AUTOSCALING = {"enabled": True, "prometheus": {"url": "http://p:9090"}, "capacity": CAPACITY}


@pytest.mark.parametrize(
    ("spec", "enabled"),
    [
        pytest.param({}, False, id="omitted"),
        pytest.param({"autoscaling": {"enabled": False}}, False, id="disabled"),
        pytest.param({"autoscaling": AUTOSCALING}, True, id="enabled"),
        pytest.param(
            {"autoscaling": {"prometheus": {"url": "http://x"}, "capacity": CAPACITY}},
            True,
            id="default-on",
        ),
    ],
)
def test_autoscaling_enabled(spec: dict[str, Any], enabled: bool) -> None:
    slo = {"ttftP90Seconds": 1.0, "itlP90Seconds": 0.1}
    assert sc.autoscaling_enabled(typed(job(slo=slo, **spec)).spec) is enabled


@pytest.mark.parametrize(
    ("pool", "enabled", "current", "replicas", "why"),
    [
        pytest.param({"minReplicas": 2, "maxReplicas": 5}, True, None, 2, "created", id="create"),
        pytest.param({"minReplicas": 2, "maxReplicas": 5}, True, 4, 4, None, id="in-bounds"),
        pytest.param({"minReplicas": 2, "maxReplicas": 5}, True, 1, 2, "below", id="below-min"),
        pytest.param({"minReplicas": 2, "maxReplicas": 5}, True, 7, 5, "above", id="above-max"),
        pytest.param({"minReplicas": 2, "maxReplicas": 5}, False, 4, 2, "pinned", id="disabled"),
        pytest.param({"minReplicas": 2}, False, 2, 2, None, id="disabled-at-min"),
        pytest.param({"minReplicas": 3}, True, 5, 3, "above", id="no-max-is-fixed"),
    ],
)
def test_pool_replicas(
    pool: dict[str, Any], enabled: bool, current: int | None, replicas: int, why: str | None
) -> None:
    fields = {"template": {"spec": {"containers": [{"name": "s", "image": "x"}]}}, **pool}
    spec = PoolSpec.model_validate({"gpusPerReplica": 1, **fields})
    got, reason = sc.pool_replicas("decode", spec, enabled, current)
    assert got == replicas
    if why is None:
        assert reason is None
    else:
        assert reason is not None and why in reason and reason.startswith("decode: ")


def test_drift_ignores_replicas_but_not_the_template() -> None:
    j = job()
    live = deployment(j, "prefill", 1)
    assert not sc.needs_update(live, deployment(j, "prefill", 4))
    changed = job()
    changed["spec"]["prefill"]["template"]["spec"]["containers"][0]["image"] = "x:2"
    assert sc.needs_update(live, deployment(changed, "prefill", 1))
    assert sc.needs_update({"metadata": {}}, live)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("servingjob-*.yaml")), ids=lambda p: p.stem)
def test_examples_build(path: Path) -> None:
    manifest = yaml.safe_load(path.read_text())
    manifest["metadata"].update(namespace="default", uid="u")
    for pool in typed(manifest).pools():
        d = deployment(manifest, pool, 1)
        assert not gpu_request(pod_of(d)).empty


def _pod(name: str, pool: str, phase: str, gpu_type: str | None, deleting: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name, "labels": {sc.POOL_LABEL: pool}, "annotations": {}}
    if gpu_type is not None:
        meta["annotations"][names.ASSIGNED_TYPE] = gpu_type
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_running_gpu_types_per_pool() -> None:
    pods = [
        _pod("p-b", "prefill", "Running", "A100-80GB"),
        _pod("p-a", "prefill", "Running", "H100-80GB"),
        _pod("p-c", "prefill", "Pending", None),  # not running: no capacity yet
        _pod("d-a", "decode", "Running", None),  # no type recorded
        _pod("d-b", "decode", "Running", "H100-80GB", deleting=True),
    ]
    assert sc.running_gpu_types(pods) == {
        "prefill": ("H100-80GB", "A100-80GB"),
        "decode": (None,),
    }
