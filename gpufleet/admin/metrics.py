"""Fleet and job metrics, computed at scrape time from the same live view the API shows.

A Prometheus collector (no state of its own: every scrape reads the scheduler's cache and the
jobs' status), registered by whoever owns the live view:

- `gpufleet_fleet_allocatable_gpus{gpu_type, mig_profile}` and `..._allocated_gpus`: whole
  GPUs (mig_profile="") and MIG slices per profile on ready nodes, and those held by pods;
- `gpufleet_fleet_outside_queues_gpus{gpu_type, mig_profile}`: of those held, the ones held
  outside every GPUQueue (no queue's status counts them; absent where no GPUQueue exists);
- `gpufleet_fleet_power_watts{gpu_type}`: the power model's estimate of what the GPUs draw;
- `gpufleet_job_energy_joules_total{namespace, kind, name}` and
  `gpufleet_job_gpu_seconds_total{...}`: what each job's status accounts (counters: the
  operator only ever adds to them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.admin.fleet import FleetMemo, all_nodes, capacity, holdings
from gpufleet.admin.live import LiveFleet


class FleetCollector(Collector):
    """Collects the fleet and job series from `live` at each scrape (nothing until synced)."""

    def __init__(self, live: LiveFleet, memo: FleetMemo | None = None) -> None:
        self.live = live
        self.memo = memo or FleetMemo()

    def collect(self) -> Iterator[Metric]:
        allocatable = GaugeMetricFamily(
            "gpufleet_fleet_allocatable_gpus",
            "Whole GPUs (mig_profile empty) or MIG slices of a profile on ready nodes",
            labels=["gpu_type", "mig_profile"],
        )
        allocated = GaugeMetricFamily(
            "gpufleet_fleet_allocated_gpus",
            "Whole GPUs (mig_profile empty) or MIG slices of a profile held by pods",
            labels=["gpu_type", "mig_profile"],
        )
        outside = GaugeMetricFamily(
            "gpufleet_fleet_outside_queues_gpus",
            "Whole GPUs (mig_profile empty) or MIG slices held by pods outside every GPUQueue",
            labels=["gpu_type", "mig_profile"],
        )
        power = GaugeMetricFamily(
            "gpufleet_fleet_power_watts",
            "Estimated draw of the GPUs of a type (power model, pods' power caps)",
            labels=["gpu_type"],
        )
        energy = CounterMetricFamily(
            "gpufleet_job_energy_joules",
            "Estimated energy a job's GPUs used, from its status",
            labels=["namespace", "kind", "name"],
        )
        gpu_time = CounterMetricFamily(
            "gpufleet_job_gpu_seconds",
            "GPU time a job used (a MIG slice counts its share), from its status",
            labels=["namespace", "kind", "name"],
        )
        if self.live.ready():
            observed = self.live.observe()
            held = holdings(observed)
            for row in capacity(observed, held):
                labels = [row.gpu_type, row.mig_profile or ""]
                allocatable.add_metric(labels, row.allocatable)
                allocated.add_metric(labels, row.allocated)
                if row.outside_queues is not None:
                    outside.add_metric(labels, row.outside_queues)
            watts: dict[str, float] = defaultdict(float)
            for node in all_nodes(observed, held, self.memo):
                watts[node.gpu_type] += node.power_w
            for gpu_type, value in sorted(watts.items()):
                power.add_metric([gpu_type], value)
            for (namespace, kind, name), obj in sorted(observed.jobs.items()):
                status = obj.get("status") or {}
                if status.get("estimatedEnergyJoules") is not None:
                    energy.add_metric(
                        [namespace, kind, name], float(status["estimatedEnergyJoules"])
                    )
                if status.get("gpuSeconds") is not None:
                    gpu_time.add_metric([namespace, kind, name], float(status["gpuSeconds"]))
        yield from (allocatable, allocated, outside, power, energy, gpu_time)
