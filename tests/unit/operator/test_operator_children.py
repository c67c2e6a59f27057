"""Worker pods and the headless Service built from a TrainingJob: names, ranks, PyTorch
rendezvous variables, GPU/MIG requests, the GPU taint's toleration, scheduler hints (the job's
submission time among them), owner references."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.model.contract import names
from gpufleet.model.contract.moves import Checkpoint, read_move_times
from gpufleet.model.contract.submitted import read_submitted
from gpufleet.model.trainingjob import TrainingJobSpec
from gpufleet.operator import children
from gpufleet.operator.children import JOB_LABEL, MASTER_PORT, min_replicas, replica_count
from gpufleet.operator.objects import TrainingJobObject
from gpufleet.scheduler.pods import (
    energy,
    gpu_request,
    gpu_types,
    max_slowdown,
    queue,
    spread_speed,
    topology,
)


def job(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "replicas": 3,
        "gpusPerReplica": 2,
        "template": {
            "metadata": {"labels": {"team": "nlp"}},
            "spec": {
                "containers": [
                    {"name": "t", "image": "x", "env": [{"name": "RANK", "value": "bogus"}]},
                    {"name": "sidecar", "image": "y"},
                ]
            },
        },
    }
    base.update(spec)
    return {
        "metadata": {"name": "bert", "namespace": "ml", "uid": "u-1"},
        "spec": base,
    }


def worker_pod(manifest: dict[str, Any], index: int, **kwargs: Any) -> dict[str, Any]:
    return children.worker_pod(TrainingJobObject.of(manifest), index, **kwargs)


def headless_service(manifest: dict[str, Any]) -> dict[str, Any]:
    return children.headless_service(TrainingJobObject.of(manifest))


def spec(**fields: Any) -> TrainingJobSpec:
    template = {"spec": {"containers": [{"name": "t", "image": "x"}]}}
    return TrainingJobSpec.model_validate({"template": template, "gpusPerReplica": 1, **fields})


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_worker_identity_and_rendezvous() -> None:
    pod = worker_pod(job(), 2)
    assert pod["metadata"]["name"] == "bert-worker-2"
    assert pod["spec"]["hostname"] == "bert-worker-2" and pod["spec"]["subdomain"] == "bert"
    for container in pod["spec"]["containers"]:
        assert env(container) == {
            "MASTER_ADDR": "bert-worker-0.bert.ml.svc",
            "MASTER_PORT": str(MASTER_PORT),
            "WORLD_SIZE": "3",
            "RANK": "2",
        }
    assert pod["metadata"]["labels"] == {
        "team": "nlp",
        JOB_LABEL: "bert",
        names.GANG_LABEL: "bert",
        names.RANK_LABEL: "2",
    }


def test_scheduler_reads_back_what_the_operator_wrote() -> None:
    wishes = {
        "gpuTypes": [{"name": "H100-80GB", "throughput": 1.0}, {"name": "A100-80GB"}],
        "topology": "nvlinkDomain",
        "priority": 7,
        "preemptible": False,
    }
    pod = worker_pod(job(**wishes), 0)
    assert pod["spec"]["schedulerName"] == "gpufleet"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert gpu_request(pod).gpus == 2
    ann = pod["metadata"]["annotations"]
    assert ann[names.GANG_SIZE] == "3" and ann[names.PRIORITY] == "7"
    assert ann[names.PREEMPTIBLE] == "false"
    assert [o.gpu_type for o in gpu_types(pod) or ()] == ["H100-80GB", "A100-80GB"]
    assert topology(pod).value == "nvlink-domain"
    assert max_slowdown(pod) is None  # not given: the placement policy decides


def test_the_jobs_queue_reaches_the_scheduler() -> None:
    # The scheduler charges a gang to the queue its pods name; a job that names none is in
    # the default queue (the CRD's default), not outside every queue.
    assert queue(worker_pod(job(queue="research"), 0)) == "research"
    assert queue(worker_pod(job(), 0)) == "default"


def test_worker_pods_name_the_configured_scheduler() -> None:
    pod = children.worker_pod(TrainingJobObject.of(job()), 1, scheduler_name="gpufleet-b")
    assert pod["spec"]["schedulerName"] == "gpufleet-b"


def test_the_slowdown_a_job_accepts_from_a_power_cap_reaches_the_scheduler() -> None:
    pod = worker_pod(job(energy={"preference": "energy", "maxSlowdownPercent": 15}), 0)
    assert pod["metadata"]["annotations"][names.MAX_SLOWDOWN] == "15"
    assert max_slowdown(pod) == 0.15
    assert energy(pod).value == "efficient"


def test_the_slowdown_a_job_states_for_spread_placements_reaches_the_scheduler() -> None:
    pod = worker_pod(job(spreadSlowdownPercent=35), 0)
    assert pod["metadata"]["annotations"][names.SPREAD_SLOWDOWN] == "35"
    assert spread_speed(pod) == pytest.approx(0.65)
    plain = worker_pod(job(), 0)
    assert names.SPREAD_SLOWDOWN not in plain["metadata"]["annotations"]
    assert spread_speed(plain) == 1.0


def test_mig_job_asks_for_one_slice_on_the_first_container_only() -> None:
    mig = job(migProfile="3g.40gb")["spec"]
    del mig["gpusPerReplica"]
    pod = worker_pod({"metadata": job()["metadata"], "spec": mig}, 0)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert "resources" not in pod["spec"]["containers"][1]


def test_elastic_job_has_pods_up_to_its_maximum_and_a_gang_of_its_minimum() -> None:
    elastic = {"elastic": {"minReplicas": 2, "maxReplicas": 8}}
    assert replica_count(spec(**elastic)) == 8
    assert replica_count(spec(replicas=4, **elastic)) == 8
    assert min_replicas(spec(**elastic)) == 2
    fields = job(**elastic)["spec"]
    del fields["replicas"]
    pod = worker_pod({"metadata": job()["metadata"], "spec": fields}, 5)
    assert pod["metadata"]["annotations"][names.GANG_SIZE] == "2"
    variables = env(pod["spec"]["containers"][0])
    assert variables["PET_NNODES"] == "2:8"
    assert variables["PET_RDZV_ENDPOINT"] == f"bert-worker-0.bert.ml.svc:{MASTER_PORT}"
    assert variables["RANK"] == "5" and "WORLD_SIZE" not in variables


def test_children_are_owned_by_the_job() -> None:
    for child in (worker_pod(job(), 0), headless_service(job())):
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner["uid"] == "u-1" and owner["controller"] and owner["kind"] == "TrainingJob"


def test_service_is_headless_and_publishes_unready_workers() -> None:
    svc = headless_service(job())
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"]
    assert svc["spec"]["selector"] == {JOB_LABEL: "bert"}


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_workers_tolerate_the_gpu_taint_beside_the_templates_own() -> None:
    assert worker_pod(job(), 0)["spec"]["tolerations"] == [GPU_TOLERATION]
    own = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    spec = job()["spec"]
    spec["template"]["spec"]["tolerations"] = [own, GPU_TOLERATION]
    pod = worker_pod({"metadata": job()["metadata"], "spec": spec}, 0)
    assert pod["spec"]["tolerations"] == [own, GPU_TOLERATION]  # not added twice
    assert "tolerations" not in worker_pod(job(), 0, tolerations=())["spec"]


def test_checkpoint_and_move_times_reach_the_scheduler() -> None:
    signal = job(checkpoint={"onSignal": True, "gracePeriodSeconds": 45})
    signal["status"] = {"moveTimes": ["2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"]}
    pod = worker_pod(signal, 1)
    annotations = pod["metadata"]["annotations"]
    assert Checkpoint.read(annotations) == Checkpoint(grace_s=45)
    assert pod["spec"]["terminationGracePeriodSeconds"] == 45  # SIGTERM, then 45 s to save
    assert [t.hour for t in read_move_times(annotations)] == [10, 11]

    interval = worker_pod(job(checkpoint={"intervalSeconds": 900}), 0)
    assert Checkpoint.read(interval["metadata"]["annotations"]) == Checkpoint(interval_s=900)
    assert "terminationGracePeriodSeconds" not in interval["spec"]
    assert names.MOVE_TIMES not in interval["metadata"]["annotations"]  # never moved

    plain = worker_pod(job(), 0)["metadata"]["annotations"]
    assert names.CHECKPOINT not in plain and Checkpoint.read(plain) is None


def test_every_worker_says_when_its_job_was_submitted() -> None:
    manifest = job()
    manifest["metadata"]["creationTimestamp"] = "2026-12-05T10:00:00Z"
    for index in range(3):
        pod = worker_pod(manifest, index)
        annotations = pod["metadata"]["annotations"]
        assert annotations[names.SUBMITTED_AT] == "2026-12-05T10:00:00Z"
        assert read_submitted(annotations) == datetime(2026, 12, 5, 10, tzinfo=UTC)
    # A job not created yet (a what-if's manifest) says nothing.
    assert names.SUBMITTED_AT not in worker_pod(job(), 0)["metadata"]["annotations"]
