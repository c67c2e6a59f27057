"""The admin API's live view of the cluster: the scheduler's cache plus the jobs.

Inside `gpufleet operator` the API reads the very cache the scheduler decides from; standalone
(`gpufleet admin`) it fills a cache of its own with the same informers. Either way it builds
the core's input with the scheduler's `ViewBuilder` from the same state (GPUQueues and
namespace labels included), so the fleet it shows and the snapshot a what-if decides on are the
scheduler's. TrainingJobs and ServingJobs come from informers of their own (their status
carries phase, usage and conditions). What the scheduler remembers from cycle to cycle (job
progress, moved gangs' reservations, the workload estimate) a what-if reads through `steps`:
the scheduler's own beside it, what the cluster shows standalone (`gpufleet.admin.steps`).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gpufleet.admin.steps import Standalone, StepsSource
from gpufleet.core.policy import RequeueTimestamp
from gpufleet.model.contract import names
from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.model.gpus import Catalog
from gpufleet.scheduler.attained import AttainedService
from gpufleet.scheduler.binder import list_budgets
from gpufleet.scheduler.cache import CachedState, SchedulerCache
from gpufleet.scheduler.cluster_view import ClusterView, ViewBuilder
from gpufleet.scheduler.decision_view import budget_protected
from gpufleet.scheduler.estimate_store import EstimateStore
from gpufleet.scheduler.informer import Informer, stop_all
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.runtime import cache_informers

Obj = dict[str, Any]
JobKey = tuple[str, str, str]  # (namespace, kind, name)

log = logging.getLogger("gpufleet.admin")

# kind -> plural of the custom resources the API lists.
JOB_KINDS: Mapping[str, str] = {"TrainingJob": "trainingjobs", "ServingJob": "servingjobs"}


def job_key(obj: Mapping[str, Any]) -> JobKey:
    meta = obj["metadata"]
    return (str(meta.get("namespace", "default")), str(obj["kind"]), str(meta["name"]))


class JobStore:
    """TrainingJobs and ServingJobs as the API server shows them, fed by informers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[JobKey, Obj] = {}

    def replace(self, kind: str, items: Iterable[Obj]) -> None:
        with self._lock:
            kept = {k: v for k, v in self._items.items() if k[1] != kind}
            for obj in items:
                obj.setdefault("kind", kind)  # list items carry their kind; be sure
                kept[job_key(obj)] = obj
            self._items = kept

    def event(self, kind: str, event: str, obj: Obj) -> None:
        obj.setdefault("kind", kind)
        with self._lock:
            if event == "DELETED":
                self._items.pop(job_key(obj), None)
            else:
                self._items[job_key(obj)] = obj

    def items(self) -> dict[JobKey, Obj]:
        with self._lock:
            return dict(self._items)


@dataclass(frozen=True)
class Observed:
    """One consistent reading: the cache's state, the scheduler's view of it, and the jobs."""

    state: CachedState
    view: ClusterView
    jobs: Mapping[JobKey, Obj]
    catalog: Catalog
    scheduler_name: str = names.SCHEDULER_NAME  # the scheduler whose pods these are
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


class LiveFleet:
    """Builds `Observed` readings on demand, from a cache and a job store kept live."""

    def __init__(
        self,
        cache: SchedulerCache,
        jobs: JobStore,
        catalog: Catalog,
        informers: Sequence[Informer] = (),
        stop: threading.Event | None = None,
        also_ready: Callable[[], bool] = lambda: True,
        scheduler_name: str = names.SCHEDULER_NAME,
        read_budgets: Callable[[Iterable[str]], list[Obj]] | None = None,
        steps: StepsSource | None = None,
    ) -> None:
        self.cache = cache
        # The PodDisruptionBudgets of some namespaces, read when a what-if needs them (None:
        # none are read, as for a fleet without budgets).
        self.read_budgets = read_budgets
        self.jobs = jobs
        self.catalog = catalog
        self.informers = list(informers)
        self.stop_event = stop or threading.Event()
        self.scheduler_name = scheduler_name  # pods naming it are the scheduler's
        self._also_ready = also_ready
        self._builder = ViewBuilder(catalog, scheduler_name)
        # The service the gangs of queues have received, for the service tier of a what-if.
        self.attained = AttainedService(catalog)
        # The scheduler's stateful steps, for what-ifs (without one: a tracker of its own, the
        # default settings' cap, no estimate and no reservations known).
        self.steps: StepsSource = steps or Standalone(SchedulerSettings(name=scheduler_name))
        self._lock = threading.Lock()

    @classmethod
    def standalone(
        cls,
        api: client.ApiClient,
        catalog: Catalog,
        settings: SchedulerSettings | None = None,
        estimate_namespace: str | None = None,
    ) -> LiveFleet:
        """A cache of its own, fed like the scheduler's, plus the jobs; the pods of the
        scheduler `settings.name` are the scheduler's. A what-if reads the workload estimate
        that scheduler keeps in its ConfigMap in `estimate_namespace` (None: none)."""
        settings = settings or SchedulerSettings()
        stop = threading.Event()
        cache = SchedulerCache()
        jobs = JobStore()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        informers = cache_informers(core, custom, cache, stop) + job_informers(api, jobs, stop)
        budgets = functools.partial(list_budgets, api)
        store = None
        if estimate_namespace is not None and settings.estimate_configmap:
            store = EstimateStore(core, estimate_namespace, settings.estimate_configmap)
        return cls(
            cache, jobs, catalog, informers, stop, scheduler_name=settings.name,
            read_budgets=budgets, steps=Standalone(settings, store),
        )  # fmt: skip

    @classmethod
    def beside(
        cls,
        api: client.ApiClient,
        cache: SchedulerCache,
        catalog: Catalog,
        cache_ready: Callable[[], bool],
        scheduler_name: str = names.SCHEDULER_NAME,
        steps: StepsSource | None = None,
    ) -> LiveFleet:
        """Reading the running scheduler's cache (and, through `steps`, its trackers); only
        the jobs are watched here."""
        stop = threading.Event()
        jobs = JobStore()
        informers = job_informers(api, jobs, stop)
        budgets = functools.partial(list_budgets, api)
        return cls(
            cache, jobs, catalog, informers, stop, cache_ready, scheduler_name, budgets, steps
        )

    def start(self, sync_timeout: float | None = 60.0) -> None:
        """Start the informers and wait until they synced (None: do not wait; `ready()`
        says when they have)."""
        for informer in self.informers:
            informer.start()
        if sync_timeout is None:
            return
        for informer in self.informers:
            if not informer.synced.wait(sync_timeout):
                raise TimeoutError(f"informer {informer.name} did not sync in {sync_timeout}s")

    def stop(self) -> None:
        stop_all(self.informers, self.stop_event)

    def ready(self) -> bool:
        return all(i.synced.is_set() for i in self.informers) and self._also_ready()

    def observe(
        self,
        extra_pods: Sequence[Obj] = (),
        requeue: RequeueTimestamp = RequeueTimestamp.EVICTION,
    ) -> Observed:
        """The cluster now; `extra_pods` are added as if they existed (what-ifs); `requeue`
        is the policy's requeue timestamp (the pending gangs' places in line)."""
        state = self.cache.state()
        jobs = self.jobs.items()
        with self._lock:  # the builder's memo is not thread-safe
            view = self._builder.build_state(state, extra_pods, requeue)
        return Observed(state, view, jobs, self.catalog, self.scheduler_name)


def protected(live: LiveFleet, view: ClusterView) -> ClusterView:
    """`view` with the running gangs a PodDisruptionBudget protects now kept from preemption
    (`decision_view.budget_protected`; every candidate when the budgets cannot be read, as the
    scheduler then evicts none): the scheduler learns them from the evictions a budget
    refused, a what-if reads them."""
    if live.read_budgets is None:
        return view
    gangs = [g.id for g in view.snapshot.running if g.preemptible and g.disruptable]
    namespaces = {k.partition("/")[0] for g in gangs for k in view.running_pods.get(g, ())}
    if not namespaces:
        return view
    try:
        budgets: list[Obj] | None = live.read_budgets(namespaces)
    except Exception as exc:
        log.warning("what-if: cannot read PodDisruptionBudgets, no victim: %s", exc)
        budgets = None
    return budget_protected(view, gangs, budgets)


def job_informers(api: client.ApiClient, jobs: JobStore, stop: threading.Event) -> list[Informer]:
    """Cluster-wide informers of TrainingJobs and ServingJobs into `jobs`."""
    custom = client.CustomObjectsApi(api)
    return [
        Informer(
            plural,
            functools.partial(custom.list_cluster_custom_object, API_GROUP, API_VERSION, plural),
            functools.partial(jobs.replace, kind),
            functools.partial(jobs.event, kind),
            stop,
        )
        for kind, plural in JOB_KINDS.items()
    ]
