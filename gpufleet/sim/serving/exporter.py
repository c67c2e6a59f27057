"""vLLM-compatible Prometheus `/metrics` for each pool of a `ServingModel` (thin adapter).

One HTTP server per pool, bound to 127.0.0.1 only, like one scrape target per vLLM engine. On
every scrape the collector reads `ServingModel.snapshot(pool)` and renders it with the current
vLLM V1 metric names (reference/serving.md §1.1):

| metric | kind |
|---|---|
| `vllm:num_requests_running`, `vllm:num_requests_waiting` | gauge |
| `vllm:kv_cache_usage_perc` (0-1; replaces the deprecated `vllm:gpu_cache_usage_perc`) | gauge |
| `vllm:prompt_tokens_total`, `vllm:generation_tokens_total` | counter |
| `vllm:request_success_total` | counter |
| `vllm:time_to_first_token_seconds` | histogram |
| `vllm:inter_token_latency_seconds` (not the deprecated `time_per_output_token`) | histogram |
| `vllm:request_queue_time_seconds`, `vllm:request_prefill_time_seconds` (prefill) | histogram |
| `vllm:e2e_request_latency_seconds` (decode pool: requests finished end to end) | histogram |

Every series carries `model_name`, `engine` ("0") and `role` (the pool's role, the label the
PromQL defaults in serving.md §9 select on), plus `pool` (the pool's name).

The model is not thread-safe: whoever advances it must hold `lock` (the exporter takes it for
the duration of one snapshot), e.g. `with exporter.lock: model.advance_to(t)`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gpufleet.sim.serving.model import Histogram, ServingModel
from gpufleet.sim.serving.profiles import ReplicaProfile

__all__ = ["LOOPBACK", "PoolCollector", "PoolEndpoint", "RealtimeDriver", "ServingExporter"]

LOOPBACK = "127.0.0.1"


def _buckets(hist: Histogram) -> list[tuple[str, float]]:
    """Cumulative `(le, count)` pairs including `+Inf`, as Prometheus exposes them."""
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(hist.bounds, hist.counts, strict=False):
        running += count
        out.append((repr(float(bound)), float(running)))
    out.append(("+Inf", float(hist.count)))
    return out


class PoolCollector(Collector):
    """Collects one pool's vLLM metrics from the model at scrape time."""

    def __init__(
        self, model: ServingModel, pool: str, model_name: str, lock: threading.Lock
    ) -> None:
        self.model = model
        self.pool = pool
        self.model_name = model_name
        self.lock = lock

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            snap = self.model.snapshot(self.pool)
        names = ["model_name", "engine", "role", "pool"]
        values = [self.model_name, "0", snap.role.value, self.pool]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=names)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value)
            return c

        def histogram(name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
            h = HistogramMetricFamily(name, doc, labels=names)
            h.add_metric(values, _buckets(hist), sum_value=hist.total)
            return h

        yield gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            snap.num_running,
        )
        yield gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            snap.num_waiting,
        )
        yield gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            snap.kv_cache_usage,
        )
        # CounterMetricFamily appends `_total` to the exposed sample name.
        yield counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", snap.prompt_tokens_total
        )
        yield counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            snap.generation_tokens_total,
        )
        yield counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            snap.request_success_total,
        )
        yield histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            snap.ttft,
        )
        yield histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            snap.itl,
        )
        yield histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            snap.queue_time,
        )
        yield histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            snap.prefill_time,
        )
        yield histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            snap.e2e,
        )


@dataclass(frozen=True, slots=True)
class PoolEndpoint:
    """Where one pool's metrics are served."""

    pool: str
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"


def stop_servers(servers: list[tuple[WSGIServer, threading.Thread]]) -> None:
    """Shut the /metrics servers down, wait for their threads, and forget them."""
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    servers.clear()


class ServingExporter:
    """Serves `/metrics` for every pool of a model on loopback ports (0 = pick a free one)."""

    def __init__(self, model: ServingModel, *, model_name: str = "llama-8b") -> None:
        self.model = model
        self.model_name = model_name
        self.lock = threading.Lock()
        self._servers: list[tuple[WSGIServer, threading.Thread]] = []
        self.endpoints: dict[str, PoolEndpoint] = {}

    def start(self, ports: dict[str, int] | None = None) -> dict[str, PoolEndpoint]:
        """Start one server per pool; returns the endpoints by pool name."""
        ports = ports or {}
        for pool in self.model.pool_names:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(PoolCollector(self.model, pool, self.model_name, self.lock))
            server, thread = start_http_server(ports.get(pool, 0), addr=LOOPBACK, registry=registry)
            self._servers.append((server, thread))
            self.endpoints[pool] = PoolEndpoint(pool, LOOPBACK, int(server.server_address[1]))
        return dict(self.endpoints)

    def stop(self) -> None:
        stop_servers(self._servers)

    def __enter__(self) -> ServingExporter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RealtimeDriver:
    """Advances a model along wall-clock time (times `speed`) so scrapes see it move.

    Each `tick_s` it reads the desired replicas and advances the model, both under the
    exporter's lock. The replicas come either as counts per pool from `replicas` (a demo: a fixed
    mapping; every replica runs at its pool's profile) or as one profile per replica from
    `replica_profiles` (the live sim: the profile of the GPU type each pod landed on), not both;
    `asleep` (the live sim: pods marked asleep per pool) keeps that many standbys asleep.
    `clock` is injectable for tests.
    """

    def __init__(
        self,
        model: ServingModel,
        lock: threading.Lock,
        *,
        speed: float = 1.0,
        tick_s: float = 0.5,
        replicas: Callable[[], Mapping[str, int]] | None = None,
        replica_profiles: Callable[[], Mapping[str, Sequence[ReplicaProfile]]] | None = None,
        asleep: Callable[[], Mapping[str, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if speed <= 0 or tick_s <= 0:
            raise ValueError("speed and tick_s must be positive")
        if replicas is not None and replica_profiles is not None:
            raise ValueError("give replicas or replica_profiles, not both")
        self.model = model
        self.lock = lock
        self.speed = speed
        self.tick_s = tick_s
        self.replicas = replicas
        self.replica_profiles = replica_profiles
        self.asleep = asleep
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._sim0 = 0.0

    def step(self) -> float:
        """One tick: apply the replicas, advance to the current simulated time; returns it."""
        target = self._sim0 + (self.clock() - self._t0) * self.speed
        with self.lock:
            if self.replicas is not None:
                for pool, n in self.replicas().items():
                    if n != self.model.replicas(pool):
                        self.model.set_replicas(pool, n)
            asleep = self.asleep() if self.asleep is not None else {}
            # Standbys whose mark went away wake (ready after the model's wake time) before
            # the awake replicas are matched, so they count among them.
            for pool, n in asleep.items():
                if self.model.asleep(pool) > n:
                    self.model.wake(pool, self.model.asleep(pool) - n)
            if self.replica_profiles is not None:
                for pool, profiles in self.replica_profiles().items():
                    self.model.set_replica_profiles(pool, profiles)  # a no-op when they match
            # A replica marked asleep has left the awake ones above (drained); it is kept as
            # a standby, asleep, serving nothing.
            for pool, n in asleep.items():
                if n > self.model.asleep(pool):
                    self.model.add_asleep(pool, n - self.model.asleep(pool))
            self.model.advance_to(max(target, self.model.now))
            return self.model.now

    def anchor(self) -> None:
        """Tie the current wall-clock time to the model's current simulated time."""
        self._t0 = self.clock()
        self._sim0 = self.model.now

    def start(self) -> None:
        """Anchor and advance the model from a daemon thread until `stop`."""
        self.anchor()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="serving-model", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Past the trace's end the replicas still follow the cluster (an idle pool's replicas,
        # standbys asleep or woken, show in the gauges), so the loop runs until `stop`.
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.tick_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
