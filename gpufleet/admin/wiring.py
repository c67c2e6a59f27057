"""Building the admin API's parts from an API client: its context, the view beside a running
scheduler, the policy ConfigMap's watch, and the label that routes the admin Service.

No web framework is imported here: the operator builds the view and the fleet metrics whether
or not it serves the API, and imports the server (`gpufleet.admin.server`) only when it does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpufleet import kubepool
from gpufleet.admin.auth import CachedReviewer, KubeReviewer, RateLimiter
from gpufleet.admin.context import AdminContext
from gpufleet.admin.fleet import FleetMemo
from gpufleet.admin.live import LiveFleet
from gpufleet.admin.nodes import NodeActions
from gpufleet.admin.policy import PolicyStore, parser
from gpufleet.admin.steps import BesideScheduler
from gpufleet.model.gpus import Catalog, load_catalog
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.policy_watch import LivePolicy, PolicyWatch
from gpufleet.scheduler.runtime import SchedulerRuntime
from gpufleet.settings import AdminSettings, LeaseSettings, PlacementSettings

log = logging.getLogger("gpufleet.admin")


def policy_watch(settings: AdminSettings, placement: PlacementSettings) -> PolicyWatch:
    """The watch of the policy ConfigMap over the `placement` settings (its informer is
    started by whoever owns it: the scheduler's runtime, or a standalone API)."""
    base = LivePolicy(placement.preset.value, placement.policy())
    return PolicyWatch(base, parser(placement), settings.namespace, settings.policy_configmap)


@dataclass
class AdminView:
    """The admin API's view beside a running scheduler: its cache, plus the jobs."""

    live: LiveFleet
    memo: FleetMemo

    def start(self) -> None:
        self.live.start(sync_timeout=None)

    def stop(self) -> None:
        self.live.stop()


def admin_view(api: client.ApiClient, scheduler: SchedulerRuntime) -> AdminView:
    """The view of the scheduler's own cache; ready once the scheduler's informers are."""
    informers = scheduler.informers
    views = scheduler.scheduler.views
    live = LiveFleet.beside(
        api,
        scheduler.cache,
        views.catalog,
        lambda: all(i.synced.is_set() for i in informers),
        views.scheduler_name,
        BesideScheduler(scheduler.scheduler),  # its trackers, for what-ifs (read only)
    )
    return AdminView(live, FleetMemo())


def build_context(
    api: client.ApiClient,
    settings: AdminSettings,
    live: LiveFleet | None = None,
    catalog: Catalog | None = None,
    placement: PlacementSettings | None = None,
    policy: PolicyWatch | None = None,
    scheduler: SchedulerSettings | None = None,
    lease: LeaseSettings | None = None,
) -> AdminContext:
    """The context of an API talking to the cluster of `api`. Without `live`, with informers
    of its own (started by the app's lifespan), the policy ConfigMap's among them, counting the
    pods of the scheduler `scheduler.name` as the scheduler's and reading the workload estimate
    it keeps in the `lease` namespace; inside the operator, the scheduler's view (which knows
    its name and its trackers) and policy watch are passed in."""
    owns = live is None
    watch = policy or policy_watch(settings, placement or PlacementSettings())
    if live is None:
        live = LiveFleet.standalone(
            api,
            catalog or load_catalog(),
            scheduler or SchedulerSettings(),
            (lease or LeaseSettings()).namespace,
        )
        live.informers.append(watch.informer(client.CoreV1Api(api), live.stop_event))
    return AdminContext(
        settings=settings,
        live=live,
        reviewer=CachedReviewer(KubeReviewer(api), settings.token_cache_ttl_s),
        limiter=RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst),
        nodes=NodeActions(api, live, settings.drain_timeout_s),
        policy=watch,
        policy_store=PolicyStore(api, settings.namespace, settings.policy_configmap),
        owns_live=owns,
    )


# The label of the pod whose process serves the admin API: the chart's admin Service selects it.
SERVING_LABEL = "gpufleet.io/admin-api"


class ServingLabel:
    """Marks this process's pod as the one serving the admin API (only the Lease holder does),
    so that the admin Service routes there and not to a standby. Without a pod (outside a
    cluster) it does nothing; a failed write is logged, and the next start writes it again."""

    def __init__(self, api: client.ApiClient, settings: AdminSettings) -> None:
        self.core = client.CoreV1Api(api)
        self.pod = settings.pod_name
        self.namespace = settings.pod_namespace or settings.namespace

    def mark(self, serving: bool) -> None:
        if not self.pod:
            return
        body: Any = {"metadata": {"labels": {SERVING_LABEL: "serving" if serving else None}}}
        try:
            kubepool.release(
                self.core.patch_namespaced_pod(
                    self.pod, self.namespace, body, _preload_content=False
                )
            )
        except (ApiException, HTTPError, OSError) as exc:
            log.warning("cannot label pod %s/%s: %s", self.namespace, self.pod, exc)
