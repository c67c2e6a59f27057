"""vLLM's sleep endpoints called by the operator (`gpufleet.operator.vllm_sleep`) against a real
HTTP server on loopback that answers as vLLM's `/sleep` and `/wake_up` do, and the standby
steps that use them.

Aspects under test: a level-1 sleep and a wake are POSTed to the pod's IP and port; `GET
/is_sleeping` is read as vLLM answers it, and an answer that is not a boolean is an error; an
error status, a refused connection or a pod without an IP is a `SleepApiError` naming the pod;
the server is put to sleep before the pod is marked, and a replica whose sleep fails is not
marked (the operator deletes it instead); a failed wake raises and leaves the pod marked asleep.
"""

from __future__ import annotations

import json
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
    """Records the calls; answers `status` (200 as vLLM does on success), and `GET
    /is_sleeping` with `sleeping` as JSON."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.status = 200
        self.sleeping: Any = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.calls.append(self.path)
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                outer.calls.append(self.path)
                body = json.dumps({"is_sleeping": outer.sleeping}).encode()
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

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


def test_is_sleeping_reads_the_servers_answer(vllm: FakeVllm, api: VllmSleepApi) -> None:
    assert api.is_sleeping(pod("a"), vllm.port) is False
    vllm.sleeping = True
    assert api.is_sleeping(pod("a"), vllm.port) is True
    assert vllm.calls == ["/is_sleeping", "/is_sleeping"]
    vllm.sleeping = "maybe"
    with pytest.raises(SleepApiError, match="pod a"):
        api.is_sleeping(pod("a"), vllm.port)
    vllm.status = 404  # a server started without the dev-mode endpoints
    with pytest.raises(SleepApiError, match="HTTP 404"):
        api.is_sleeping(pod("a"), vllm.port)


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


class Writes:
    """Records the standby writes (`PodWrites`)."""

    def __init__(self) -> None:
        self.patched: list[tuple[str, Any]] = []
        self.deleted: list[str] = []
        self.scaled: list[tuple[str, int]] = []

    def patch(self, pod: str, body: dict[str, Any]) -> None:
        self.patched.append((pod, body))

    def patch_status(self, pod: str, body: dict[str, Any]) -> None:
        self.patched.append((pod, body))

    def delete(self, pod: str) -> None:
        self.deleted.append(pod)

    def scale(self, pool: str, replicas: int) -> None:
        self.scaled.append((pool, replicas))


def test_the_server_sleeps_before_its_pod_is_marked(vllm: FakeVllm, api: VllmSleepApi) -> None:
    writes = Writes()
    pods = [pod("a", created=1), pod("b", created=2)]
    standbys = Standbys(spec(), {"prefill": 2}, pods, writes, NOW, server=api, port=vllm.port)
    standbys.scale("prefill", 1)
    assert vllm.calls == ["/sleep?level=1"] and writes.patched == [("b", marks.sleep_patch())]
    assert writes.scaled == []  # 1 awake + 1 asleep: the Deployment keeps its 2


def test_a_refused_sleep_removes_the_replica_instead(vllm: FakeVllm, api: VllmSleepApi) -> None:
    vllm.status = 503
    writes = Writes()
    pods = [pod("a", created=1), pod("b", created=2)]
    standbys = Standbys(spec(), {"prefill": 2}, pods, writes, NOW, server=api, port=vllm.port)
    standbys.scale("prefill", 1)
    assert writes.patched == [] and writes.deleted == ["b"]
    assert writes.scaled == [("prefill", 1)]


def test_a_failed_wake_raises_and_leaves_the_mark(vllm: FakeVllm, api: VllmSleepApi) -> None:
    vllm.status = 500
    writes = Writes()
    asleep = pod("b")
    asleep["metadata"]["annotations"] = dict(marks.sleep_patch()["metadata"]["annotations"])
    pods = [pod("a"), asleep]
    standbys = Standbys(spec(), {"prefill": 2}, pods, writes, NOW, server=api, port=vllm.port)
    with pytest.raises(SleepApiError):
        standbys.scale("prefill", 2)
    assert writes.patched == [] and vllm.calls == ["/wake_up"]
