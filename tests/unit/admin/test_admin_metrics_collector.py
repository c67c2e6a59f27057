"""The fleet and job series, collected at scrape time from the live view:

- allocatable and allocated whole GPUs and MIG slices per type and profile, equal to what
  GET /fleet reports;
- the estimated power per GPU type, equal to the sum of the fleet's nodes;
- energy and GPU time per job as counters from the jobs' status;
- nothing but the empty families before the view is synced.
"""

from __future__ import annotations

from admin_fakes import bind, job_pods, live_fleet, sandbox_nodes, training_job
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.admin.fleet import all_nodes, capacity
from gpufleet.admin.metrics import FleetCollector


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
