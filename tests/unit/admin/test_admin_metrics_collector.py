"""The fleet and job series, collected at scrape time from the live view:

- allocatable and allocated whole GPUs and MIG slices per type and profile, equal to what
  GET /fleet reports;
- the estimated power per GPU type, equal to the sum of the fleet's nodes;
- energy and GPU time per job as counters from the jobs' status;
- where GPUQueues exist, the GPUs held outside every queue (pods naming none, or a queue that
  does not exist), equal to GET /fleet's capacity rows; no such series without queues;
- nothing but the empty families before the view is synced.
"""

from __future__ import annotations

from admin_fakes import bind, job_pods, live_fleet, sandbox_nodes, training_job
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.admin.fleet import all_nodes, capacity
from gpufleet.admin.metrics import FleetCollector
from gpufleet.model.contract import names


def _scrape(collector: FleetCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_fleet_and_job_series() -> None:
    job = training_job("bert", mig="1g.10gb", gpus=None, gpu_type="A100-80GB", phase="Running")
    pods = [bind(p, "a100-mig-0", "0", "A100-80GB", "1g.10gb@0") for p in job_pods(job)]
    live = live_fleet(sandbox_nodes(), pods, [job])
    series = _scrape(FleetCollector(live))
    observed = live.observe()
    for row in capacity(observed):
        labels = (("gpu_type", row.gpu_type), ("mig_profile", row.mig_profile or ""))
        assert series[("gpufleet_fleet_allocatable_gpus", labels)] == row.allocatable
        assert series[("gpufleet_fleet_allocated_gpus", labels)] == row.allocated
    a100_slices = (("gpu_type", "A100-80GB"), ("mig_profile", "1g.10gb"))
    assert series[("gpufleet_fleet_allocated_gpus", a100_slices)] == 1
    nodes = all_nodes(observed)
    for gpu_type in {n.gpu_type for n in nodes}:
        expected = sum(n.power_w for n in nodes if n.gpu_type == gpu_type)
        got = series[("gpufleet_fleet_power_watts", (("gpu_type", gpu_type),))]
        assert abs(got - expected) < 1e-6
    key = (("kind", "TrainingJob"), ("name", "bert"), ("namespace", "team-a"))
    assert series[("gpufleet_job_energy_joules_total", key)] == 5e4
    assert series[("gpufleet_job_gpu_seconds_total", key)] == 120.0


def test_nothing_before_the_view_is_synced() -> None:
    live = live_fleet(sandbox_nodes(), [], [], synced=False)
    assert _scrape(FleetCollector(live)) == {}


def _queued_and_loose() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """A job of queue `team` on 2 H100s, one naming no queue on 4 and one naming a missing
    queue on 1 (bare pods: the operator always writes a queue, `default` at least)."""
    team = training_job("team-job", gpus=2, queue="team", phase="Running")
    loose = training_job("loose", gpus=4, phase="Running")
    typo = training_job("typo", gpus=1, queue="no-such-queue", phase="Running")
    [team_pod], [loose_pod], [typo_pod] = job_pods(team), job_pods(loose), job_pods(typo)
    del loose_pod["metadata"]["annotations"][names.QUEUE]
    pods = [
        bind(team_pod, "h100-0", "0,1", "H100-80GB"),
        bind(loose_pod, "h100-0", "2,3,4,5", "H100-80GB"),
        bind(typo_pod, "h100-1", "0", "H100-80GB"),
    ]
    return [team, loose, typo], pods


def test_gpus_outside_every_queue() -> None:
    jobs, pods = _queued_and_loose()
    live = live_fleet(sandbox_nodes(), pods, jobs)
    queue = {"metadata": {"name": "team"}, "spec": {"quotas": [{"gpuType": "H100-80GB",
                                                                "nominal": 8}]}}  # fmt: skip
    live.cache.replace_queues([queue])
    rows = {(r.gpu_type, r.mig_profile): r for r in capacity(live.observe())}
    h100 = rows[("H100-80GB", None)]
    assert (h100.allocated, h100.outside_queues) == (7, 5)
    assert rows[("T4", None)].outside_queues == 0
    series = _scrape(FleetCollector(live))
    for row in rows.values():
        labels = (("gpu_type", row.gpu_type), ("mig_profile", row.mig_profile or ""))
        assert series[("gpufleet_fleet_outside_queues_gpus", labels)] == row.outside_queues


def test_no_outside_series_without_queues() -> None:
    jobs, pods = _queued_and_loose()
    live = live_fleet(sandbox_nodes(), pods, jobs)  # queues not watched
    assert all(r.outside_queues is None for r in capacity(live.observe()))
    live.cache.replace_queues([])  # watched, none exists: nothing is promised
    assert all(r.outside_queues is None for r in capacity(live.observe()))
    series = _scrape(FleetCollector(live))
    assert not any(name == "gpufleet_fleet_outside_queues_gpus" for name, _ in series)
