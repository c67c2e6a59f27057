"""The metrics and probe endpoint (gpufleet/app/http_endpoint.py), served for real on loopback.

Aspects under test: /readyz is 200 for a standby and a leader, 503 while a new leader syncs
and while the process stops; /healthz is 200 until a leader's scheduler thread has died;
/metrics still serves the Prometheus registry.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from gpufleet.app.http_endpoint import Health, Phase, serve

ALIVE = {"scheduler": True}


@pytest.fixture
def endpoint() -> Iterator[tuple[Health, str]]:
    ALIVE["scheduler"] = True
    health = Health(lambda: ALIVE["scheduler"])
    server = serve(health, "127.0.0.1", 0)
    try:
        yield health, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_readiness_follows_the_phase(endpoint: tuple[Health, str]) -> None:
    health, base = endpoint
    assert get(f"{base}/readyz") == (200, "standby\n")
    health.phase = Phase.STARTING
    assert get(f"{base}/readyz") == (503, "starting\n")
    health.phase = Phase.LEADING
    assert get(f"{base}/readyz") == (200, "leading\n")
    health.phase = Phase.STOPPING
    assert get(f"{base}/readyz")[0] == 503


def test_liveness_fails_when_the_leaders_scheduler_thread_died(
    endpoint: tuple[Health, str],
) -> None:
    health, base = endpoint
    health.phase = Phase.LEADING
    assert get(f"{base}/healthz") == (200, "ok\n")
    ALIVE["scheduler"] = False
    assert get(f"{base}/healthz") == (503, "scheduler thread stopped\n")
    health.phase = Phase.STANDBY  # a standby runs no scheduler: alive
    assert get(f"{base}/healthz")[0] == 200


def test_metrics_are_still_served(endpoint: tuple[Health, str]) -> None:
    _, base = endpoint
    status, text = get(f"{base}/metrics")
    assert status == 200 and "python_info" in text
