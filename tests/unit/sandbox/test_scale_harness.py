"""The live scale benchmark's harness logic (bench/scale_bench.py): the fill that keeps the
backlog pending on a busy fleet, the measured job's own queue, and the memory guard's reading.

A 1,000-node run's 64-worker job stayed Queued with QuotaExceeded: in the default queue (no
nominal quota) it could neither borrow nor reclaim GPUs from the backlog, so its latency was
never measured; it now has a queue of its own."""

from __future__ import annotations

from gpufleet.model.contract import names
from gpufleet.model.contract.wishes import GangWishes
from gpufleet.model.fleet import FleetSpec
from tests.benchscripts import bench_module

MEMINFO = """MemTotal:       24000000 kB
MemFree:         1000000 kB
MemAvailable:    7221248 kB
Buffers:          100000 kB
HugePages_Total:       0
"""


def test_the_fill_takes_whole_nodes_above_every_backlog_priority_and_is_never_a_victim() -> None:
    scale = bench_module("scale_bench")
    spec = FleetSpec.model_validate(scale.default_fleet(50))  # 20 H100, 10 A100, 20 L4
    pods = scale.fill_pods(spec, 0.5)
    assert len(pods) == 25 and len({p["metadata"]["name"] for p in pods}) == 25
    per_type: dict[str, int] = {}
    for pod in pods:
        wishes = GangWishes.read(pod["metadata"]["annotations"])
        assert wishes.size == 1 and not wishes.preemptible
        assert wishes.priority > max(scale.BACKLOG_PRIORITY)
        assert wishes.gpu_types is not None and len(wishes.gpu_types) == 1
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"nvidia.com/gpu": "8"}
        assert pod["spec"]["schedulerName"] == names.SCHEDULER_NAME
        gpu_type = wishes.gpu_types[0].gpu_type
        per_type[gpu_type] = per_type.get(gpu_type, 0) + 1
    assert per_type == {"H100-80GB": 10, "A100-80GB": 5, "L4": 10}
    assert scale.fill_pods(spec, 0.0) == []


def test_the_measured_job_is_in_its_own_queue_with_a_nominal_quota_of_its_gpus() -> None:
    scale = bench_module("scale_bench")
    queue, job = scale.latency_queue(64), scale.latency_job(64)
    assert job["spec"]["queue"] == queue["metadata"]["name"] != "default"
    (gpu_type,) = [t["name"] for t in job["spec"]["gpuTypes"]]
    quota = {q["gpuType"]: q["nominal"] for q in queue["spec"]["quotas"]}
    assert quota[gpu_type] >= job["spec"]["replicas"] * job["spec"]["gpusPerReplica"]


def test_used_memory_is_total_minus_available() -> None:
    scale = bench_module("scale_bench")
    assert abs(scale.used_memory_gib(MEMINFO) - (24000000 - 7221248) / 2**20) < 1e-9
