"""The prefill/decode autoscaler end to end: operator + scheduler + autoscaler + a real
Prometheus + the serving simulator replaying a burst of the Azure LLM 2023 code trace.

Aspects: a disaggregated ServingJob's pools start at their minimum; the simulator serves the
trace with as many replicas as the job has Running pods (kwok runs the pods the gpufleet
scheduler binds) and exposes vLLM metrics per pool; Prometheus scrapes them; the operator's
autoscaler reads Prometheus, scales both pools up under the burst and back down to the minimum
after it; every decision is visible in the status (`lastScaleReason`) and as a `Scaled` Event,
and the Events form an unbroken chain of replica changes (nothing decided silently). Serving
borrows from training: on a GPU type that training fills, the burst's scale-up preempts a
preemptible TrainingJob gang whole (never a non-preemptible one), and the gang runs again once
the pools shrink after the burst. Standby replicas wake before new ones are created: after a
first burst the pools shrink by putting replicas to sleep (marked asleep, kept Running, serving
nothing in the simulator), and a second burst wakes them before any new pod appears; a woken
standby serves again after its wake time. The pools' Services route to awake replicas only: an
asleep pod's awake condition (its readiness gate) is False, the kubelet stand-in makes it not
Ready, and the kube-controller-manager's EndpointSlice controller lists it as a not-ready
endpoint; once woken, it is a ready endpoint again, no earlier than its wake time after the
wake; the status's readyReplicas counts the awake replicas. An asleep standby lends its GPU:
a preemptible TrainingJob gang runs on the standbys' GPUs (never a non-preemptible one), the
next burst recalls the standbys and the gang is preempted whole before they wake, and it runs
on their GPUs again once they sleep; the invariant checker finds nothing at every step.

Time is compressed so a burst plays out in about half a minute: the trace slice plays four
times as fast, the ServingJob decides every second with a 5 s rate/staleness window and a 5 s
scale-down window, and the operator's policy defaults (window, forecast horizon, burst memory,
feedback half-life) are shortened through `GPUFLEET_AUTOSCALER`. One Prometheus, configured
once per module, scrapes fixed addresses that expose the simulator playing now, so a replay
starts without waiting for Prometheus to apply new targets. The replica profile is the
simulator's Llama-8B on H100; the decode batch in the CRD's capacity profile is small (16)
because the code trace's answers are short (a few dozen tokens), so decode would otherwise
never need a second replica in so short a burst.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client

from gpufleet.model.contract import lending
from gpufleet.model.contract import standby as marks
from gpufleet.model.contract.names import (
    ASSIGNED_GPUS,
    AWAKE_CONDITION,
    POOL_LABEL,
    SERVINGJOB_LABEL,
    TRAININGJOB_LABEL,
    WOKEN_AT,
)
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.operator.serving_children import deployment_name
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.prometheus_server import PrometheusServer
from gpufleet.sandbox.serving_stand_in import kube_pods
from gpufleet.sim.serving.live import LiveServingSim
from gpufleet.sim.serving.model import ServingConfig
from gpufleet.sim.serving.profiles import replica_profile
from gpufleet.sim.serving.trace import load_azure_code_trace
from gpufleet.sim.traces.common import default_data_dir
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for
from gpufleet.testing.serving_metrics import SwitchedServingMetrics

GROUP, VERSION, PLURAL = "gpufleet.io", "v1alpha1", "servingjobs"
TRACE = default_data_dir() / "traces" / "azure-llm-2023-code.csv"
# The slice: 60 s of the trace from second 840, a burst of up to 72k prompt tokens/s that
# falls to a few thousand, then silence. Played 4x faster after a 2 s lead-in at zero load,
# a scrape or two: Prometheus then has the simulator's series before the burst comes.
SLICE_START_S, SLICE_S, TIME_SCALE, LEAD_IN_S = 840.0, 60.0, 4.0, 2.0
# The periods below and in COMPRESSED are those the slice played at 2x was tuned with, halved
# with the replay's time, so a burst sees as many decisions as it did then. The scrape interval
# stays 1 s (a rate window holds 5 scrapes instead of 10): a shorter one is also a shorter
# scrape timeout, and scrapes missed on a loaded machine would read as stale metrics.
DECIDE_S, STALE_S, SCALE_DOWN_WINDOW_S, SCRAPE_S = 1, 5, 5, 1.0
PROFILE = replica_profile("H100-SXM-80GB")
JOB = "coder"
POOLS = ("prefill", "decode")
# Shortened policy defaults (seconds): the test's minute stands for an hour of production.
# The operator-wide autoscaler settings, a whole group as one JSON object.
AUTOSCALER_ENV = "GPUFLEET_AUTOSCALER"
COMPRESSED = {
    "window_s": 15,
    "forecast_horizon_s": 2.5,
    "backlog_drain_s": 2.5,
    "burst_memory_half_life_s": 1.5,
    "feedback_half_life_s": 5,
}
SCALED = re.compile(r"^(prefill|decode): scale (\d+)->(\d+) \((\w+)\)")


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This module's own operator process, started with the compressed policy defaults."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(sandbox.kubeconfig, log, kube.coordination)
    previous = os.environ.get(AUTOSCALER_ENV)
    os.environ[AUTOSCALER_ENV] = json.dumps(COMPRESSED)  # inherited by the child process only
    try:
        proc.start()
    finally:
        if previous is None:
            del os.environ[AUTOSCALER_ENV]
        else:
            os.environ[AUTOSCALER_ENV] = previous
    yield proc
    proc.stop()


@dataclasses.dataclass(frozen=True)
class Scraping:
    """The module's Prometheus and the fixed addresses it scrapes the simulators at."""

    server: PrometheusServer
    metrics: SwitchedServingMetrics

    @property
    def url(self) -> str:
        return self.server.url

    def has_fresh_series(self, ns: str, since: float) -> bool:
        """Whether Prometheus holds a sample of both pools of the job in `ns` scraped after
        `since` (Unix time)."""
        # Either spelling of the name (OpenMetrics scrapes get it underscore-escaped).
        name = '__name__=~"vllm[:_]num_requests_running"'
        query = f'timestamp({{{name},namespace="{ns}",servingjob="{JOB}"}})'
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": query}, timeout=5)
        response.raise_for_status()
        fresh = {
            r["metric"].get("pool")
            for r in response.json()["data"]["result"]
            if float(r["value"][1]) > since
        }
        return fresh == set(POOLS)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraping]:
    """One Prometheus for the module, configured once: it scrapes fixed addresses that expose
    whichever simulator plays now (each burst's own simulator, labelled with its test's
    namespace), so no burst waits for Prometheus to apply new targets (up to 10 s each)."""
    state = tmp_path_factory.mktemp("prometheus")
    with (
        SwitchedServingMetrics(POOLS) as metrics,
        PrometheusServer(state, metrics.targets(), scrape_interval_s=SCRAPE_S) as server,
    ):
        server.wait_scraped(timeout_s=30)
        yield Scraping(server, metrics)


def scheduler_cycles(operator: OperatorProcess) -> float:
    """The scheduling cycles the operator has run (its `gpufleet_scheduler_cycles_total`)."""
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gpufleet_scheduler_cycles_total{")
    )


def servingjob(url: str, gpu_type: str = "H100-80GB", priority: int = 0) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "vllm", "image": "registry.example/vllm:1"}]}}
    pool = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "gpusPerReplica": 1,
        "gpuTypes": [{"name": gpu_type}],
        "template": template,
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ServingJob",
        "metadata": {"name": JOB},
        "spec": {
            "priority": priority,
            "prefill": pool,
            "decode": pool,
            "slo": {"ttftP90Seconds": 0.5, "itlP90Seconds": 0.05},
            "autoscaling": {
                "intervalSeconds": DECIDE_S,
                "prometheus": {"url": url, "staleAfterSeconds": STALE_S},
                "capacity": {
                    "prefillTokensPerSecond": PROFILE.prefill_tokens_per_s,
                    "decodeBatchSize": 16,
                },
                "scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 2},
                "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW_S, "maxStep": 2},
            },
        },
    }


def endpoints(kube: Kube, ns: str, pool: str) -> dict[str, bool]:
    """Pod uid -> ready, as the EndpointSlices of the pool's Service list them."""
    discovery = client.DiscoveryV1Api(kube.core.api_client)
    service = deployment_name(JOB, pool)
    raw: Any = discovery.list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={service}", _preload_content=False
    )
    out: dict[str, bool] = {}
    for item in json.loads(raw.data)["items"]:
        for endpoint in item.get("endpoints") or ():
            uid = (endpoint.get("targetRef") or {}).get("uid")
            if uid:
                out[uid] = bool((endpoint.get("conditions") or {}).get("ready"))
    return out


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in (pod.get("status") or {}).get("conditions") or () if c["type"] == kind]
    return found[0] if found else {}


def running_pods(kube: Kube, ns: str) -> Counter[str]:
    pods = kube.pods(ns, f"{SERVINGJOB_LABEL}={JOB}")
    return Counter(
        p["metadata"]["labels"]["gpufleet.io/pool"]
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    )


def one_standby_per_pool(kube: Kube, ns: str, peak: Counter[str]) -> bool:
    """Polled while a burst plays on a job with one standby per pool: whether both pools grew
    past one Running replica (each pool's peak is kept in `peak`) and are back down to two
    Running replicas each, one of them asleep, as the job's status says too (one desired
    replica, one asleep)."""
    running = running_pods(kube, ns)
    for pool, n in running.items():
        peak[pool] = max(peak[pool], n)
    job: Any = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)
    status = job.get("status") or {}
    live = [
        p
        for p in kube.pods(ns, f"{SERVINGJOB_LABEL}={JOB}")
        if not p["metadata"].get("deletionTimestamp")
    ]
    for pool in POOLS:
        pods = [p for p in live if p["metadata"]["labels"][POOL_LABEL] == pool]
        entry = status.get(pool) or {}
        if not (
            peak[pool] >= 2
            and entry.get("desiredReplicas") == 1
            and entry.get("asleepReplicas") == 1
            and running[pool] == len(pods) == 2
            and sum(marks.is_asleep(p) for p in pods) == 1
        ):
            return False
    return True


def assert_events_tell_the_decisions(
    kube: Kube, ns: str, peak: dict[str, int], reasons: dict[str, set[str]]
) -> None:
    """Every decision is an Event; the status showed the decisions' own messages."""
    events = [e for e in kube.events(ns, JOB) if e.get("reason") == "Scaled"]
    changes = {pool: Counter[tuple[int, int]]() for pool in POOLS}
    for event in events:
        match = SCALED.match(event["message"])
        assert match, f"Scaled event without a policy message: {event['message']!r}"
        changes[match[1]][(int(match[2]), int(match[3]))] += event.get("count") or 1
    for pool in POOLS:
        ups = [c for c in changes[pool] if c[1] > c[0]]
        downs = [c for c in changes[pool] if c[1] < c[0]]
        assert ups and downs, f"{pool}: {changes[pool]}"
        # An unbroken chain from 1 back to 1: every count a pool left, it had entered.
        left = Counter[int]()
        entered = Counter[int]()
        for (a, b), n in changes[pool].items():
            left[a] += n
            entered[b] += n
        assert left == entered, f"{pool}: decisions missing from the Events: {changes[pool]}"
        assert max(b for _, b in changes[pool]) == peak[pool]
        messages = {e["message"] for e in kube.events(ns, JOB)}
        assert reasons[pool] and reasons[pool] <= messages, reasons[pool]


@contextlib.contextmanager
def servingjob_running(kube: Kube, ns: str, body: dict[str, Any]) -> Iterator[None]:
    """The ServingJob `body` created for the block, then deleted and its pods waited out."""
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    try:
        yield
    finally:
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)
        wait_for(lambda: not kube.pods(ns, f"{SERVINGJOB_LABEL}={JOB}"), "pods gone", 60)


@contextlib.contextmanager
def live_sim(kube: Kube, ns: str, prometheus: Scraping) -> Iterator[LiveServingSim]:
    """The serving simulator on the trace slice, serving with the job's Running pods, for the
    block; `prometheus` scrapes it (once at least before the block starts)."""
    requests = load_azure_code_trace(TRACE, start_s=SLICE_START_S, duration_s=SLICE_S)
    # Shift in trace seconds, so the lead-in is LEAD_IN_S of wall time after compression.
    requests = tuple(
        dataclasses.replace(r, arrival_s=r.arrival_s + LEAD_IN_S * TIME_SCALE) for r in requests
    )
    sim = LiveServingSim(
        kube_pods(client.CoreV1Api(kube.core.api_client), ns),
        ns,
        JOB,
        ServingConfig.of(PROFILE),
        requests,
        time_scale=TIME_SCALE,
        poll_s=0.5,
    )
    with sim:
        since = time.time()
        # gpufleet's label convention (the simulator's own targets carry the same labels).
        prometheus.metrics.serve(sim.exporter, {"namespace": ns, "servingjob": JOB})
        try:
            wait_for(
                lambda: prometheus.has_fresh_series(ns, since), "Prometheus scrapes the sim", 20
            )
            yield sim
        finally:
            prometheus.metrics.serve(None)


def test_both_pools_follow_a_code_trace_burst(kube: Kube, ns: str, prometheus: Scraping) -> None:
    started = time.monotonic()
    custom = kube.custom

    def status() -> dict[str, Any]:
        obj: Any = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)
        return dict(obj.get("status") or {})

    with servingjob_running(kube, ns, servingjob(prometheus.url)):
        wait_for(lambda: running_pods(kube, ns) == Counter(prefill=1, decode=1), "pools at min", 60)
        with live_sim(kube, ns, prometheus) as sim:
            peak = {pool: 1 for pool in POOLS}
            peak_running: Counter[str] = Counter()
            reasons: dict[str, set[str]] = {pool: set() for pool in POOLS}
            metrics_seen = False

            def settled() -> bool:
                nonlocal metrics_seen
                st = status()
                for pool in POOLS:
                    entry = st.get(pool) or {}
                    peak[pool] = max(peak[pool], int(entry.get("desiredReplicas") or 0))
                    if entry.get("lastScaleReason"):
                        reasons[pool].add(entry["lastScaleReason"])
                for c in st.get("conditions") or []:
                    if c["type"] == "MetricsAvailable" and c["status"] == "True":
                        metrics_seen = True
                for pool, n in running_pods(kube, ns).items():
                    peak_running[pool] = max(peak_running[pool], n)
                scaled_up = all(peak[p] >= 2 for p in POOLS)
                back = all((st.get(p) or {}).get("desiredReplicas") == 1 for p in POOLS)
                return scaled_up and back

            try:
                wait_for(settled, "both pools up under the burst and back to 1 after it", 100)
            except AssertionError as exc:
                detail = {p: status().get(p) for p in POOLS}
                raise AssertionError(f"{exc}; peaks {peak}; now {detail}") from None
            assert metrics_seen, "the autoscaler never reported fresh metrics"
            assert all(peak_running[p] >= 2 for p in POOLS), peak_running
        assert len(sim.model.outcomes()) > 100  # the trace was served
        assert_events_tell_the_decisions(kube, ns, peak, reasons)
        assert time.monotonic() - started < 120


def test_a_burst_borrows_gpus_from_preemptible_training_only(
    kube: Kube, ns: str, prometheus: Scraping
) -> None:
    # The 16 T4 GPUs: the ServingJob's two replicas (priority 5), a non-preemptible gang of 6
    # and a preemptible gang of 8 (priority 0). The burst's scale-up finds no free T4: the core
    # preempts the preemptible gang whole, never the other; after the burst the pools shrink
    # and the preempted gang runs again on the GPUs they gave back.
    body = servingjob(prometheus.url, gpu_type="T4", priority=5)
    with servingjob_running(kube, ns, body):
        wait_for(lambda: running_pods(kube, ns) == Counter(prefill=1, decode=1), "pools at min", 60)
        keep = training_job("keep", 6, 1, "T4")
        keep["spec"]["preemptible"] = False
        kube.create_job(ns, keep)
        kube.create_job(ns, training_job("lend", 8, 1, "T4"))
        for name in ("keep", "lend"):
            wait_for(lambda n=name: kube.phase(ns, n) == "Running", f"{name} Running", 60)

        def uids(job: str) -> set[str]:
            return {p["metadata"]["uid"] for p in kube.pods(ns, f"{TRAININGJOB_LABEL}={job}")}

        keep_uids, lend_uids = uids("keep"), uids("lend")
        peak: Counter[str] = Counter()
        preempted = False

        def borrowed_and_returned() -> bool:
            nonlocal preempted
            for pool, n in running_pods(kube, ns).items():
                peak[pool] = max(peak[pool], n)
            assert uids("keep") == keep_uids, "the non-preemptible gang was touched"
            phase = kube.phase(ns, "lend")
            preempted = preempted or phase == "Preempted"
            back = running_pods(kube, ns) == Counter(prefill=1, decode=1)
            return preempted and back and phase == "Running" and not uids("lend") & lend_uids

        with live_sim(kube, ns, prometheus):
            try:
                wait_for(
                    borrowed_and_returned,
                    "the burst preempts the preemptible gang, which runs again after it",
                    150,
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}; serving peak {dict(peak)}") from None
        # The serving replicas beyond the minimum ran on GPUs the preempted gang held.
        assert sum(peak.values()) > 2, peak
        assert any(e["reason"] == "Preempted" for e in kube.events(ns, "lend"))
        readmitted = kube.condition(ns, "lend", "Preempted")
        assert readmitted is not None and readmitted["reason"] == "Readmitted", readmitted
        assert kube.phase(ns, "keep") == "Running" and uids("keep") == keep_uids
        # The borrower may be bound again pod by pod (one more scale-up preempts it again):
        # a gang caught between two bindings is read again until whole.
        assert invariants.final_check(kube.core) == []


def test_standby_replicas_wake_before_new_ones_are_created(
    kube: Kube, ns: str, prometheus: Scraping
) -> None:
    # One standby per pool, woken in 2 s. Burst 1 grows both pools; their scale-down puts one
    # replica per pool to sleep (still Running, marked asleep). Burst 2 (the same slice again)
    # wakes the standby; a replica created in burst 2 must come after that wake.
    started = time.monotonic()
    custom = kube.custom
    body = servingjob(prometheus.url)
    body["spec"]["autoscaling"]["standby"] = {
        pool: {"replicas": 1, "wakeSeconds": 2} for pool in POOLS
    }

    def pool_pods() -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {pool: [] for pool in POOLS}
        for pod in kube.pods(ns, f"{SERVINGJOB_LABEL}={JOB}"):
            if not pod["metadata"].get("deletionTimestamp"):
                out[pod["metadata"]["labels"][POOL_LABEL]].append(pod)
        return out

    def status() -> dict[str, Any]:
        obj: Any = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)
        return dict(obj.get("status") or {})

    with servingjob_running(kube, ns, body):
        wait_for(lambda: running_pods(kube, ns) == Counter(prefill=1, decode=1), "pools at min", 60)
        # Burst 1: up, then down into one standby per pool.
        peak = Counter[str]()
        with live_sim(kube, ns, prometheus) as sim:
            try:
                wait_for(
                    lambda: one_standby_per_pool(kube, ns, peak),
                    "burst 1 up, then down into a standby per pool",
                    120,
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}; peak {dict(peak)}; {status()}") from None
            # The simulated servers (which follow the pods within a poll or two) keep the
            # standby asleep: loaded, serving nothing; one replica per pool serves.
            wait_for(
                lambda: (
                    all(sim.model.asleep(p) == 1 for p in POOLS)
                    and sim.model_ready() == {p: 1 for p in POOLS}
                ),
                "the servers sleep",
                10,
            )
        standbys = {
            p: {x["metadata"]["uid"] for x in pods if marks.is_asleep(x)}
            for p, pods in pool_pods().items()
        }

        def routed_to_awake_only() -> bool:
            for pool, pods in pool_pods().items():
                listed = endpoints(kube, ns, pool)
                for pod in pods:
                    uid, asleep = pod["metadata"]["uid"], marks.is_asleep(pod)
                    if listed.get(uid) is not (not asleep):
                        return False
                    if (condition(pod, "Ready").get("status") == "True") is asleep:
                        return False
            return True

        # The standby leaves its Service: not Ready through its gate, a not-ready endpoint;
        # the awake replica is a ready one. The status counts the awake replica only.
        wait_for(routed_to_awake_only, "the Services route to awake replicas only", 30)
        for pool, pods in pool_pods().items():
            for pod in pods:
                awake = condition(pod, AWAKE_CONDITION)
                assert awake.get("status") == ("False" if marks.is_asleep(pod) else "True"), pod
            assert status()[pool]["readyReplicas"] == 1, status()
        known = {x["metadata"]["uid"] for pods in pool_pods().values() for x in pods}
        # Burst 2: the standbys wake first; new pods only after.
        first_woken: dict[str, Any] = {}
        created: dict[str, tuple[str, Any]] = {}  # new pod uid -> (pool, creation time)

        def woke_first() -> bool:
            for pool, pods in pool_pods().items():
                for pod in pods:
                    uid, meta = pod["metadata"]["uid"], pod["metadata"]
                    woken = (meta.get("annotations") or {}).get(WOKEN_AT)
                    if uid in standbys[pool] and woken and not marks.is_asleep(pod):
                        first_woken.setdefault(uid, parse_time(woken))
                    if uid not in known:
                        created.setdefault(uid, (pool, parse_time(meta["creationTimestamp"])))
            return all(standbys[p] <= set(first_woken) for p in POOLS)

        with live_sim(kube, ns, prometheus) as sim:
            wait_for(woke_first, "burst 2 wakes the standbys", 90)
            # A woken standby serves again once its wake time is over, and its Service routes
            # to it again: a ready endpoint, its awake condition set no earlier than 2 s (the
            # pool's wakeSeconds) after the wake.
            wait_for(
                lambda: all(sim.model_ready()[p] >= 2 for p in POOLS), "woken standbys serve", 20
            )
            wait_for(
                lambda: all(
                    all(endpoints(kube, ns, p).get(uid) for uid in standbys[p]) for p in POOLS
                ),
                "woken standbys are ready endpoints again",
                30,
            )
            for pool, pods in pool_pods().items():
                for pod in pods:
                    if pod["metadata"]["uid"] in standbys[pool]:
                        awake = condition(pod, AWAKE_CONDITION)
                        since = parse_time(awake.get("lastTransitionTime"))
                        woken_at = first_woken[pod["metadata"]["uid"]]
                        assert since is not None and (since - woken_at).total_seconds() >= 2, awake
        for uid, (pool, when) in created.items():
            for standby in standbys[pool]:
                assert first_woken[standby] <= when, (
                    f"{pool}: pod {uid} created at {when} before standby {standby} woke "
                    f"at {first_woken[standby]}"
                )
        assert invariants.check(kube.core) == []
        # GPU time and energy of the awake replicas: positive, and at most every pool at its
        # maximum (4 one-GPU replicas each) for the whole run, at the H100's busy power.
        wait_for(lambda: status().get("gpuSeconds"), "usage in the status", 40)
        st, elapsed = status(), time.monotonic() - started
        assert 0 < st["gpuSeconds"] <= 8 * elapsed, (st["gpuSeconds"], elapsed)
        assert 0 < st["estimatedEnergyJoules"] <= st["gpuSeconds"] * 700, st


def test_an_asleep_standby_lends_its_gpu_to_preemptible_training_only(
    kube: Kube, ns: str, prometheus: Scraping, operator: OperatorProcess
) -> None:
    # T4 (16 GPUs), one standby per pool. Burst 1 leaves one awake and one asleep replica per
    # pool; a non-preemptible job then takes the 12 free GPUs. A preemptible 2-worker job runs
    # on the two standbys' GPUs; a non-preemptible 1-GPU job waits (never on a lent GPU).
    # Burst 2 recalls the standbys: the borrower is preempted whole before they wake; after the
    # burst they sleep again and the borrower runs again on their GPUs.
    body = servingjob(prometheus.url, gpu_type="T4", priority=5)
    body["spec"]["autoscaling"]["standby"] = {
        pool: {"replicas": 1, "wakeSeconds": 2} for pool in POOLS
    }

    def serving_pods() -> list[dict[str, Any]]:
        return [
            p
            for p in kube.pods(ns, f"{SERVINGJOB_LABEL}={JOB}")
            if not p["metadata"].get("deletionTimestamp")
        ]

    def standby_gpus() -> dict[str, tuple[str, str]]:
        """Asleep standby key -> (node, GPU)."""
        return {
            f"{ns}/{p['metadata']['name']}": (
                p["spec"]["nodeName"],
                p["metadata"]["annotations"][ASSIGNED_GPUS],
            )
            for p in serving_pods()
            if marks.is_asleep(p)
        }

    def job_pods(job: str) -> list[dict[str, Any]]:
        return kube.pods(ns, f"{TRAININGJOB_LABEL}={job}")

    def where(job: str) -> set[tuple[str, str]]:
        return {
            (p["spec"]["nodeName"], p["metadata"]["annotations"].get(ASSIGNED_GPUS, ""))
            for p in job_pods(job)
            if (p.get("spec") or {}).get("nodeName")
        }

    # Polled while gangs are bound pod by pod: a gang seen between two of its bindings is a
    # violation only once it stays partly bound past the checker's grace.
    settled = invariants.SettledChecker(kube.core)

    def lent_state_is_sound() -> None:
        """What must hold at every moment: `keep` never bound; every pod borrowing from a
        serving replica borrows from one that is asleep; no violation."""
        assert not where("keep"), "the non-preemptible job was placed"
        asleep = {f"{ns}/{p['metadata']['name']}" for p in serving_pods() if marks.is_asleep(p)}
        serving = {f"{ns}/{p['metadata']['name']}" for p in serving_pods()}
        for p in job_pods("lend"):
            for lender in lending.borrowed_from(p):
                assert lender not in serving or lender in asleep, (
                    f"{p['metadata']['name']} borrows from the awake {lender}"
                )
        assert settled.check() == []

    with servingjob_running(kube, ns, body):
        wait_for(lambda: running_pods(kube, ns) == Counter(prefill=1, decode=1), "pools at min", 60)
        peak = Counter[str]()
        with live_sim(kube, ns, prometheus):
            wait_for(
                lambda: one_standby_per_pool(kube, ns, peak),
                "burst 1 up, then down into a standby per pool",
                120,
            )
        fill = training_job("fill", 12, 1, "T4")
        fill["spec"]["preemptible"] = False
        kube.create_job(ns, fill)
        wait_for(lambda: kube.phase(ns, "fill") == "Running", "fill Running", 60)
        keep = training_job("keep", 1, 1, "T4")
        keep["spec"]["preemptible"] = False
        kube.create_job(ns, keep)
        kube.create_job(ns, training_job("lend", 2, 1, "T4"))
        # The borrower runs on exactly the standbys' GPUs; each pod names its standby, and
        # each standby is marked lent to the gang.
        wait_for(lambda: kube.phase(ns, "lend") == "Running", "lend Running on lent GPUs", 60)
        lent = standby_gpus()
        assert where("lend") == set(lent.values()), (where("lend"), lent)
        for p in job_pods("lend"):
            (lender,) = lending.borrowed_from(p)
            gpu = (p["spec"]["nodeName"], p["metadata"]["annotations"][ASSIGNED_GPUS])
            assert lent[lender] == gpu
        wait_for(
            lambda: all(
                lending.lent_to(p) == f"{ns}/lend" for p in serving_pods() if marks.is_asleep(p)
            ),
            "standbys marked lent",
            20,
        )
        lend_uids = {p["metadata"]["uid"] for p in job_pods("lend")}
        # Two more scheduling cycles, one at least wholly after the borrower runs: keep still
        # waits, nothing is over-booked.
        cycles = scheduler_cycles(operator)
        wait_for(lambda: scheduler_cycles(operator) >= cycles + 2, "two scheduler cycles", 20)
        lent_state_is_sound()
        assert kube.phase(ns, "keep") != "Running"

        # Burst 2: the standbys are recalled, the borrower goes whole, then they wake.
        woken: set[str] = set()
        preempted = False

        def woken_after_the_borrower_left() -> bool:
            nonlocal preempted
            lent_state_is_sound()
            preempted = preempted or kube.phase(ns, "lend") == "Preempted"
            live_lend = {p["metadata"]["uid"] for p in job_pods("lend")}
            for key in lent:
                pod = next(
                    (p for p in serving_pods() if f"{ns}/{p['metadata']['name']}" == key), None
                )
                if pod is not None and not marks.is_asleep(pod):
                    assert not live_lend & lend_uids, "a standby woke while its borrower lived"
                    woken.add(key)
            return woken == set(lent)

        with live_sim(kube, ns, prometheus):
            wait_for(woken_after_the_borrower_left, "burst 2 recalls and wakes the standbys", 120)
            assert preempted or any(e["reason"] == "Preempted" for e in kube.events(ns, "lend"))

            # After the burst the pools sleep again and the borrower runs again on the
            # standbys' GPUs (new pods).
            def lent_again() -> bool:
                lent_state_is_sound()
                again = standby_gpus()
                return (
                    kube.phase(ns, "lend") == "Running"
                    and len(again) == 2
                    and where("lend") == set(again.values())
                    and not {p["metadata"]["uid"] for p in job_pods("lend")} & lend_uids
                )

            wait_for(lent_again, "the borrower runs again on the standbys after burst 2", 150)
        readmitted = kube.condition(ns, "lend", "Preempted")
        assert readmitted is not None and readmitted["reason"] == "Readmitted", readmitted
        assert kube.phase(ns, "fill") == "Running" and kube.phase(ns, "keep") != "Running"
        lent_state_is_sound()
