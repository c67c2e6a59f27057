"""Serving the admin API with uvicorn: standalone (`gpufleet admin`) or on a thread beside the
operator.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import uvicorn
from fastapi import FastAPI
from kubernetes import client
from prometheus_client import REGISTRY

from gpufleet.admin.context import AdminContext
from gpufleet.admin.main import create_app
from gpufleet.admin.metrics import FleetCollector
from gpufleet.admin.wiring import build_context
from gpufleet.lifecycle import StartStop
from gpufleet.settings import Settings

log = logging.getLogger("gpufleet.admin")


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
        self._thread = threading.Thread(target=self._run, name="admin-api", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        try:
            await self.server.serve()
        finally:
            # A request still running when the graceful timeout ran out keeps its connection;
            # close it on this loop, or its transport outlives the loop and is collected later
            # as an unclosed-resource warning in whatever code runs then.
            for connection in list(self.server.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()
            await asyncio.sleep(0)  # let connection_lost run

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
        if self._thread.is_alive():  # a slow request: stop waiting for it
            self.server.force_exit = True
            self._thread.join(10)


def run_standalone(api: client.ApiClient, settings: Settings) -> int:
    """Serve in the foreground until SIGINT/SIGTERM, with the fleet metrics on /metrics: the
    `admin` group's API over the fleet of the scheduler `scheduler.name`, whose policy starts
    from the `placement` group (its what-ifs read the workload estimate that scheduler keeps in
    the `lease` namespace)."""
    context = build_context(
        api,
        settings.admin,
        placement=settings.placement,
        scheduler=settings.scheduler,
        lease=settings.lease,
    )
    REGISTRY.register(FleetCollector(context.live, context.fleet_memo))
    server = uvicorn.Server(uvicorn_config(context))
    server.run()
    return 0
