"""vLLM's sleep endpoints called by the operator (`gpufleet.operator.vllm_sleep`) against a real
HTTP server on loopback that answers as vLLM's `/sleep` and `/wake_up` do, and the standby
steps that use them.

Aspects under test: a level-1 sleep and a wake are POSTed to the pod's IP and port; an error
status, a refused connection or a pod without an IP is a `SleepApiError` naming the pod; the
server is put to sleep before the pod is marked, and a replica whose sleep fails is not marked
(the Deployment loses it instead); a failed wake raises and leaves the pod marked asleep.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpufleet.model.contract import standby as marks
from gpufleet.model.contract.names import POOL_LABEL
from gpufleet.model.servingjob import ServingJobSpec
from gpufleet.operator.serving_standby import Standbys
from gpufleet.operator.vllm_sleep import SleepApiError, VllmSleepApi

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "x"}]}}


class FakeVllm:
    """Records the POSTs; answers `status` (200 as vLLM does on success)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.calls.append(self.path)
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def vllm() -> Iterator[FakeVllm]:
    server = FakeVllm()
    yield server
    server.close()


@pytest.fixture
def api() -> Iterator[VllmSleepApi]:
    client = VllmSleepApi()
    yield client
    client.close()


def pod(name: str, ip: str | None = "127.0.0.1", created: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    if ip:
        status["podIP"] = ip
    return {
        "metadata": {
            "name": name,
            "labels": {POOL_LABEL: "prefill"},
            "annotations": {},
            "creationTimestamp": f"2026-12-03T11:{created:02d}:00Z",
        },
        "status": status,
    }


def test_sleep_and_wake_are_posted_to_the_pod(vllm: FakeVllm, api: VllmSleepApi) -> None:
    api.sleep(pod("a"), vllm.port)
    api.wake(pod("a"), vllm.port)
    assert vllm.calls == ["/sleep?level=1", "/wake_up"]


def test_failures_name_the_pod(vllm: FakeVllm, api: VllmSleepApi) -> None:
    vllm.status = 500
    with pytest.raises(SleepApiError, match=r"pod a.*HTTP 500"):
        api.sleep(pod("a"), vllm.port)
    with pytest.raises(SleepApiError, match="pod b has no IP"):
        api.wake(pod("b", ip=None), vllm.port)
    with socket.socket() as free:  # a port nothing listens on: the connection is refused
        free.bind(("127.0.0.1", 0))
        closed = free.getsockname()[1]
    with pytest.raises(SleepApiError, match="pod c"):
        api.wake(pod("c"), closed)


def spec() -> ServingJobSpec:
    pool = {"minReplicas": 1, "maxReplicas": 4, "gpusPerReplica": 1, "template": TEMPLATE}
    return ServingJobSpec.model_validate(
        {
            "prefill": pool,
            "decode": pool,
            "slo": {"ttftP90Seconds": 1.0, "itlP90Seconds": 0.05},
            "autoscaling": {
                "prometheus": {"url": "http://prom:9090"},
                "capacity": {"prefillTokensPerSecond": 10000, "decodeBatchSize": 32},
                "standby": {"prefill": {"replicas": 2}},
            },
        }
    )


def test_the_server_sleeps_before_its_pod_is_marked(vllm: FakeVllm, api: VllmSleepApi) -> None:
    patched: list[tuple[str, Any]] = []
    scaled: list[tuple[str, int]] = []
    pods = [pod("a", created=1), pod("b", created=2)]
    standbys = Standbys(
        spec(), {"prefill": 2}, pods, lambda n, b: patched.append((n, b)),
        lambda p, n: scaled.append((p, n)), NOW, server=api, port=vllm.port,
    )  # fmt: skip
    standbys.scale("prefill", 1)
    assert vllm.calls == ["/sleep?level=1"] and patched == [("b", marks.sleep_patch())]
    assert scaled == []  # 1 awake + 1 asleep: the Deployment keeps its 2


def test_a_refused_sleep_removes_the_replica_instead(vllm: FakeVllm, api: VllmSleepApi) -> None:
    vllm.status = 503
    patched: list[tuple[str, Any]] = []
    scaled: list[tuple[str, int]] = []
    standbys = Standbys(
        spec(), {"prefill": 2}, [pod("a"), pod("b")], lambda n, b: patched.append((n, b)),
        lambda p, n: scaled.append((p, n)), NOW, server=api, port=vllm.port,
    )  # fmt: skip
    standbys.scale("prefill", 1)
    assert patched == [] and scaled == [("prefill", 1)]


def test_a_failed_wake_raises_and_leaves_the_mark(vllm: FakeVllm, api: VllmSleepApi) -> None:
    vllm.status = 500
    patched: list[tuple[str, Any]] = []
    asleep = pod("b")
    asleep["metadata"]["annotations"] = dict(marks.sleep_patch()["metadata"]["annotations"])
    standbys = Standbys(
        spec(), {"prefill": 2}, [pod("a"), asleep], lambda n, b: patched.append((n, b)),
        lambda p, n: None, NOW, server=api, port=vllm.port,
    )  # fmt: skip
    with pytest.raises(SleepApiError):
        standbys.scale("prefill", 2)
    assert patched == [] and vllm.calls == ["/wake_up"]
