"""Serving the admin API with uvicorn: standalone (`gpufleet admin`) or on a thread beside the
operator, and building its context from an API client.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY
from urllib3.exceptions import HTTPError

from gpufleet.admin.auth import CachedReviewer, KubeReviewer, RateLimiter
from gpufleet.admin.context import AdminContext
from gpufleet.admin.fleet import FleetMemo
from gpufleet.admin.live import LiveFleet
from gpufleet.admin.main import create_app
from gpufleet.admin.metrics import FleetCollector
from gpufleet.admin.nodes import NodeActions
from gpufleet.admin.policy import PolicyStore, parser
from gpufleet.lifecycle import StartStop
from gpufleet.model.gpus import Catalog, load_catalog
from gpufleet.scheduler.policy_watch import LivePolicy, PolicyWatch
from gpufleet.scheduler.runtime import SchedulerRuntime
from gpufleet.settings import AdminSettings, PlacementSettings

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
    )
    return AdminView(live, FleetMemo())


def build_context(
    api: client.ApiClient,
    settings: AdminSettings,
    live: LiveFleet | None = None,
    catalog: Catalog | None = None,
    placement: PlacementSettings | None = None,
    policy: PolicyWatch | None = None,
) -> AdminContext:
    """The context of an API talking to the cluster of `api`. Without `live`, with informers
    of its own (started by the app's lifespan), the policy ConfigMap's among them; inside the
    operator, the scheduler's view and policy watch are passed in."""
    owns = live is None
    watch = policy or policy_watch(settings, placement or PlacementSettings())
    if live is None:
        live = LiveFleet.standalone(api, catalog or load_catalog())
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
            self.core.patch_namespaced_pod(self.pod, self.namespace, body, _preload_content=False)
        except (ApiException, HTTPError, OSError) as exc:
            log.warning("cannot label pod %s/%s: %s", self.namespace, self.pod, exc)


def uvicorn_config(context: AdminContext, app: FastAPI | None = None) -> uvicorn.Config:
    settings = context.settings
    tls = settings.tls_cert_file is not None
    return uvicorn.Config(
        app or create_app(context),
        host=settings.bind_address,
        port=settings.port,
        ssl_certfile=str(settings.tls_cert_file) if tls else None,
        ssl_keyfile=str(settings.tls_key_file) if tls else None,
        log_config=None,  # the process's logging
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=5,
    )


class AdminServer(StartStop):
    """uvicorn on a background thread (inside `gpufleet operator`, and in tests)."""

    def __init__(self, context: AdminContext, app: FastAPI | None = None) -> None:
        self.context = context
        self.server = uvicorn.Server(uvicorn_config(context, app))
        self._thread = threading.Thread(target=self.server.run, name="admin-api", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        servers = getattr(self.server, "servers", None) or []
        for srv in servers:
            for sock in srv.sockets:
                return int(sock.getsockname()[1])
        return self.context.settings.port

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the admin API did not start; see the log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the admin API did not start in {timeout}s")
            time.sleep(0.05)
        scheme = "https" if self.context.settings.tls_cert_file else "http"
        log.info("admin API on %s://%s:%d", scheme, self.context.settings.bind_address, self.port)

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(10)


def run_standalone(api: client.ApiClient, settings: AdminSettings) -> int:
    """Serve in the foreground until SIGINT/SIGTERM, with the fleet metrics on /metrics."""
    context = build_context(api, settings)
    REGISTRY.register(FleetCollector(context.live, context.fleet_memo))
    server = uvicorn.Server(uvicorn_config(context))
    server.run()
    return 0
