"""The serving simulator driven by a cluster: replicas come from the pods that run.

`LiveServingSim` replays a request trace through a `ServingModel` whose pools have one replica
per pod of the ServingJob that is Running and Ready (kwok marks bound pods Running in the
sandbox), and serves each pool's vLLM metrics on a loopback `/metrics` endpoint for Prometheus
to scrape. Every `poll_s` it lists the job's pods (labels `gpufleet.io/servingjob` and
`gpufleet.io/pool`, the operator's labels) through the `PodLister` it was given (the sandbox
reads them from the Kubernetes API: `gpufleet.sandbox.serving_stand_in.kube_pods`), and a
`RealtimeDriver` applies them and advances the model along the wall clock.

GPU types
---------
Each replica runs at the speed of the GPU type its pod landed on: the scheduler's
`gpufleet.io/gpu-type` annotation (a catalogue name such as `H100-80GB`), turned into a roofline
profile of the served model by `GpuTypeProfiles` (`profiles.py`). A pod without the annotation,
on a MIG slice (`gpufleet.io/mig-instance`), or on a type without a profile runs at its pool's
configured profile; that fallback is logged once per type. When a pod goes away, a replica of
its type is drained.

Time compression
----------------
`time_scale` compresses the *arrival timeline* only: a request at trace second `t` arrives at
model second `t / time_scale`, and the model then runs at wall-clock speed (1 model second = 1
wall second). So with `time_scale=10` an hour of trace plays in six minutes, and everything the
endpoints report is in real, un-scaled units: TTFT and ITL are what a replica would really
take, token and request rates are per wall second (`time_scale` times the trace's rate, since
the same requests arrive in a tenth of the time), and the replica capacity behind them is the
profile's own. That keeps the metrics consistent with each other and with the autoscaler's
capacity profiles, which are per real second; scaling the model's clock instead would make a
replica look `time_scale` times faster to Prometheus and shrink latencies relative to the
cluster's real pod start-up.

Cold start is provided by the cluster, not the model: the model's `cold_start_s` is forced to 0
and its pools start empty, because a replica counts only once its pod is Running and Ready, so
the time the pod takes to get there is the cold start. A pod that is deleted (or stops being
Ready) makes the model drain one replica of its type: it takes no new work and finishes what it
holds.

Standby replicas (vLLM sleep mode level 1) follow the operator's marks: a Running pod marked
asleep (`gpufleet.model.contract.standby`) leaves the serving replicas (its in-flight work
drains) and is kept as an asleep replica that serves nothing; when the mark goes away that
replica wakes and serves again after the model's `wake_s` (the stand-in for weights coming back
from CPU memory), where a new pod counts at once.

Pool names must be the ServingJob's pool names (the `gpufleet.io/pool` label values); the model
is disaggregated, so the job has one prefill and one decode pool.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpufleet.core.autoscaling_types import PoolRole
from gpufleet.lifecycle import StartStop
from gpufleet.model.contract import names, standby
from gpufleet.model.contract.assignment import assigned_type
from gpufleet.model.contract.names import POOL_LABEL, SERVINGJOB_LABEL
from gpufleet.sim.serving.exporter import RealtimeDriver, ServingExporter
from gpufleet.sim.serving.model import ServingConfig, ServingModel
from gpufleet.sim.serving.profiles import GpuTypeProfiles, ReplicaProfile
from gpufleet.sim.serving.trace import Request

__all__ = [
    "LiveServingSim",
    "PodLister",
    "asleep_pods_by_pool",
    "ready_gpu_types_by_pool",
    "ready_pods_by_pool",
]

# The pods (API JSON) matching a label selector; raises when it cannot tell.
PodLister = Callable[[str], Sequence[Mapping[str, Any]]]

logger = logging.getLogger(__name__)


def ready_gpu_types_by_pool(
    pods: Iterable[Mapping[str, Any]], pools: Iterable[str]
) -> dict[str, list[str | None]]:
    """The GPU type of each pod per pool that is Running, Ready, awake and not being deleted.

    Pods are API JSON. The type is the scheduler's `gpufleet.io/gpu-type` annotation; it is None
    when the pod has none, or holds a MIG slice (a fraction of that GPU, not its speed).
    """
    types: dict[str, list[str | None]] = {pool: [] for pool in pools}
    for pod in pods:
        meta = pod.get("metadata") or {}
        pool = (meta.get("labels") or {}).get(POOL_LABEL)
        if pool not in types or meta.get("deletionTimestamp"):
            continue
        status = pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        if status.get("phase") != "Running" or not ready:
            continue
        if standby.is_asleep(pod):
            continue
        annotations = meta.get("annotations") or {}
        holds_slice = bool(annotations.get(names.ASSIGNED_MIG))
        types[pool].append(None if holds_slice else assigned_type(annotations))
    return types


def asleep_pods_by_pool(pods: Iterable[Mapping[str, Any]], pools: Iterable[str]) -> dict[str, int]:
    """Pods per pool that are marked asleep and not being deleted (pods as API JSON)."""
    counts = dict.fromkeys(pools, 0)
    for pod in pods:
        meta = pod.get("metadata") or {}
        pool = (meta.get("labels") or {}).get(POOL_LABEL)
        if pool in counts and not meta.get("deletionTimestamp") and standby.is_asleep(pod):
            counts[pool] += 1
    return counts


def ready_pods_by_pool(pods: Iterable[Mapping[str, Any]], pools: Iterable[str]) -> dict[str, int]:
    """Pods per pool that are Running, Ready and not being deleted (pods as API JSON)."""
    return {pool: len(types) for pool, types in ready_gpu_types_by_pool(pods, pools).items()}


class LiveServingSim(StartStop):
    """A `ServingModel` whose replicas follow a ServingJob's Running pods, with `/metrics`.

    `requests` are in trace seconds; see the module docstring for `time_scale`. The pools'
    profiles in `config` are the fallbacks; `profiles` maps GPU types to replica profiles (the
    default: Llama-8B-class rooflines). `start()` reads the pods once (so the model begins with
    the cluster's replicas), then starts the endpoints, the driver and the pod poller; `stop()`
    stops all three.
    """

    def __init__(
        self,
        list_pods: PodLister,
        namespace: str,
        servingjob: str,
        config: ServingConfig,
        requests: Sequence[Request],
        *,
        time_scale: float = 1.0,
        poll_s: float = 0.5,
        model_name: str = "llama-8b",
        profiles: GpuTypeProfiles | None = None,
    ) -> None:
        if time_scale <= 0 or poll_s <= 0:
            raise ValueError("time_scale and poll_s must be positive")
        self.list_pods = list_pods
        self.namespace = namespace
        self.servingjob = servingjob
        self.time_scale = time_scale
        self.poll_s = poll_s
        # The cluster provides cold start and the initial replicas (module docstring).
        live_config = dataclasses.replace(
            config,
            prefill=dataclasses.replace(config.prefill, initial_replicas=0),
            decode=dataclasses.replace(config.decode, initial_replicas=0),
            cold_start_s=0.0,
        )
        compressed = [dataclasses.replace(r, arrival_s=r.arrival_s / time_scale) for r in requests]
        self.model = ServingModel(live_config, compressed)
        self.pools: dict[str, PoolRole] = {
            live_config.prefill.name: PoolRole.PREFILL,
            live_config.decode.name: PoolRole.DECODE,
        }
        self.profiles = GpuTypeProfiles() if profiles is None else profiles
        self._fallback: dict[str, ReplicaProfile] = {
            live_config.prefill.name: live_config.prefill.profile,
            live_config.decode.name: live_config.decode.profile,
        }
        self.exporter = ServingExporter(self.model, model_name=model_name)
        self._observed: dict[str, list[str | None]] = {pool: [] for pool in self.pools}
        self._asleep: dict[str, int] = dict.fromkeys(self.pools, 0)
        self._driver = RealtimeDriver(
            self.model,
            self.exporter.lock,
            tick_s=poll_s,
            replica_profiles=self.observed_profiles,
            asleep=self.observed_asleep,
        )
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    @property
    def selector(self) -> str:
        """The label selector of the job's pods in all its pools."""
        pools = ",".join(sorted(self.pools))
        return f"{SERVINGJOB_LABEL}={self.servingjob},{POOL_LABEL} in ({pools})"

    @property
    def endpoints(self) -> dict[str, str]:
        """`host:port` of each pool's `/metrics`, by pool (empty before `start`)."""
        return {pool: f"{e.host}:{e.port}" for pool, e in self.exporter.endpoints.items()}

    def scrape_targets(self) -> list[tuple[str, dict[str, str]]]:
        """Scrape targets with gpufleet's label convention (`namespace`, `servingjob`, `pool`)."""
        labels = {"namespace": self.namespace, "servingjob": self.servingjob}
        return [(address, {**labels, "pool": pool}) for pool, address in self.endpoints.items()]

    def observed_replicas(self) -> dict[str, int]:
        """Running and Ready pods per pool at the last poll."""
        return {pool: len(types) for pool, types in self._observed.items()}

    def observed_asleep(self) -> dict[str, int]:
        """Pods marked asleep per pool at the last poll."""
        return dict(self._asleep)

    def observed_gpu_types(self) -> dict[str, list[str | None]]:
        """The GPU type of each Running and Ready pod per pool at the last poll (None: unknown)."""
        return {pool: list(types) for pool, types in self._observed.items()}

    def observed_profiles(self) -> dict[str, list[ReplicaProfile]]:
        """The replica profile of each Running and Ready pod per pool at the last poll."""
        return {
            pool: [self.profiles.resolve(t, self._fallback[pool]) for t in types]
            for pool, types in self._observed.items()
        }

    def model_replicas(self) -> dict[str, int]:
        """The model's current replicas per pool (starting + ready, not draining)."""
        with self.exporter.lock:
            return {pool: self.model.replicas(pool) for pool in self.pools}

    def model_ready(self) -> dict[str, int]:
        """The model's ready (serving) replicas per pool: woken standbys count once awake."""
        with self.exporter.lock:
            return {pool: self.model.ready_replicas(pool) for pool in self.pools}

    def sync(self) -> dict[str, int]:
        """Read the pods once; the driver applies them on its next tick. Returns the counts."""
        pods = self.list_pods(self.selector)
        self._observed = ready_gpu_types_by_pool(pods, self.pools)
        self._asleep = asleep_pods_by_pool(pods, self.pools)
        return self.observed_replicas()

    def start(self) -> None:
        if self._poller is not None:
            return
        self.sync()  # fail loudly here if the API is unreachable; later polls only log
        self._driver.anchor()
        self._driver.step()  # model time 0 with the cluster's replicas
        self.exporter.start()
        self._driver.start()
        self._stop.clear()
        self._poller = threading.Thread(target=self._poll, name="serving-pods", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.sync()
            except Exception as exc:  # the API may blip; keep the last counts and retry
                logger.warning(
                    "listing pods of %s/%s failed: %s", self.namespace, self.servingjob, exc
                )

    def stop(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
            self._poller = None
        self._driver.stop()
        self.exporter.stop()
