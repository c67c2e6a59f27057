"""Wiring of the live scheduler: API client, informers, cache, binder and the loop thread."""

from __future__ import annotations

import functools
import gc
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client, config

from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.model.contract import names
from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.model.gpus import Catalog, load_catalog
from gpufleet.scheduler import prometheus_metrics
from gpufleet.scheduler.apiwriter import ApiWriter
from gpufleet.scheduler.arrivals import ArrivalTracker
from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.estimate_store import EstimateStore
from gpufleet.scheduler.informer import Informer, stop_all
from gpufleet.scheduler.lease_events import lease_events, object_events
from gpufleet.scheduler.loop import Decide, Scheduler
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.mig_request import MigRequester
from gpufleet.scheduler.policy_watch import LivePolicy, PolicyWatch
from gpufleet.scheduler.power_marks import PowerMarks
from gpufleet.scheduler.queue_objects import QueueStatusWriter
from gpufleet.scheduler.throttling import ThrottleRetry

log = logging.getLogger("gpufleet.scheduler")


def api_client(kubeconfig: str | None, pool_size: int = 64) -> client.ApiClient:
    """An API client for the kubeconfig (or in-cluster config), sized for parallel binds,
    waiting out the server's throttling (`throttling.py`)."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = pool_size
    configuration.retries = ThrottleRetry()  # 429 with Retry-After: wait and send again
    return client.ApiClient(configuration)


# Cyclic-GC thresholds for the scheduler's process (CPython's default is (700, 10, 10)).
# Every watch event is a new tree of dicts and lists, and the cache keeps them, so with the
# defaults the collector ran a full pass over 200,000-260,000 objects about once a second
# while 1,000 pods were bound, each pass 170-460 ms with every thread stopped (measured on the
# bind benchmark). Watch objects form no reference cycles; collecting the young generation every
# 20,000 net allocations instead of 700 makes full passes about 30x rarer.
GC_THRESHOLDS = (20_000, 10, 10)


def cache_informers(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    cache: SchedulerCache,
    stop: threading.Event,
    mig_namespace: str = names.MIG_CONFIGMAP_NAMESPACE,
) -> list[Informer]:
    """Informers that keep `cache` fed: nodes, pods, the MIG manager's config map (in
    `mig_namespace`), the GPUQueues and the namespaces' labels (for the queues' namespace
    selectors). The scheduler and a standalone admin API fill their caches with these alike."""
    return [
        Informer("nodes", core.list_node, cache.replace_nodes, cache.node_event, stop),
        Informer(
            "pods",
            core.list_pod_for_all_namespaces,
            cache.replace_pods,
            cache.pod_event,
            stop,
        ),
        Informer(
            "mig-configs",
            functools.partial(core.list_namespaced_config_map, mig_namespace),
            cache.replace_configmaps,
            cache.configmap_event,
            stop,
            field_selector=f"metadata.name={names.MIG_CONFIGMAP_NAME}",
        ),
        Informer(
            "gpuqueues",
            functools.partial(
                custom.list_cluster_custom_object, API_GROUP, API_VERSION, "gpuqueues"
            ),
            cache.replace_queues,
            cache.queue_event,
            stop,
        ),
        Informer(
            "namespaces", core.list_namespace, cache.replace_namespaces, cache.namespace_event, stop
        ),
    ]


class SchedulerRuntime:
    """The scheduler with its informers, on background threads."""

    def __init__(
        self,
        api: client.ApiClient,
        policy: Policy,
        settings: SchedulerSettings,
        catalog: Catalog | None = None,
        decide: Decide = place,
        may_act: Callable[[], bool] = lambda: True,
        policy_watch: PolicyWatch | None = None,
        estimate_namespace: str | None = None,
        lease: tuple[str, str] | None = None,
        pod_tolerations: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.cache = SchedulerCache()
        self.stop_event = threading.Event()
        # Bindings bypass the generated client (see apiwriter.py); same credentials.
        self.binder = Binder(
            self.core, writer=ApiWriter(api.configuration, connections=settings.bind_connections)
        )
        self.scheduler = Scheduler(
            self.cache,
            self.binder,
            MigRequester(self.core, settings.mig_config_map_namespace),
            catalog or load_catalog(),
            policy,
            settings,
            decide=decide,
            may_act=may_act,
            power=PowerMarks(self.core),
            queue_status=QueueStatusWriter(self._patch_queue_status),
            # Healing paused or resumed (heal.py): an Event on the Lease (namespace, name).
            notify=None if lease is None else lease_events(self.core, *lease),
            # A move a PodDisruptionBudget stopped: an Event on the job too (mover.py).
            notify_on=object_events(self.core),
            # The operator's tolerations, when it runs in this process: a move's recreated
            # pods get them (mover.py).
            pod_tolerations=pod_tolerations,
        )
        if estimate_namespace is not None and settings.estimate_configmap:
            # The estimate starts from what the last leader kept (arrivals.py); read at start.
            store = EstimateStore(self.core, estimate_namespace, settings.estimate_configmap)
            self.scheduler.arrivals = ArrivalTracker(
                store=store, save_every_s=settings.estimate_save_s
            )
        self.informers = cache_informers(
            self.core, self.custom, self.cache, self.stop_event, settings.mig_config_map_namespace
        )
        self.policy_watch = policy_watch
        if policy_watch is not None:
            # A policy stored in its ConfigMap replaces the settings' from the next cycle on.
            self.scheduler.policy = policy_watch.current().policy
            policy_watch.on_change(self._use_policy)
            self.informers.append(policy_watch.informer(self.core, self.stop_event))
        self._thread = threading.Thread(
            target=self.scheduler.run, args=(self.stop_event,), name="scheduler", daemon=True
        )

    def _use_policy(self, live: LivePolicy) -> None:
        self.scheduler.policy = live.policy
        self.cache.changed.set()

    def _patch_queue_status(self, name: str, body: dict[str, object]) -> None:
        self.custom.patch_cluster_custom_object_status(
            API_GROUP, API_VERSION, "gpuqueues", name, {"status": body}
        )

    def start(self, sync_timeout: float = 60.0) -> None:
        # Load OR-Tools now (a third of a second) rather than in the first cycle that solves.
        import gpufleet.core.cpsat  # noqa: F401

        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            if not informer.synced.wait(sync_timeout):
                raise TimeoutError(f"informer {informer.name} did not sync in {sync_timeout}s")
        # What is loaded by now (modules, the first lists) lives for the whole process: keep
        # it out of every later collection, and collect less often (see GC_THRESHOLDS).
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        self._thread.start()
        prometheus_metrics.READY.set(1)

    def alive(self) -> bool:
        """Whether the scheduling loop's thread still runs (the liveness probe's question)."""
        return self._thread.is_alive()

    def stop(self) -> None:
        prometheus_metrics.READY.set(0)
        self.stop_event.set()
        self.cache.changed.set()
        self._thread.join(10)
        stop_all(self.informers, self.stop_event)
        self.binder.close()
