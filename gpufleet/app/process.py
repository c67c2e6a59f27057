"""A `gpufleet operator` process: the TrainingJob and ServingJob operator, the autoscaler and
the scheduler, built from the settings and run together.

Start-up order: API client -> metrics and probe endpoint -> Lease (only the holder acts;
standbys wait here) -> scheduler informers and loop on threads (with the policy ConfigMap's
watch) -> the admin view of the scheduler's cache (fleet and job metrics) -> admin API and
dashboard (when `admin.port` is set) -> kopf on the main thread's event loop.

While the Lease is not renewed (the API server or etcd cannot be reached) the scheduler and the
handlers make no decision but the process stays up, and every part resumes when the server
answers again: the keeper renews the Lease, the scheduler's informers and kopf's watches list
again. Only when another replica is seen holding the Lease does the process stop, with exit
code 1 (by force if its graceful shutdown takes longer than `stand_down.STAND_DOWN_S`), so a
supervisor restarts it as a standby; state is never carried over, it is rebuilt
from the cluster on every start.
"""

from __future__ import annotations

import asyncio
import faulthandler
import functools
import logging
import os
import signal
import socket
import threading
import uuid
from typing import TYPE_CHECKING

import kopf
from kubernetes import client
from prometheus_client import REGISTRY

from gpufleet.admin.metrics import FleetCollector
from gpufleet.admin.wiring import ServingLabel, admin_view, build_context, policy_watch
from gpufleet.app import kopf_setup, logs, malloc_arenas, stand_down
from gpufleet.app.http_endpoint import Health, Phase, serve
from gpufleet.autoscaler.service import JobAutoscalers
from gpufleet.model.contract import names
from gpufleet.operator import servingjob_handlers, trainingjob_handlers
from gpufleet.operator.vllm_sleep import VllmSleepApi
from gpufleet.operator.watched import LabelledObjects
from gpufleet.scheduler.informer import Informer
from gpufleet.scheduler.lease import LeaderLease
from gpufleet.scheduler.runtime import SchedulerRuntime, api_client
from gpufleet.settings import Settings

if TYPE_CHECKING:
    from gpufleet.admin.server import AdminServer

log = logging.getLogger("gpufleet.operator")


def run(settings: Settings) -> int:
    """Run until stopped (0) or the Lease is lost (1)."""
    malloc_arenas.limit_arenas()  # before any thread starts (malloc_arenas.py)
    logs.configure(settings.log)
    # `kill -USR1 <pid>` prints every thread's stack: cheap insurance for diagnosing hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    api = api_client(settings.kubeconfig)
    stop = threading.Event()
    lost = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())

    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    lease_settings = settings.lease
    lease = LeaderLease(
        client.CoordinationV1Api(api),
        lease_settings.namespace,
        lease_settings.name,
        identity,
        duration=lease_settings.duration_s,
        renew_every=lease_settings.renew_period_s,
    )
    # Metrics and probes answer from the start: a standby is a ready hot spare (http_endpoint.py).
    health = Health()
    if settings.metrics.port:
        serve(health, settings.metrics.bind_address, settings.metrics.port)
    # A standby never serves the admin API: a container restarted in the leader's pod must not
    # keep the label that routes the admin Service to it.
    serving = ServingLabel(api, settings.admin)
    serving.mark(False)
    log.info("waiting for lease %s/%s as %s", lease.namespace, lease.name, identity)
    if not lease.acquire(stop):
        health.phase = Phase.STOPPING
        return 0
    health.phase = Phase.STARTING

    stopped = threading.Event()  # the graceful shutdown below has finished

    def on_lost() -> None:
        lost.set()
        stop.set()
        stand_down.exit_unless_stopped(stopped)

    keeper = threading.Thread(target=lease.keep, args=(stop, on_lost), daemon=True)
    keeper.start()

    # The placement policy: the settings', or the one stored in its ConfigMap (PUT /policy).
    policy = policy_watch(settings.admin, settings.placement)
    scheduler = SchedulerRuntime(
        api,
        settings.placement.policy(),
        settings.scheduler,
        may_act=lease.held,
        policy_watch=policy,
        estimate_namespace=lease_settings.namespace,
        lease=(lease_settings.namespace, lease_settings.name),
        pod_tolerations=settings.operator.tolerations(),
    )
    scheduler.start()
    health.scheduler_alive = scheduler.alive
    health.phase = Phase.LEADING
    # The admin view syncs in the background: until it has, the admin API answers 503 and the
    # fleet series are absent; scheduling does not wait for it.
    view = admin_view(api, scheduler)
    view.start()
    REGISTRY.register(FleetCollector(view.live, view.memo))
    admin: AdminServer | None = None
    if settings.admin.port:
        # Imported only when serving: FastAPI and uvicorn add seconds to every start.
        from gpufleet.admin.server import AdminServer

        context = build_context(
            api, settings.admin, view.live, placement=settings.placement, policy=policy
        )
        context.fleet_memo = view.memo
        admin = AdminServer(context)
        admin.start()
        serving.mark(True)

    kopf_setup.register_login(api)
    kopf_setup.register_stop_on_cleanup(stop)
    tick, scheduler_name = settings.operator.tick_s, settings.scheduler.name
    tolerations = settings.operator.tolerations()
    trainingjob_handlers.register_timer(tick)
    servingjob_handlers.register_timer(tick)
    namespace = settings.namespace
    # ServingJobs' Deployments, watched: a pass plans first from them and the scheduler's pods.
    deployments = serving_deployments(api, namespace, stop)
    memo = kopf.Memo(
        state=trainingjob_handlers.State(
            api, scheduler.cache, scheduler_name, tick, may_act=lease.held, tolerations=tolerations
        ),
        serving=servingjob_handlers.State(
            api,
            JobAutoscalers(settings.autoscaler),
            scheduler_name,
            may_act=lease.held,
            tolerations=tolerations,
            sleep_api=VllmSleepApi() if settings.operator.vllm_sleep_api else None,
            pods=functools.partial(scheduler.cache.labelled_pods, names.SERVINGJOB_LABEL),
            deployments=deployments.labelled,
        ),
    )

    async def operate() -> None:
        try:
            await kopf.operator(
                standalone=True,
                clusterwide=namespace is None,
                namespaces=[namespace] if namespace else (),
                memo=memo,
                stop_flag=stop,
            )
        finally:
            # Should kopf stop without its cleanup activity (kopf_setup.register_stop_on_cleanup),
            # release its thread waiting on `stop` before asyncio.run() waits for the executor's.
            stop.set()

    try:
        asyncio.run(operate())
    finally:
        health.phase = Phase.STOPPING
        stop.set()
        if admin is not None:
            serving.mark(False)
            admin.stop()
        view.stop()
        scheduler.stop()
        memo.serving.close()
        if not lost.is_set():
            lease.release()
        stopped.set()
    return 1 if lost.is_set() else 0


def serving_deployments(
    api: client.ApiClient, namespace: str | None, stop: threading.Event
) -> LabelledObjects:
    """The ServingJobs' Deployments (of `namespace`, or all), kept by a watch until `stop`."""
    apps = client.AppsV1Api(api)
    store = LabelledObjects(names.SERVINGJOB_LABEL)
    list_fn = (
        functools.partial(apps.list_namespaced_deployment, namespace)
        if namespace
        else apps.list_deployment_for_all_namespaces
    )
    Informer(
        "servingjob-deployments", list_fn, store.replace, store.event, stop,
        label_selector=names.SERVINGJOB_LABEL,
    ).start()  # fmt: skip
    return store
