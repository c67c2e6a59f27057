"""`gpufleet operator`: the TrainingJob operator and the scheduler in one process.

Start-up order: API client -> Lease (only the holder acts; standbys wait here) -> scheduler
informers and loop on threads -> metrics endpoint -> kopf on the main thread's event loop. If
the Lease is lost the process stops with exit code 1 so a supervisor restarts it as a standby;
state is never carried over, it is rebuilt from the cluster on every start.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import socket
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client
from prometheus_client import start_http_server

from gpufleet.autoscaler.inputs import base_settings
from gpufleet.operator import servingjob, trainingjob
from gpufleet.scheduler.lease import LeaderLease
from gpufleet.scheduler.names import MIG_CONFIGMAP_NAMESPACE
from gpufleet.scheduler.runtime import SchedulerRuntime, api_client

log = logging.getLogger("gpufleet.operator")

LEASE_NAME = "gpufleet-operator"


@dataclass(frozen=True)
class OperatorOptions:
    kubeconfig: str | None = None
    namespace: str | None = None  # None: every namespace
    log_level: str = "INFO"
    metrics_port: int = 0  # 0: no metrics endpoint
    lease_namespace: str = MIG_CONFIGMAP_NAMESPACE
    node_failure_grace: float = 30.0
    lease_duration: float = 15.0


def _login(api: client.ApiClient) -> Any:
    """kopf's credentials, taken from the same kubeconfig as the scheduler's client."""
    cfg = api.configuration

    @kopf.on.login()
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
            token=(cfg.api_key or {}).get("authorization", "").removeprefix("Bearer ") or None,
        )

    return login


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Progress and diff-base in annotations: the CRD's status schema is gpufleet's own.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="gpufleet.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="gpufleet.io", key="last-handled-configuration"
    )
    settings.persistence.finalizer = "gpufleet.io/finalizer"
    # Handlers post their own Events on transitions; kopf's routine INFO logs stay logs.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5]


def run(options: OperatorOptions) -> int:
    logging.basicConfig(
        level=options.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    if options.log_level.upper() != "DEBUG":
        # kopf logs every successful handler run (each timer tick) at INFO.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # `kill -USR1 <pid>` prints every thread's stack: cheap insurance for diagnosing hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        base_settings(os.environ)  # refuse a bad override now, not after winning the Lease
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    api = api_client(options.kubeconfig)
    stop = threading.Event()
    lost = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())

    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    lease = LeaderLease(
        client.CoordinationV1Api(api),
        options.lease_namespace,
        LEASE_NAME,
        identity,
        duration=options.lease_duration,
        renew_every=options.lease_duration / 3,
    )
    log.info("waiting for lease %s/%s as %s", options.lease_namespace, LEASE_NAME, identity)
    if not lease.acquire(stop):
        return 0

    def on_lost() -> None:
        lost.set()
        stop.set()

    keeper = threading.Thread(target=lease.keep, args=(stop, on_lost), daemon=True)
    keeper.start()

    scheduler = SchedulerRuntime(
        api, node_failure_grace=options.node_failure_grace, may_act=lease.held
    )
    scheduler.start()
    if options.metrics_port:
        start_http_server(options.metrics_port, addr="127.0.0.1")

    _login(api)
    memo = kopf.Memo(state=trainingjob.State(api, scheduler.cache), serving=servingjob.State(api))

    async def operate() -> None:
        try:
            await kopf.operator(
                standalone=True,
                clusterwide=options.namespace is None,
                namespaces=[options.namespace] if options.namespace else (),
                memo=memo,
                stop_flag=stop,
            )
        finally:
            # kopf may stop on its own signal handlers; release its thread waiting on `stop`
            # before asyncio.run() waits for the executor threads.
            stop.set()

    try:
        asyncio.run(operate())
    finally:
        stop.set()
        scheduler.stop()
        memo.serving.close()
        if not lost.is_set():
            lease.release()
    return 1 if lost.is_set() else 0
