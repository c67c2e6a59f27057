"""Throttling on the generated client's path (`ThrottleRetry`, set by `api_client`), against a
loopback HTTP server: a 429 with Retry-After is waited out and the request (even a POST) sent
again; one that carries a JSON Status (an eviction a PodDisruptionBudget refuses) comes back at
once; throttling past the retry limit comes back as the 429; Retry-After is read and bounded."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.scheduler import throttling


class Answers:
    def __init__(self) -> None:
        self.throttle_next = 0
        self.refuse_with_status = False
        self.requests: list[str] = []


def _handler(answers: Answers) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answers.requests.append(self.path)
            if answers.refuse_with_status:
                body = json.dumps({"kind": "Status", "reason": "TooManyRequests", "code": 429})
                self._send(429, body.encode(), "application/json", retry_after="10")
            elif answers.throttle_next > 0:
                answers.throttle_next -= 1
                self._send(429, b"Too many requests, please try again later.\n", "text/plain")
            else:
                self._send(201, b"{}", "application/json")

        def _send(self, code: int, body: bytes, kind: str, retry_after: str = "1") -> None:
            self.send_response(code)
            if code == 429:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def served() -> Iterator[tuple[client.CoreV1Api, Answers]]:
    answers = Answers()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(answers))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    cfg.retries = throttling.ThrottleRetry()
    api = client.ApiClient(cfg)
    yield client.CoreV1Api(api), answers
    api.close()
    server.shutdown()
    server.server_close()


def _bind(core: client.CoreV1Api) -> None:
    body: Any = {"target": {"kind": "Node", "name": "n1"}, "metadata": {"name": "p"}}
    core.create_namespaced_pod_binding("p", "ns", body, _preload_content=False)


def test_a_throttled_post_is_sent_again_after_retry_after(served: Any) -> None:
    core, answers = served
    answers.throttle_next = 2
    started = time.monotonic()
    _bind(core)
    assert len(answers.requests) == 3
    assert time.monotonic() - started >= 2.0  # Retry-After: 1, twice


def test_a_status_429_is_a_refusal_answered_at_once(served: Any) -> None:
    core, answers = served
    answers.refuse_with_status = True
    with pytest.raises(ApiException) as raised:
        _bind(core)
    assert raised.value.status == 429 and len(answers.requests) == 1


def test_throttling_past_the_retry_limit_comes_back_as_429(served: Any) -> None:
    core, answers = served
    core.api_client.configuration.retries = throttling.ThrottleRetry(status=1)
    core.api_client.rest_client = type(core.api_client.rest_client)(core.api_client.configuration)
    answers.throttle_next = 5
    with pytest.raises(ApiException) as raised:
        _bind(core)
    assert raised.value.status == 429 and len(answers.requests) == 2


@pytest.mark.parametrize(
    ("header", "wait"),
    [("2", 2.0), ("0", 0.1), ("600", throttling.RETRY_AFTER_MAX_S), ("soon", 1.0), (None, 1.0)],
)
def test_retry_after_is_read_and_bounded(header: str | None, wait: float) -> None:
    assert throttling.retry_after({} if header is None else {"retry-after": header}) == wait
