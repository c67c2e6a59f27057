"""The informer's list-then-watch against a scripted API: events reach the consumer with the
watch's resource version carried on; a 410 Gone (an ERROR event in the stream, or the watch
request itself refused) makes it list again and hand the consumer the whole new list; a broken
connection does too."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpufleet.scheduler.informer import Informer


class Stream:
    """A watch response: newline-delimited JSON events, then the server's timeout."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.body = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        yield self.body

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class Raw:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.data = json.dumps(doc).encode()


def _pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


GONE = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}


class ScriptedApi:
    """Lists and watches answered from a script; records the versions watches started at."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []
        self.listed = 0

    def __call__(self, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            items = self.lists[min(self.listed, len(self.lists) - 1)]
            self.listed += 1
            return Raw({"metadata": {"resourceVersion": str(10 * self.listed)}, "items": items})
        self.watched_from.append(kwargs["resource_version"])
        answer = self.watches.pop(0) if self.watches else Stream([])
        if isinstance(answer, Exception):
            raise answer
        if not self.watches and answer.body == b"":
            time.sleep(0.05)  # the script is over: an idle watch
        return answer


def _run(api: ScriptedApi, until: Any) -> tuple[list[list[str]], list[tuple[str, str]]]:
    listed: list[list[str]] = []
    events: list[tuple[str, str]] = []
    stop = threading.Event()
    informer = Informer(
        "pods",
        api,
        lambda items: listed.append([i["metadata"]["name"] for i in items]),
        lambda kind, obj: events.append((kind, obj["metadata"]["name"])),
        stop,
    )
    informer.start()
    deadline = time.monotonic() + 10
    while not until(listed, events):
        assert time.monotonic() < deadline, (listed, events)
        time.sleep(0.01)
    stop.set()
    informer.join(2)
    return listed, events


def test_events_follow_the_list_from_its_version() -> None:
    api = ScriptedApi([[_pod("a", "1")]], [Stream([{"type": "ADDED", "object": _pod("b", "12")}])])
    listed, events = _run(api, lambda listed, events: events)
    assert listed[0] == ["a"] and events == [("ADDED", "b")]
    assert api.watched_from[:2] == ["10", "12"]


def test_gone_in_the_stream_lists_again() -> None:
    api = ScriptedApi(
        [[_pod("a", "1")], [_pod("a", "1"), _pod("b", "15")]],
        [Stream([GONE])],
    )
    listed, _ = _run(api, lambda listed, events: len(listed) >= 2)
    assert listed[:2] == [["a"], ["a", "b"]]
    assert api.watched_from[:2] == ["10", "20"]  # the new list's version, not the expired one


def test_gone_as_the_watch_answer_lists_again() -> None:
    api = ScriptedApi([[_pod("a", "1")], [_pod("c", "25")]], [ApiException(status=410)])
    listed, _ = _run(api, lambda listed, events: len(listed) >= 2)
    assert listed[:2] == [["a"], ["c"]]


def test_a_broken_connection_lists_again() -> None:
    api = ScriptedApi([[_pod("a", "1")], [_pod("d", "30")]], [ConnectionResetError("reset")])
    listed, _ = _run(api, lambda listed, events: len(listed) >= 2)
    assert listed[:2] == [["a"], ["d"]]
