"""A lean asynchronous HTTP/1.1 path for the scheduler's frequent writes (bindings, and the
"why pending" conditions of many waiting pods).

The generated Kubernetes client costs about three milliseconds of Python per binding on the
sandbox machine (parameter handling, header assembly, urllib3, one thread per request in flight,
all contending for the GIL); httpx's async pool is no cheaper with 64 connections (its pool
scans every waiting request on every release). A binding is a small POST whose answer only
matters by its status code, so this module speaks just enough HTTP/1.1 itself: a single event
loop on its own thread keeps up to `connections` TLS connections alive, writes a pre-assembled
request and reads the status line, the headers and a Content-Length or chunked body. (`h2` is
not installed, so there is no HTTP/2 multiplexing to use instead.)

Credentials come from the kubernetes client's `Configuration`, the same kubeconfig the rest of
the process uses: server address, CA bundle, client certificate and key, or a bearer token.
Other threads submit coroutines with `run()` (blocking) or `submit()` (a Future).

A request on a reused connection that fails before any byte of the answer arrived (the server
closed an idle connection) is sent once more on a fresh one. Any other transport failure is
status 0: the write may or may not have happened. A 429 (API Priority and Fairness, or the
server's in-flight limit, refusing the request before handling it) is waited out as its
`Retry-After` says and the request sent again, so throttling slows bindings down instead of
failing them (a failed binding rolls its whole gang back).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from kubernetes import client

from gpufleet.kubeerrors import status_text
from gpufleet.scheduler import throttling

T = TypeVar("T")

_IDLE_S = 30.0  # close connections idle for longer (well below the API server's idle timeout)
_TOKEN_REFRESH_S = 60.0  # how often a bearer token is read again from the configuration


def authorization(cfg: client.Configuration) -> str | None:
    """The `Authorization` header value of the configuration's bearer token ("Bearer ..."),
    refreshed through the client's hook, or None. The client keeps a kubeconfig's or an
    in-cluster service account's token under `BearerToken`, older code under `authorization`."""
    value = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
    return str(value) if value else None


def bearer_token(cfg: client.Configuration) -> str | None:
    """The bare token of `authorization` (in-cluster configs write the scheme in lower case)."""
    value = authorization(cfg)
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token else value


class _Closed(Exception):
    """The connection ended before the first byte of an answer: safe to send again."""


def _ssl_context(cfg: client.Configuration) -> ssl.SSLContext:
    if cfg.verify_ssl:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    else:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = False
        self.idle_since = time.monotonic()

    def close(self) -> None:
        self.writer.close()

    async def exchange(self, request: bytes) -> tuple[int, dict[str, str], bytes, bool]:
        """Send `request`; (status, headers with lower-case names, body, keep-alive)."""
        self.writer.write(request)
        await self.writer.drain()
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _Closed from exc
            raise
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")  # no trailers from the API server
                    break
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            body = b"".join(parts)
        else:
            body = await self.reader.read()
            return status, headers, body, False
        return status, headers, body, headers.get("connection", "").lower() != "close"


class ApiWriter:
    """Writes to the API server from a private event loop; thread-safe entry points."""

    def __init__(
        self,
        cfg: client.Configuration,
        connections: int = 32,
        timeout: float = 30.0,
        throttle_limit: float = throttling.THROTTLE_LIMIT_S,
    ) -> None:
        url = urlsplit(cfg.host)
        self._tls = _ssl_context(cfg) if url.scheme == "https" else None
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        self._cfg = cfg
        self._fixed = (
            f"Host: {url.netloc}\r\nUser-Agent: gpufleet-scheduler\r\nAccept: application/json\r\n"
        )
        self._headers = ""
        self._headers_at = -_TOKEN_REFRESH_S
        self._timeout = timeout
        self._throttle_limit = throttle_limit
        self.throttled = 0  # 429 answers waited out so far
        self._idle: list[_Conn] = []
        self._loop = asyncio.new_event_loop()
        self._slots = asyncio.Semaphore(connections)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="apiwriter", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the writer's loop and wait for its result."""
        return self.submit(coro).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def drop() -> None:
            for conn in self._idle:
                conn.close()
            # Let the transports finish closing before the loop stops (else they are left
            # unclosed and warn when collected).
            closing = [conn.writer.wait_closed() for conn in self._idle]
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), 2.0)
            self._idle.clear()

        try:
            self.run(drop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    async def _connect(self) -> _Conn:
        reader, writer = await asyncio.open_connection(
            self._host, self._port, ssl=self._tls, limit=1 << 20
        )
        return _Conn(reader, writer)

    def _take_idle(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < _IDLE_S and not conn.reader.at_eof():
                return conn
            conn.close()
        return None

    def _current_headers(self) -> str:
        """The request headers; a bearer token is re-read from the client configuration now
        and then (in-cluster service-account tokens rotate; the client's hook reloads them)."""
        now = time.monotonic()
        if now - self._headers_at >= _TOKEN_REFRESH_S:
            token = authorization(self._cfg)
            self._headers = self._fixed + (f"Authorization: {token}\r\n" if token else "")
            self._headers_at = now
        return self._headers

    async def request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        """(status, body); status 0 with the error as body on a transport failure. A request
        the API server throttles (429, API Priority and Fairness or its in-flight limit) is
        sent again after the `Retry-After` it names, for up to `throttle_limit` seconds in
        all: the server refused it before handling it, so sending it again is safe."""
        waited = 0.0
        while True:
            status, headers, answer = await self._send(method, path, body, content_type)
            if status != 429:
                return status, answer
            wait = throttling.retry_after(headers)
            if waited + wait > self._throttle_limit:
                return status, answer
            self.throttled += 1
            waited += wait
            await asyncio.sleep(wait)

    async def _send(
        self, method: str, path: str, body: bytes, content_type: str
    ) -> tuple[int, dict[str, str], bytes]:
        raw = (
            f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._current_headers()}"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body
        async with self._slots:
            for _ in range(2):
                conn = self._take_idle()
                reused = conn is not None
                try:
                    if conn is None:
                        conn = await asyncio.wait_for(self._connect(), self._timeout)
                    status, headers, answer, keep = await asyncio.wait_for(
                        conn.exchange(raw), self._timeout
                    )
                except _Closed as exc:
                    assert conn is not None
                    conn.close()
                    if reused:
                        continue  # an idle connection the server had closed: send again
                    return 0, {}, f"connection closed: {exc}".encode()
                except (
                    OSError,
                    TimeoutError,
                    asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError,
                    ValueError,
                ) as exc:
                    if conn is not None:
                        conn.close()
                    return 0, {}, f"{type(exc).__name__}: {exc}".encode()
                if keep:
                    conn.idle_since = time.monotonic()
                    self._idle.append(conn)
                else:
                    conn.close()
                return status, headers, answer
        return 0, {}, b"connection closed twice"

    async def post(self, path: str, body: Mapping[str, Any]) -> tuple[int, str]:
        """POST `body` as JSON to `path`; (status, error) with error "" on success."""
        status, answer = await self.request("POST", path, json.dumps(body).encode())
        if 200 <= status < 300:
            return status, ""
        return status, status_text(status, answer)

    async def patch_pod_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> tuple[int, str]:
        """Strategic-merge `patch` into a pod's status (conditions merge by type)."""
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/status"
        body = json.dumps(patch).encode()
        status, answer = await self.request(
            "PATCH", path, body, "application/strategic-merge-patch+json"
        )
        if 200 <= status < 300:
            return status, ""
        return status, status_text(status, answer)

    async def bind(
        self, namespace: str, name: str, node: str, annotations: Mapping[str, str]
    ) -> tuple[int, str]:
        """Bind pod `namespace/name` to `node`; the Binding's annotations land on the pod in
        the same write."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": dict(annotations)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return await self.post(
            f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding", body
        )
