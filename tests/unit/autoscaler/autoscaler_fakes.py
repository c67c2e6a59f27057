"""A scripted metrics source for the autoscaler's unit tests: answers are a function of
(pool, now), steady load by default, and every call is recorded."""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.core.autoscaling_types import LatencyQuantiles, MetricsSample, PoolRole

Script = Callable[[str, float], MetricsSample]


def load(prompt_tps: float, gen_tps: float) -> Script:
    """Steady traffic of 2,000-token prompts and 200-token answers, latencies within SLO."""

    def sample(pool: str, now: float) -> MetricsSample:
        requests = prompt_tps / 2000.0
        return MetricsSample(
            timestamp=now,
            request_rate=requests,
            prompt_token_rate=prompt_tps,
            generation_token_rate=gen_tps,
            num_waiting=0.0,
            num_running=gen_tps * 0.02,
            ttft=LatencyQuantiles(0.2, 0.4, 0.6),
            itl=LatencyQuantiles(0.01, 0.02, 0.03),
            kv_cache_usage=0.2,
        )

    return sample


class ScriptedSource:
    """A MetricsSource whose answer is a function of (pool, now); may raise."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls: list[tuple[str, str, PoolRole, float, float]] = []
        self.closed = False

    def sample(
        self, selector: str, pool: str, role: PoolRole, now: float, stale_after_s: float
    ) -> MetricsSample:
        self.calls.append((selector, pool, role, now, stale_after_s))
        return self.script(pool, now)

    def close(self) -> None:
        self.closed = True
