"""The process's HTTP endpoint: Prometheus metrics and the probes the Helm chart points at.

- `/metrics`: every gpufleet metric (prometheus_client's default registry);
- `/healthz` (liveness): 200 while the process works; 503 once the scheduler thread of a
  leader has died, so that the kubelet restarts the pod;
- `/readyz` (readiness): 200 for a standby waiting for the Lease (a hot spare is ready, or a
  rolling update of two replicas would never finish) and for a leader whose informers have
  synced; 503 while a new leader syncs its caches, and while the process stops.

It is started before the process waits for the Lease, so a standby answers its probes too.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

__all__ = ["Health", "Phase", "serve"]

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class Phase(StrEnum):
    STANDBY = "standby"  # waiting for the Lease
    STARTING = "starting"  # holds the Lease, informers syncing
    LEADING = "leading"  # scheduling and reconciling
    STOPPING = "stopping"


class Health:
    """What the probes report; the composition root moves it through the phases."""

    def __init__(self, scheduler_alive: Callable[[], bool] = lambda: True) -> None:
        self.phase = Phase.STANDBY
        self.scheduler_alive = scheduler_alive

    def live(self) -> tuple[bool, str]:
        if self.phase is Phase.LEADING and not self.scheduler_alive():
            return False, "scheduler thread stopped"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        return self.phase in (Phase.STANDBY, Phase.LEADING), self.phase.value


def _app(health: Health) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    metrics = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            ok, text = health.live() if path == "/healthz" else health.ready()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [text.encode() + b"\n"]
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    return app


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds
        return None


def serve(health: Health, address: str, port: int) -> WSGIServer:
    """Serve the endpoint on a daemon thread; returns the server (its `server_port`)."""
    server = make_server(address, port, _app(health), _Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
