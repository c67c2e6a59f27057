"""Stopping informers ends their watches at once: a watch blocked reading a quiet stream (the
API server sends nothing until the next event or its timeout) is cut, so the thread is gone when
the stop returns rather than up to the watch's timeout later. Against a local HTTP server through
the generated Kubernetes client (the read really blocks in a socket), and a scripted API for a
stop that comes while a watch is being opened."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from gpufleet.scheduler.informer import Informer, stop_all

NODE_LIST = {"kind": "NodeList", "metadata": {"resourceVersion": "5"}, "items": []}
ADDED = {"type": "ADDED", "object": {"metadata": {"name": "n1", "resourceVersion": "6"}}}


class QuietWatch(BaseHTTPRequestHandler):
    """Lists answer at once; a watch sends one event, then holds its stream open and silent
    until the test ends (as a watch on a quiet resource does until the server's timeout)."""

    protocol_version = "HTTP/1.1"
    done = threading.Event()

    def do_GET(self) -> None:
        if "watch=" not in self.path:
            body = json.dumps(NODE_LIST).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        event = json.dumps(ADDED).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.flush()
        self.done.wait(30)
        self.close_connection = True

    def log_message(self, *_: Any) -> None:
        """Quiet."""


@pytest.fixture
def core() -> Iterator[client.CoreV1Api]:
    QuietWatch.done = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), QuietWatch)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    yield client.CoreV1Api(client.ApiClient(configuration))
    QuietWatch.done.set()
    server.shutdown()
    server.server_close()


def informer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("informer-")]


def test_stop_ends_a_watch_blocked_on_a_quiet_stream(core: client.CoreV1Api) -> None:
    stop = threading.Event()
    seen = threading.Event()
    pods = core.list_pod_for_all_namespaces
    informers = [
        Informer("nodes", core.list_node, lambda items: None, lambda *_: seen.set(), stop),
        Informer("pods", pods, lambda items: None, lambda *_: None, stop),
    ]
    for informer in informers:
        informer.start()
    assert seen.wait(10), "the watch's event never arrived"
    assert all(i.synced.wait(10) for i in informers)

    # The bound only keeps a failing run short: the watches stay silent for 30 s without the
    # interruption.
    stop_all(informers, stop, timeout=10)

    assert not any(i.alive() for i in informers)
    assert informer_threads() == []


class Opening:
    """A scripted API whose watch request is held open until the test lets it answer; the
    answer's stream then blocks until it is shut down."""

    def __init__(self) -> None:
        self.opening = threading.Event()
        self.answer = threading.Event()
        self.shut = threading.Event()

    def __call__(self, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            return ListAnswer()
        self.opening.set()
        self.answer.wait(10)
        return self

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        self.shut.wait(10)
        yield from ()

    def shutdown(self) -> None:
        self.shut.set()

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class ListAnswer:
    data = json.dumps(NODE_LIST).encode()


def test_a_stop_while_the_watch_is_opening_ends_it_once_open() -> None:
    api = Opening()
    stop = threading.Event()
    informer = Informer("nodes", api, lambda items: None, lambda *_: None, stop).start()
    assert api.opening.wait(10)

    stop.set()
    informer.interrupt()  # nothing to end yet: the watch has not answered
    api.answer.set()
    informer.join(5)  # bounds a failing run: its stream would block 10 s

    assert not informer.alive()
    assert not api.shut.is_set()  # it never read the stream that opened after the stop
