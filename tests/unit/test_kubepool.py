"""Answers asked for unread (`_preload_content=False`) and handed to `kubepool.release` give
their connection back to the client's pool: writes one after another reuse one connection.
The generated Kubernetes client against a local HTTP/1.1 server that counts connections."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from gpufleet import kubepool


class Answers(BaseHTTPRequestHandler):
    """Answers every request with a small JSON Status, keeping the connection open."""

    protocol_version = "HTTP/1.1"
    connections = 0

    def setup(self) -> None:
        type(self).connections += 1
        super().setup()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b'{"kind": "Status", "status": "Success", "padding": "' + b"x" * 4096 + b'"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_DELETE = do_PATCH = do_POST = _answer

    def log_message(self, *_: Any) -> None:
        """Quiet."""


@pytest.fixture
def core() -> Iterator[client.CoreV1Api]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    Answers.connections = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    yield client.CoreV1Api(client.ApiClient(configuration))
    server.shutdown()
    server.server_close()


def test_released_answers_reuse_one_connection(core: client.CoreV1Api) -> None:
    for i in range(5):
        answer = core.delete_namespaced_pod(f"p{i}", "ns", _preload_content=False)
        kubepool.release(answer)
    assert Answers.connections == 1


def test_dropped_answers_open_a_connection_each(core: client.CoreV1Api) -> None:
    # What the operator did before: every unread answer kept its connection out of the pool.
    kept = [core.delete_namespaced_pod(f"p{i}", "ns", _preload_content=False) for i in range(5)]
    assert Answers.connections == 5
    for answer in kept:
        kubepool.release(answer)
    core.delete_namespaced_pod("again", "ns", _preload_content=False)
    assert Answers.connections == 5  # back in the pool once released
