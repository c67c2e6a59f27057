"""Fakes shared by the operator's unit tests: a custom object as the API server stores it
(read and status-patched through a mocked client) and a metrics source of an idle server."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace
from typing import Any
from unittest import mock

from gpufleet.core.autoscaling_types import LatencyQuantiles, MetricsSample, PoolRole

VERSIONS = (str(n) for n in itertools.count(1))  # resourceVersions, as the API server counts


class StoredJob:
    """The job as the API server has it: `get` and `patch_status` are the side effects of the
    mocked client's get_namespaced_custom_object and patch_namespaced_custom_object_status."""

    def __init__(self, stored: dict[str, Any]) -> None:
        self.stored = stored

    def get(self, *_: Any, **__: Any) -> Any:
        return SimpleNamespace(data=json.dumps(self.stored).encode())

    def patch_status(self, *args: Any, **_: Any) -> Any:
        changes = args[5]["status"]
        status = {**(self.stored.get("status") or {}), **changes}
        self.stored["status"] = {k: v for k, v in status.items() if v is not None}
        self.stored["metadata"]["resourceVersion"] = next(VERSIONS)
        return mock.MagicMock()  # the raw answer, released unread

    def wire(self, custom: mock.MagicMock) -> None:
        custom.get_namespaced_custom_object.side_effect = self.get
        custom.patch_namespaced_custom_object_status.side_effect = self.patch_status


class IdleSource:
    """A metrics source that always answers, for an idle server; remembers the staleness
    bound of every sample asked for."""

    def __init__(self) -> None:
        self.stale_after: list[float] = []

    def sample(
        self, selector: str, pool: str, role: PoolRole, now: float, stale_after_s: float
    ) -> MetricsSample:
        self.stale_after.append(stale_after_s)
        return MetricsSample(
            timestamp=now, request_rate=0.1, prompt_token_rate=100.0, generation_token_rate=10.0,
            num_waiting=0.0, num_running=0.1, ttft=LatencyQuantiles(0.1, 0.2, 0.3),
            itl=LatencyQuantiles(0.01, 0.01, 0.02), kv_cache_usage=0.1,
        )  # fmt: skip

    def close(self) -> None:
        pass


class StoredJobHarness:
    """A test harness over one `StoredJob` (`self.job`): `stored` is the job as the API server
    has it, `watched()` the body the watch has delivered by now (the same)."""

    job: StoredJob

    @property
    def stored(self) -> dict[str, Any]:
        return self.job.stored

    @stored.setter
    def stored(self, value: dict[str, Any]) -> None:
        self.job.stored = value

    def watched(self) -> dict[str, Any]:
        return dict(json.loads(json.dumps(self.stored)))
