"""The Prometheus metrics adapter against a real Prometheus scraping the serving simulator.

Aspects under test: rates, gauges, latency quantiles and ready replicas read through Prometheus
agree with the serving model behind the exporter; series an engine does not export are `None`
(and a selector matching nothing gives an all-`None` sample at `now`); engines exposing the
official `vllm:` names (classic text format) and the underscore-escaped names (OpenMetrics from
prometheus_client) both work; samples older than `stale_after_s` count as missing; a stopped
exporter's last sample time is kept, so the sample goes stale; an unreachable or silent
Prometheus and a bad selector raise `MetricsUnavailable` with a clear message; the Prometheus
server wrapper keeps its running config when a reload is refused, starts again in the same
directory without the earlier run's series, and names the package to install when the binary
is missing; only Running, Ready, not-deleting pods count as replicas;
the live simulator's replicas follow a ServingJob's Running pods in the sandbox cluster, and
its metrics reach the adapter through Prometheus (reloaded with the simulator's targets).

Only the last test needs the sandbox; the others use a Prometheus of their own (module fixture,
scraping every second) and no cluster.
"""

from __future__ import annotations

import bisect
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from gpufleet.autoscaler.prometheus import MetricsUnavailable, PrometheusMetrics, default_selector
from gpufleet.core.autoscaling_types import LatencyQuantiles, MetricsSample, PoolRole
from gpufleet.model.contract.names import POOL_LABEL, SERVINGJOB_LABEL
from gpufleet.operator.podtemplate import GPU_TOLERATIONS
from gpufleet.sandbox.processes import free_port
from gpufleet.sandbox.prometheus_server import PrometheusNotFound, PrometheusServer
from gpufleet.sandbox.serving_stand_in import kube_pods
from gpufleet.sim.serving import ServingConfig, ServingModel, replica_profile
from gpufleet.sim.serving.exporter import RealtimeDriver, ServingExporter
from gpufleet.sim.serving.live import LiveServingSim, ready_pods_by_pool
from gpufleet.sim.serving.model import ITL_BUCKETS, TTFT_BUCKETS
from gpufleet.sim.serving.trace import Request
from gpufleet.testing.operator import Kube, wait_for

T = TypeVar("T")

NS, JOB = "team-a", "chat"
SELECTOR = default_selector(NS, JOB)
RATE_WINDOW_S = 10  # ten 1 s scrapes: short enough for a fast test, long enough for rate()
STALE_S = 15.0
PROFILE = replica_profile("H100-SXM-80GB")
# Evenly spaced arrivals (no Poisson noise): 20 requests/s, 1000 prompt and 50 output tokens.
ARRIVAL_RATE, PROMPT, OUTPUT = 20.0, 1000, 50
# Rates through Prometheus: rate() extrapolates to the window edges from 1 s scrapes of
# counters the driver advances in 0.5 s ticks, i.e. +-1 tick of ~10 s of counts (5 %); 10 %
# leaves room for scrape jitter on a loaded machine.
RATE_TOLERANCE = 0.10
# The partial engine's prompt-token counter grows by exactly this per second.
PARTIAL_PROMPT_RATE = 500.0


def within(value: float | None, expected: float, tolerance: float = RATE_TOLERANCE) -> bool:
    return value is not None and abs(value - expected) <= tolerance * expected


def poll(check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
    return wait_for(check, what, timeout)


# --- a minimal engine: some vLLM series, classic text format (official colon names) ---------


class PartialEngine(Collector):
    """Exports only the running/waiting gauges and the prompt-token counter, as an engine
    that lacks the rest would; served in the classic text format, so names keep their colon."""

    def __init__(self, running: float, waiting: float) -> None:
        self.running = running
        self.waiting = waiting
        self.t0 = time.monotonic()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                del args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def collect(self) -> Iterator[Metric]:
        labels = ["model_name", "engine"]
        for name, value in (
            ("vllm:num_requests_running", self.running),
            ("vllm:num_requests_waiting", self.waiting),
        ):
            gauge = GaugeMetricFamily(name, name, labels=labels)
            gauge.add_metric(["llama-8b", "0"], value)
            yield gauge
        counter = CounterMetricFamily("vllm:prompt_tokens", "prompt tokens", labels=labels)
        counter.add_metric(["llama-8b", "0"], PARTIAL_PROMPT_RATE * (time.monotonic() - self.t0))
        yield counter

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


# --- fixtures -------------------------------------------------------------------------------


class Setup:
    def __init__(self, model: ServingModel, exporter: ServingExporter, prom: PrometheusServer):
        self.model = model
        self.exporter = exporter
        self.prom = prom


def labels(pool: str) -> dict[str, str]:
    return {"namespace": NS, "servingjob": JOB, "pool": pool}


@pytest.fixture(scope="module")
def partial_engines() -> Iterator[dict[str, PartialEngine]]:
    engines = {
        "partial-a": PartialEngine(running=3, waiting=1),
        "partial-b": PartialEngine(running=4, waiting=0),
        "doomed": PartialEngine(running=1, waiting=0),
    }
    yield engines
    for engine in engines.values():
        engine.stop()


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory, partial_engines: dict[str, PartialEngine]
) -> Iterator[Setup]:
    """A loaded P/D model behind its exporter, partial engines, and Prometheus scraping all."""
    n = int(ARRIVAL_RATE * 600)
    requests = [Request(i, i / ARRIVAL_RATE, PROMPT, OUTPUT) for i in range(n)]
    config = ServingConfig.of(PROFILE, cold_start_s=0.0)
    model = ServingModel(config, requests)
    exporter = ServingExporter(model)
    endpoints = exporter.start()
    driver = RealtimeDriver(model, exporter.lock, tick_s=0.5)
    driver.start()
    targets = [(f"{e.host}:{e.port}", labels(pool)) for pool, e in endpoints.items()]
    # Two engines of one pool "partial", and one engine the staleness test stops.
    targets += [(partial_engines[k].address, labels("partial")) for k in ("partial-a", "partial-b")]
    targets.append((partial_engines["doomed"].address, labels("doomed")))
    prom = PrometheusServer(tmp_path_factory.mktemp("prometheus"), targets, scrape_interval_s=1)
    try:
        prom.start()
        prom.wait_scraped(timeout_s=30)
        with exporter.lock:  # open model-side intervals that match the rate window
            for pool in endpoints:
                model.sample(pool)
        # rate() needs two scrapes inside its window; wait for a full window of them.
        time.sleep(RATE_WINDOW_S)
        yield Setup(model, exporter, prom)
    finally:
        prom.stop()
        driver.stop()
        exporter.stop()


@pytest.fixture
def metrics(setup: Setup) -> Iterator[PrometheusMetrics]:
    with PrometheusMetrics(setup.prom.url, rate_window_s=RATE_WINDOW_S) as m:
        yield m


def bucket(value: float, bounds: tuple[float, ...]) -> int:
    return bisect.bisect_left(bounds, value)


def assert_quantiles_match(
    got: LatencyQuantiles | None, want: LatencyQuantiles | None, bounds: tuple[float, ...]
) -> None:
    """Prometheus only knows bucket counts and interpolates inside the bucket holding the
    quantile, and its window is not exactly the model's interval: equal up to one bucket."""
    assert got is not None and want is not None
    assert 0 < got.p50 <= got.p90 <= got.p99
    for q in (0.5, 0.9, 0.99):
        assert abs(bucket(got.at(q), bounds) - bucket(want.at(q), bounds)) <= 1, (q, got, want)


# --- against the model ----------------------------------------------------------------------


def test_prefill_sample_agrees_with_the_model(setup: Setup, metrics: PrometheusMetrics) -> None:
    now = time.time()
    got = metrics.sample(SELECTOR, "prefill", PoolRole.PREFILL, now, STALE_S)
    with setup.exporter.lock:
        want = setup.model.sample("prefill")  # since the fixture opened the interval
    # Every prefill completion produces the first token: requests and generated tokens match.
    assert within(got.request_rate, ARRIVAL_RATE), got
    assert within(got.prompt_token_rate, ARRIVAL_RATE * PROMPT), got
    assert within(got.generation_token_rate, ARRIVAL_RATE), got
    assert_quantiles_match(got.ttft, want.ttft, TTFT_BUCKETS)
    assert got.itl is None  # not a prefill signal: not queried
    assert got.num_waiting is not None and got.num_running is not None
    assert got.kv_cache_usage is not None and 0 <= got.kv_cache_usage <= 1
    # The simulator serves a whole pool from one endpoint: one reporting target.
    assert got.ready_replicas == 1
    # The newest sample is from the last scrape, at most an interval (plus jitter) old.
    assert now - 3 < got.timestamp <= now


def test_decode_sample_agrees_with_the_model(setup: Setup, metrics: PrometheusMetrics) -> None:
    now = time.time()
    got = metrics.sample(SELECTOR, "decode", PoolRole.DECODE, now, STALE_S)
    with setup.exporter.lock:
        want = setup.model.sample("decode")
    assert within(got.request_rate, ARRIVAL_RATE), got
    # Decode generates every token but the first (which prefill made).
    assert within(got.generation_token_rate, ARRIVAL_RATE * (OUTPUT - 1)), got
    assert within(got.prompt_token_rate, ARRIVAL_RATE * PROMPT), got  # KV received
    assert_quantiles_match(got.itl, want.itl, ITL_BUCKETS)
    assert got.ttft is None
    assert got.num_running is not None and got.num_running > 0
    assert got.ready_replicas == 1
    assert now - 3 < got.timestamp <= now


# --- missing and stale data -----------------------------------------------------------------


def test_series_an_engine_does_not_export_are_none(metrics: PrometheusMetrics) -> None:
    got = metrics.sample(SELECTOR, "partial", PoolRole.UNIFIED, time.time(), STALE_S)
    assert got.num_running == 3 + 4 and got.num_waiting == 1 + 0  # summed over engines
    assert got.ready_replicas == 2
    # Official colon names (classic text format) are read as well as the escaped ones.
    assert within(got.prompt_token_rate, 2 * PARTIAL_PROMPT_RATE), got
    assert got.request_rate is None and got.generation_token_rate is None
    assert got.ttft is None and got.itl is None and got.kv_cache_usage is None


def test_a_selector_matching_nothing_gives_an_all_none_sample(metrics: PrometheusMetrics) -> None:
    now = time.time()
    got = metrics.sample(SELECTOR, "no-such-pool", PoolRole.DECODE, now, STALE_S)
    assert got == MetricsSample(timestamp=now)
    other_job = default_selector(NS, "other")
    assert metrics.sample(other_job, "decode", PoolRole.DECODE, now, STALE_S).num_running is None


def test_samples_older_than_stale_after_count_as_missing(
    setup: Setup, metrics: PrometheusMetrics
) -> None:
    # Asked about a later instant, the live series' newest samples are older than the limit:
    # Prometheus would still return them (5 min lookback), the adapter must not.
    later = time.time() + 3 * STALE_S
    got = metrics.sample(SELECTOR, "decode", PoolRole.DECODE, later, STALE_S)
    assert got.num_running is None and got.generation_token_rate is None and got.itl is None
    assert got.ready_replicas is None
    assert later - got.timestamp > STALE_S  # the age is visible to the policy


def test_a_stopped_exporter_keeps_its_last_time_and_goes_stale(
    partial_engines: dict[str, PartialEngine], metrics: PrometheusMetrics
) -> None:
    stale_s = 3.0
    before = metrics.sample(SELECTOR, "doomed", PoolRole.UNIFIED, time.time(), stale_s)
    assert before.num_running == 1
    partial_engines["doomed"].stop()

    def gone() -> MetricsSample | None:
        s = metrics.sample(SELECTOR, "doomed", PoolRole.UNIFIED, time.time(), stale_s)
        return s if s.num_running is None else None

    # The next failed scrape writes staleness markers: the series vanish at once.
    last = poll(gone, "the stopped engine's series to disappear", timeout=10)
    assert last.ready_replicas is None and last.prompt_token_rate is None
    time.sleep(max(0.0, last.timestamp + stale_s + 0.5 - time.time()))
    now = time.time()
    later = metrics.sample(SELECTOR, "doomed", PoolRole.UNIFIED, now, stale_s)
    assert later.timestamp == pytest.approx(last.timestamp, abs=1.0)
    assert now - later.timestamp > stale_s
    assert later == MetricsSample(timestamp=later.timestamp)


# --- failures -------------------------------------------------------------------------------


def test_unreachable_prometheus_raises_metrics_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with PrometheusMetrics(url) as metrics, pytest.raises(MetricsUnavailable) as info:
        metrics.sample(SELECTOR, "decode", PoolRole.DECODE, time.time(), STALE_S)
    assert str(info.value).startswith(f"Prometheus at {url}: cannot connect")
    assert "refused" in str(info.value).lower()


def test_a_silent_server_times_out_with_metrics_unavailable() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepts connections (backlog) but never answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with PrometheusMetrics(url, timeout_s=0.5) as metrics:
            started = time.monotonic()
            with pytest.raises(MetricsUnavailable, match=r"no answer within 0\.5 s"):
                metrics.sample(SELECTOR, "decode", PoolRole.DECODE, time.time(), STALE_S)
            assert time.monotonic() - started < 3


def test_a_bad_selector_names_the_promql_error(metrics: PrometheusMetrics) -> None:
    with pytest.raises(MetricsUnavailable) as info:
        metrics.sample('namespace="team-a",servingjob=', "decode", PoolRole.DECODE, time.time(), 60)
    message = str(info.value)
    assert "HTTP 400, bad_data" in message and "parse error" in message, message
    assert 'selector {namespace="team-a",servingjob=,pool="decode"}' in message


# --- the Prometheus server wrapper -----------------------------------------------------------


def test_a_refused_reload_keeps_the_running_config(setup: Setup) -> None:
    before = list(setup.prom.targets)
    with pytest.raises(RuntimeError, match=r"refused the new config.*not a label"):
        setup.prom.reload([("127.0.0.1:1", {"not a label": "x"})])
    assert setup.prom.targets == before
    assert setup.prom.config_path.read_text().count("targets:") == len(before)
    # Still scraping what it was.
    assert len(setup.prom.active_targets()) == len(before)


def test_a_restarted_server_starts_without_the_last_runs_series(tmp_path: Path) -> None:
    # The sandbox restarts its Prometheus in the same directory; series of the previous run
    # (same labels) must not read as fresh samples of the new one.
    def running(prom: PrometheusServer) -> float | None:
        with PrometheusMetrics(prom.url, rate_window_s=RATE_WINDOW_S) as m:
            return m.sample(SELECTOR, "again", PoolRole.DECODE, time.time(), STALE_S).num_running

    engine = PartialEngine(running=5, waiting=0)
    try:
        target = [(engine.address, labels("again"))]
        with PrometheusServer(tmp_path, target, scrape_interval_s=1) as first:
            poll(lambda: running(first) == 5, "the first run's series")
    finally:
        engine.stop()
    with PrometheusServer(tmp_path, [], scrape_interval_s=1) as second:
        assert running(second) is None


def test_a_missing_prometheus_binary_says_how_to_install_it(tmp_path: Path) -> None:
    server = PrometheusServer(tmp_path, binary="prometheus-not-installed-here")
    with pytest.raises(PrometheusNotFound, match="apt-get install prometheus"):
        server.start()


# --- the live simulator in the sandbox cluster ----------------------------------------------


def pod(name: str, pool: str) -> Any:  # a manifest; the client's stubs want a V1Pod
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {SERVINGJOB_LABEL: JOB, POOL_LABEL: pool}},
        "spec": {
            "containers": [{"name": "engine", "image": "registry.example/vllm:1"}],
            # The sandbox's nodes carry the GPU Operator's taint.
            "tolerations": list(GPU_TOLERATIONS),
        },
    }


def api_pod(pool: str | None, phase: str, ready: bool, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {} if pool is None else {POOL_LABEL: pool}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    condition = {"type": "Ready", "status": str(ready)}
    return {"metadata": meta, "status": {"phase": phase, "conditions": [condition]}}


def test_only_running_ready_pods_not_being_deleted_count_as_replicas() -> None:
    pods = [
        api_pod("prefill", "Running", True),
        api_pod("prefill", "Running", True),
        api_pod("prefill", "Running", True, deleting=True),  # draining
        api_pod("prefill", "Running", False),  # not Ready yet
        api_pod("decode", "Pending", False),
        api_pod("decode", "Running", True),
        api_pod("other", "Running", True),  # a pool the model does not have
        api_pod(None, "Running", True),
    ]
    assert ready_pods_by_pool(pods, ["prefill", "decode"]) == {"prefill": 2, "decode": 1}


def test_live_sim_replicas_follow_the_running_pods(
    kube: Kube, setup: Setup, metrics: PrometheusMetrics
) -> None:
    namespace = f"live-sim-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(namespace)
    requests = [Request(i, i * 0.5, 500, 20) for i in range(2000)]  # 2/s of trace, x10 -> 20/s
    config = ServingConfig.of(PROFILE)
    try:
        with LiveServingSim(
            kube_pods(kube.core, namespace),
            namespace,
            JOB,
            config,
            requests,
            time_scale=10,
            poll_s=0.2,
        ) as sim:
            assert sim.model_replicas() == {"prefill": 0, "decode": 0}
            assert sim.model.config.cold_start_s == 0  # the cluster provides the cold start
            assert math.isclose(sim.model.last_arrival_s, 1999 * 0.5 / 10)
            for name, pool in (("p-0", "prefill"), ("p-1", "prefill"), ("d-0", "decode")):
                kube.core.create_namespaced_pod(namespace, pod(name, pool))
            # A pod of another job does not count.
            other = pod("x-0", "prefill")
            other["metadata"]["labels"][SERVINGJOB_LABEL] = "other"
            kube.core.create_namespaced_pod(namespace, other)
            want = {"prefill": 2, "decode": 1}
            poll(lambda: sim.model_replicas() == want or None, f"model replicas {want}", 60)
            assert sim.observed_replicas() == want

            # The whole chain: Prometheus (reloaded with the sim's targets) sees the pool.
            setup.prom.reload([*setup.prom.targets, *sim.scrape_targets()])
            setup.prom.wait_scraped([address for address, _ in sim.scrape_targets()])
            selector = default_selector(namespace, JOB)

            def serving() -> MetricsSample | None:
                got = metrics.sample(selector, "prefill", PoolRole.PREFILL, time.time(), STALE_S)
                return got if (got.prompt_token_rate or 0) > 0 else None

            got = poll(serving, "prompt tokens flowing through the sim's prefill pool", 20)
            assert got.ready_replicas == 1 and got.ttft is not None

            kube.core.delete_namespaced_pod("p-1", namespace, grace_period_seconds=0)
            want = {"prefill": 1, "decode": 1}
            poll(lambda: sim.model_replicas() == want or None, f"model replicas {want}", 30)
    finally:
        kube.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        kube.core.delete_namespace(namespace)
