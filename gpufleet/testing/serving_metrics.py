"""Fixed `/metrics` addresses for serving simulators that come and go, for the autoscaler tests.

Prometheus applies a changed target set only after its discovery and scrape managers' update
periods (5 s each in Prometheus 2.x), so pointing it at each new simulator's endpoints costs a
test up to 10 s per replay. `SwitchedServingMetrics` keeps one loopback `/metrics` address per
pool for its whole life, for a Prometheus configured once (`targets()`); `serve(exporter,
labels)` switches what every address exposes to that simulator's pools, with `labels` (the
target labels gpufleet's convention would give its pods: namespace, servingjob) added to every
series, and `serve(None)` exposes no series, so they go stale as when the pods go away. The
series are the simulator's own (`PoolCollector`, read from its model at scrape time).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from gpufleet.lifecycle import StartStop
from gpufleet.sim.serving.exporter import (
    LOOPBACK,
    PoolCollector,
    ServingExporter,
    stop_servers,
)

__all__ = ["SwitchedServingMetrics"]


class SwitchedServingMetrics(StartStop):
    """One `/metrics` address per pool, exposing whichever simulator `serve` last named."""

    def __init__(self, pools: Sequence[str]) -> None:
        self.pools = tuple(pools)
        self.addresses: dict[str, str] = {}
        self._lock = threading.Lock()
        self._serving: dict[str, tuple[Collector, dict[str, str]]] = {}
        self._servers: list[tuple[WSGIServer, threading.Thread]] = []

    def targets(self) -> list[tuple[str, dict[str, str]]]:
        """The scrape targets (for `PrometheusServer`): every address, without labels."""
        return [(self.addresses[pool], {}) for pool in self.pools]

    def serve(
        self, exporter: ServingExporter | None, labels: Mapping[str, str] | None = None
    ) -> None:
        """Expose `exporter`'s pools from now on, each series with `labels` added (None:
        expose nothing)."""
        serving: dict[str, tuple[Collector, dict[str, str]]] = {}
        if exporter is not None:
            for pool in self.pools:
                collector = PoolCollector(exporter.model, pool, exporter.model_name, exporter.lock)
                serving[pool] = (collector, dict(labels or {}))
        with self._lock:
            self._serving = serving

    def current(self, pool: str) -> tuple[Collector, dict[str, str]] | None:
        """What `pool`'s address exposes now: the collector and the labels it adds."""
        with self._lock:
            return self._serving.get(pool)

    def start(self) -> None:
        if self._servers:
            return
        for pool in self.pools:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Switch(self, pool))
            server, thread = start_http_server(0, addr=LOOPBACK, registry=registry)
            self._servers.append((server, thread))
            self.addresses[pool] = f"{LOOPBACK}:{server.server_address[1]}"

    def stop(self) -> None:
        stop_servers(self._servers)
        self.addresses.clear()


class _Switch(Collector):
    """One pool's series of the simulator its owner serves now, with the owner's labels."""

    def __init__(self, owner: SwitchedServingMetrics, pool: str) -> None:
        self.owner = owner
        self.pool = pool

    def collect(self) -> Iterator[Metric]:
        current = self.owner.current(self.pool)
        if current is None:
            return
        collector, labels = current
        for metric in collector.collect():
            metric.samples = [_labelled(sample, labels) for sample in metric.samples]
            yield metric


def _labelled(sample: Sample, labels: Mapping[str, str]) -> Sample:
    return sample._replace(labels={**sample.labels, **labels})
