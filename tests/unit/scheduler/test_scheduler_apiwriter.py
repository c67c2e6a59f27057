"""The lean HTTP/1.1 writer against a loopback server: a binding is one POST with the pod's
node and annotations; a "why pending" condition is one strategic-merge PATCH of the pod's
status, a few at a time, dropped when the pod was bound before it went out; status and the
API's Status reason come back; Content-Length and chunked answers are read; connections are
reused, and a request on an idle connection the server has closed is sent again on a fresh
one; a connection that is refused is status 0; a throttled request (429) is sent again after
its Retry-After, and a gang's bindings that the server throttles all go through."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.kubeerrors import api_error_text
from gpufleet.scheduler.apiwriter import ApiWriter, authorization, bearer_token
from gpufleet.scheduler.binder import Binder, BindRequest
from gpufleet.testing.operator import wait_for


class Server:
    """Answers each request per `mode`; records (path, body) and connections accepted."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.heads: list[tuple[str, str]] = []  # (method, Content-Type) per request
        self.connections = 0
        self.mode = "created"
        self.throttle_next = 0  # answer this many requests 429 first (API Priority and Fairness)
        self.close_after_answer = False
        self.answering = asyncio.Event()  # cleared: requests are read but not yet answered
        self.answering.set()
        self.tasks: list[asyncio.Task[None]] = []

    async def stop(self, srv: asyncio.Server) -> None:
        """Close the listener and every connection before the loop goes."""
        srv.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await srv.wait_closed()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.tasks.append(task)
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path = lines[0].split(" ")[:2]
                fields = dict(x.partition(": ")[::2] for x in lines[1:] if x)
                length = int(fields["Content-Length"])
                self.requests.append((path, json.loads(await reader.readexactly(length))))
                self.heads.append((method, fields.get("Content-Type", "")))
                await self.answering.wait()
                if self.throttle_next > 0:
                    self.throttle_next -= 1
                    body = "Too many requests, please try again later.\n"
                    writer.write(
                        f"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0.1\r\n"
                        f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n{body}"
                        .encode()
                    )  # fmt: skip
                elif self.mode == "conflict":
                    body = json.dumps({"reason": "Conflict", "message": "already assigned"})
                    head = f"HTTP/1.1 409 Conflict\r\nContent-Length: {len(body)}\r\n\r\n"
                    writer.write((head + body).encode())
                elif self.mode == "chunked":
                    writer.write(
                        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b'3\r\n{"a\r\n4\r\n":1}\r\n0\r\n\r\n'
                    )
                else:
                    writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
                if self.close_after_answer:
                    break
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


@pytest.fixture
def served() -> Iterator[tuple[ApiWriter, Server]]:
    server = Server()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{sock.getsockname()[1]}"
    writer = ApiWriter(cfg, connections=4)

    async def serve() -> asyncio.Server:
        return await asyncio.start_server(server.handle, sock=sock)

    srv = writer.run(serve())
    yield writer, server
    writer.run(server.stop(srv))
    writer.close()


def test_binding_is_one_post_with_node_and_annotations(served: Any) -> None:
    writer, server = served
    assert writer.run(writer.bind("ns", "p", "n1", {"gpufleet.io/gpus": "0,1"})) == (201, "")
    ((path, body),) = server.requests
    assert path == "/api/v1/namespaces/ns/pods/p/binding"
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert body["metadata"] == {"name": "p", "annotations": {"gpufleet.io/gpus": "0,1"}}


def test_errors_carry_status_and_reason(served: Any) -> None:
    writer, server = served
    server.mode = "conflict"
    assert writer.run(writer.bind("ns", "p", "n1", {})) == (409, "409 Conflict: already assigned")


def test_chunked_answer_is_read_and_the_connection_reused(served: Any) -> None:
    writer, server = served
    server.mode = "chunked"
    for _ in range(3):
        assert writer.run(writer.bind("ns", "p", "n1", {}))[0] == 201
    assert server.connections == 1


def test_idle_connection_closed_by_the_server_is_replaced(served: Any) -> None:
    writer, server = served
    server.close_after_answer = True
    assert writer.run(writer.bind("ns", "a", "n1", {}))[0] == 201
    assert writer.run(writer.bind("ns", "b", "n1", {}))[0] == 201
    assert [p for p, _ in server.requests] == [
        "/api/v1/namespaces/ns/pods/a/binding",
        "/api/v1/namespaces/ns/pods/b/binding",
    ]


def test_binder_sends_a_batch_through_the_writer(served: Any) -> None:
    writer, server = served
    binder = Binder(None, writer=writer)  # type: ignore[arg-type]
    requests = [BindRequest(f"ns/p{i}", "n1", {}) for i in range(10)]
    assert binder.bind(requests) == {f"ns/p{i}": None for i in range(10)}
    assert len(server.requests) == 10 and server.connections <= 4


def test_pending_reasons_are_status_patches_through_the_writer(served: Any) -> None:
    writer, server = served

    async def hold() -> None:
        server.answering.clear()

    async def answer() -> None:
        server.answering.set()

    writer.run(hold())
    binder = Binder(None, explainers=1, writer=writer)  # type: ignore[arg-type]
    binder.mark_pending({"ns/a": "Reason: x", "ns/b": "Reason: y"})
    binder.mark_pending({"ns/a": "Reason: x"})  # already on its way: not sent again
    wait_for(lambda: server.requests, "the first write in flight")
    # Bound while its reason waits for the one slot: the reason is dropped.
    bound = binder.bind_async([BindRequest("ns/b", "n1", {})])
    writer.run(answer())
    assert bound.result(10) == {"ns/b": None}
    time.sleep(0.2)  # room for a wrong third write to arrive
    paths = [p for p, _ in server.requests]
    assert paths == ["/api/v1/namespaces/ns/pods/a/status", "/api/v1/namespaces/ns/pods/b/binding"]
    assert server.heads[0] == ("PATCH", "application/strategic-merge-patch+json")
    assert server.heads[1] == ("POST", "application/json")
    (condition,) = server.requests[0][1]["status"]["conditions"]
    assert condition["type"] == "PodScheduled" and condition["status"] == "False"
    assert (condition["reason"], condition["message"]) == ("Unschedulable", "Reason: x")


def test_refused_connection_is_status_zero() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
    writer = ApiWriter(cfg)
    try:
        status, error = writer.run(writer.bind("ns", "p", "n1", {}))
        assert status == 0 and "Error" in error
    finally:
        writer.close()
        sock.close()


def test_bearer_token_is_sent_and_read_again_from_the_configuration(served: Any) -> None:
    writer, _ = served
    writer._cfg.api_key = {"authorization": "Bearer one"}
    assert "Authorization: Bearer one\r\n" in writer._current_headers()
    writer._cfg.api_key = {"authorization": "Bearer two"}
    writer._headers_at -= 3600  # a rotation later
    assert "Authorization: Bearer two\r\n" in writer._current_headers()


def test_tokens_are_read_where_kubeconfig_and_in_cluster_loaders_put_them() -> None:
    cfg = client.Configuration()
    assert authorization(cfg) is None and bearer_token(cfg) is None
    cfg.api_key = {"BearerToken": "Bearer from-kubeconfig"}  # kube_config.py
    assert authorization(cfg) == "Bearer from-kubeconfig"
    assert bearer_token(cfg) == "from-kubeconfig"
    cfg.api_key = {"BearerToken": "bearer from-service-account"}  # incluster_config.py
    assert bearer_token(cfg) == "from-service-account"
    calls: list[int] = []
    cfg.refresh_api_key_hook = lambda c: calls.append(1)
    authorization(cfg)
    assert calls == [1]  # a rotated in-cluster token is reloaded


def test_client_errors_are_reported_with_the_apis_message() -> None:
    forbidden = ApiException(status=403, reason="Forbidden")
    forbidden.body = json.dumps(
        {"reason": "Forbidden", "message": 'cannot create resource "pods/eviction"'}
    ).encode()
    assert api_error_text(forbidden) == '403 Forbidden: cannot create resource "pods/eviction"'
    budget = ApiException(status=429, reason="Too Many Requests")
    budget.body = json.dumps(
        {
            "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 2 pods"}]},
        }
    )
    assert api_error_text(budget).endswith("disruption budget. needs 2 pods")


def test_a_throttled_binding_is_sent_again_after_retry_after(served: Any) -> None:
    writer, server = served
    server.throttle_next = 2
    started = time.monotonic()
    assert writer.run(writer.bind("ns", "p", "n1", {})) == (201, "")
    assert len(server.requests) == 3 and writer.throttled == 2
    assert time.monotonic() - started >= 0.2  # waited as told, twice


def test_a_gang_throttled_midway_is_bound_whole(served: Any) -> None:
    writer, server = served
    server.throttle_next = 20
    binder = Binder(None, writer=writer)  # type: ignore[arg-type]
    requests = [BindRequest(f"ns/p{i}", "n1", {}) for i in range(16)]
    assert binder.bind(requests) == {f"ns/p{i}": None for i in range(16)}


def test_throttling_longer_than_the_limit_is_reported(served: Any) -> None:
    writer, server = served
    writer._throttle_limit = 0.25
    server.throttle_next = 100
    status, error = writer.run(writer.bind("ns", "p", "n1", {}))
    assert status == 429 and error.startswith("429 Too many requests")
