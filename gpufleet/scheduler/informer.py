"""List-then-watch of one resource into a callback, on a background thread.

Objects are handled as the API's JSON (dicts), never deserialised into client models: the
scheduler reads a few fields of thousands of pods per second, and model deserialisation would
dominate its CPU time. On any watch error (including 410 Gone) the informer lists again and hands
the whole list to `on_list`, so the consumer's store is rebuilt from the cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

log = logging.getLogger("gpufleet.scheduler.informer")

Obj = dict[str, Any]
ListFn = Callable[..., Any]

# Seconds a stop waits in all for its informers' threads once their watches are ended (they end
# within milliseconds unless in a list or a callback; they are daemon threads either way).
INFORMERS_STOP_S = 0.5


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited JSON events of a streaming watch response."""
    buffer = b""
    for chunk in response.stream(amt=65536, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


class Informer:
    """Keeps `on_list(items)` / `on_event(type, obj)` fed with one resource's state."""

    def __init__(
        self,
        name: str,
        list_fn: ListFn,
        on_list: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
        stop: threading.Event,
        watch_timeout: int = 30,
        **list_kwargs: Any,
    ) -> None:
        self.name = name
        self._list = list_fn
        self._on_list = on_list
        self._on_event = on_event
        self._stop = stop
        self._timeout = watch_timeout
        self._kwargs = list_kwargs
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)
        self._response: Any = None  # the watch being read, under _lock
        self._lock = threading.Lock()

    def start(self) -> Informer:
        self._thread.start()
        return self

    def interrupt(self) -> None:
        """Once `stop` is set: end the watch's blocked read now rather than at its next event
        or the server's timeout (up to `watch_timeout`). Closing the response from here would
        wait on the reader's own lock; shutting its socket down for reading does not, and the
        reader sees the end of the stream (or an error, which a stopped informer ignores)."""
        with self._lock:
            if self._response is not None:
                # Raises once urllib3 gave the connection back (the stream had just ended).
                with contextlib.suppress(ValueError, RuntimeError, OSError):
                    self._response.shutdown()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _relist(self) -> str:
        raw = self._list(_preload_content=False, **self._kwargs)
        doc = json.loads(raw.data)
        self._on_list(doc.get("items") or [])
        self.synced.set()
        return str(doc["metadata"]["resourceVersion"])

    def _run(self) -> None:
        version: str | None = None
        failing_since: float | None = None  # an outage is logged when it starts and ends
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                    if failing_since is not None:
                        log.warning(
                            "%s: listed again after %.1fs of failures",
                            self.name, time.monotonic() - failing_since,
                        )  # fmt: skip
                        failing_since = None
                version = self._watch(version)
            except ApiException as exc:
                log.info("%s: watch ended (%s); listing again", self.name, exc.status)
                version = None
                self._stop.wait(0.5)
            except Exception as exc:  # connection reset, API server restart: list again
                if self._stop.is_set():
                    return
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning(
                        "%s: watch failed (%s); listing again until it works", self.name, exc
                    )
                version = None
                self._stop.wait(1.0)

    def _watch(self, version: str) -> str | None:
        response = self._list(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeout,
            _preload_content=False,
            **self._kwargs,
        )
        with self._lock:
            stopping = self._stop.is_set()  # `interrupt` may have run before this watch opened
            if not stopping:
                self._response = response
        try:
            if stopping:
                return version
            for line in _lines(response):
                if self._stop.is_set():
                    return version
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return None  # usually 410 Gone: the version is too old, list again
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._on_event(kind, obj)
        finally:
            with self._lock:
                self._response = None
            if self._stop.is_set():
                response.close()  # left part-read or shut down: its connection is not reusable
            response.release_conn()
        return version


def stop_all(
    informers: Iterable[Informer], stop: threading.Event, timeout: float = INFORMERS_STOP_S
) -> None:
    """Set `stop`, end every informer's watch and wait up to `timeout` in all for their threads
    (daemon threads: one still in a list or a callback ends on its own)."""
    stop.set()
    informers = list(informers)
    for informer in informers:
        informer.interrupt()
    deadline = time.monotonic() + timeout
    for informer in informers:
        informer.join(max(0.0, deadline - time.monotonic()))
