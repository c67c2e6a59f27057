"""vLLM's sleep endpoints, called on a standby replica's pod (opt-in: `operator.vllm_sleep_api`).

A vLLM server started with `--enable-sleep-mode` (and `VLLM_SERVER_DEV_MODE=1`, which mounts the
endpoints) sleeps on `POST /sleep?level=1` (level 1: the weights are offloaded to CPU memory and
the KV cache is discarded, freeing the GPU's memory) and wakes on `POST /wake_up`
(https://docs.vllm.ai/en/latest/features/sleep_mode/). The operator calls them on the pod's IP
and the ServingJob's `spec.port` *before* it writes the standby mark, so a mark never claims a
state the server did not reach: a failed sleep leaves the replica awake (the scale-down then
removes it instead), a failed wake leaves it marked asleep (the next tick wakes it again).
`GET /is_sleeping` (`{"is_sleeping": false}` once awake) tells the operator when a woken server
serves again, so its pod's awake condition need not wait for the pool's `wakeSeconds`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import httpx

__all__ = ["SleepApiError", "VllmSleepApi"]

TIMEOUT_S: Final = 30.0  # a level-1 sleep copies the weights to CPU memory first


class SleepApiError(RuntimeError):
    """The server did not confirm the sleep or the wake."""


class VllmSleepApi:
    """Sleeps and wakes the vLLM server of a pod over HTTP."""

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.client = httpx.Client(timeout=TIMEOUT_S, transport=transport)

    def _call(self, method: str, pod: Mapping[str, Any], port: int, path: str) -> httpx.Response:
        ip = (pod.get("status") or {}).get("podIP")
        name = pod["metadata"]["name"]
        if not ip:
            raise SleepApiError(f"pod {name} has no IP yet")
        url = f"http://{ip}:{port}{path}"
        try:
            response = self.client.request(method, url)
        except httpx.HTTPError as exc:
            raise SleepApiError(f"{method} {url} (pod {name}): {exc}") from exc
        if response.status_code != 200:
            raise SleepApiError(f"{method} {url} (pod {name}): HTTP {response.status_code}")
        return response

    def _post(self, pod: Mapping[str, Any], port: int, path: str) -> None:
        self._call("POST", pod, port, path)

    def sleep(self, pod: Mapping[str, Any], port: int) -> None:
        """Level-1 sleep: weights to CPU memory, GPU memory freed."""
        self._post(pod, port, "/sleep?level=1")

    def wake(self, pod: Mapping[str, Any], port: int) -> None:
        self._post(pod, port, "/wake_up")

    def is_sleeping(self, pod: Mapping[str, Any], port: int) -> bool:
        """Whether the server says it sleeps; SleepApiError when it does not answer clearly."""
        response = self._call("GET", pod, port, "/is_sleeping")
        try:
            answer = response.json().get("is_sleeping")
        except (ValueError, AttributeError) as exc:
            raise SleepApiError(f"/is_sleeping of pod {pod['metadata']['name']}: {exc}") from exc
        if not isinstance(answer, bool):
            raise SleepApiError(f"/is_sleeping of pod {pod['metadata']['name']}: {answer!r}")
        return answer

    def close(self) -> None:
        self.client.close()
