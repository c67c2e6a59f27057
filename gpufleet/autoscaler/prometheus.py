"""Read one serving pool's metrics from Prometheus as a `MetricsSample` (thin adapter).

Label convention
----------------
Every series of a ServingJob's pool carries the labels `namespace`, `servingjob` and `pool`. In
a cluster they come from Prometheus' pod service discovery, relabelling the pod labels
`gpufleet.io/servingjob` and `gpufleet.io/pool` that the operator sets (and the pod's namespace);
in the sandbox they are static labels of the scrape config. `default_selector(ns, job)` gives the
matchers for the first two; `PrometheusMetrics.sample` always adds `pool="<pool>"` to whatever
selector it is given (the CRD's `prometheus.selector`, or the default).

What is queried (reference/serving.md §1.1 names, §9 rules), `w` = the rate window:

| field | PromQL (`{s}` = selector + pool) |
|---|---|
| `request_rate` | `sum(rate(vllm:request_success_total{s}[w]))` |
| `prompt_token_rate` | `sum(rate(vllm:prompt_tokens_total{s}[w]))` |
| `generation_token_rate` | `sum(rate(vllm:generation_tokens_total{s}[w]))` |
| `num_waiting` | `sum(vllm:num_requests_waiting{s})` |
| `num_running` | `sum(vllm:num_requests_running{s})` |
| `kv_cache_usage` | `avg(vllm:kv_cache_usage_perc{s})` |
| `ttft`, `itl` | `histogram_quantile(q, sum by (le) (rate(<hist>_bucket{s}[w])))`, q = .5 .9 .99 |
| `ready_replicas` | `count(count by (instance) (vllm:num_requests_running{s}))` (targets) |
| `timestamp` | `max(timestamp(...))` of the running gauge and the token counters |

Metric names: a Prometheus 2.x server negotiates OpenMetrics without asking for UTF-8 names, and
prometheus_client (which vLLM uses) then answers with `escaping=underscores`, so the series are
stored as `vllm_num_requests_running` instead of `vllm:num_requests_running`
(prometheus/client_python#1177). Every expression therefore reads the official name and, for
label sets that lack it, the escaped one (`a or b`), so either spelling works and none is
counted twice.

`request_rate` counts completions: vLLM exports no arrivals counter. The policy uses it only
to turn token rates into mean tokens per request, and completions and token counters move
together, so the ratio stays right even when completions lag arrivals under backpressure; the
demand itself comes from token rates and the waiting queue (serving.md §9 rule 1). Only the
latencies the policy reads for a role are queried: TTFT for prefill, ITL for decode, both for
unified; the other stays `None`. `ready_replicas` counts scrape targets (one per vLLM pod);
the sandbox's simulator serves a whole pool from one endpoint, so there it is 1, and the pods'
readiness (`PoolInput.ready_replicas`, which the policy prefers) is the better source.

Missing and stale data
----------------------
A field is `None` when no series answers it (absent metric, selector matching nothing, or a
histogram without observations in the window, where `histogram_quantile` gives NaN): `None` is
"unknown", never zero. Prometheus itself drops a target's series as soon as a scrape of it fails
or it leaves service discovery (staleness markers), so a scaled-down replica stops counting at
once. On top of that, every series whose newest sample is older than `stale_after_s` before
`now` counts as missing (Prometheus' lookback delta, 5 min by default, is a bound anyway).
`timestamp` is the newest sample time of the pool, searched `2 * stale_after_s` back (through
staleness markers, so a stopped exporter shows its last scrape time, and the policy sees the
sample age grow past its staleness limit and holds). When the pool has no sample at all in that
horizon, `timestamp` is `now` and every field is `None`: the policy reads it as missing data,
not stale data.

All fields come from **one** instant query (`/api/v1/query` at `time=now`): the per-field
expressions are joined with `or`, each tagged with a `gpufleet_field` label by `label_replace`,
so a sample costs one round trip and is evaluated at a single instant.

Errors
------
`MetricsUnavailable` is the only exception raised for remote failures (connection refused, a
timeout, an HTTP error status, a PromQL error, a malformed answer); its message names the URL
and what went wrong, so it can go into a ServingJob condition as is. Invalid arguments raise
`ValueError`.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Final

import httpx

from gpufleet.core.autoscaling_types import LatencyQuantiles, MetricsSample, PoolRole
from gpufleet.lifecycle import Closing

__all__ = [
    "FIELD_LABEL",
    "MetricsUnavailable",
    "PrometheusMetrics",
    "build_query",
    "default_selector",
    "escaped_name",
]

logger = logging.getLogger(__name__)

# The label that tags each field's series in the combined query.
FIELD_LABEL: Final = "gpufleet_field"
QUANTILES: Final = (0.5, 0.9, 0.99)
TTFT_HISTOGRAM: Final = "vllm:time_to_first_token_seconds"
ITL_HISTOGRAM: Final = "vllm:inter_token_latency_seconds"
# The timestamp search reaches this many staleness periods back (see the module docstring).
_HISTORY_FACTOR: Final = 2
# Resolution of the subquery that finds the last sample behind staleness markers: at most this
# many steps over the horizon, never finer than 1 s (an older answer by up to one step is the
# conservative direction: the sample only looks staler).
_HISTORY_STEPS: Final = 120
_BODY_EXCERPT: Final = 300
# Metrics present on every vLLM engine whose sample times tell how fresh the pool's data is.
CLOCK_METRICS: Final = (
    "vllm:num_requests_running",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)


def escaped_name(metric: str) -> str:
    """`metric` as stored when the scrape negotiated OpenMetrics with `escaping=underscores`."""
    return metric.replace(":", "_")


class MetricsUnavailable(Exception):
    """Prometheus could not give a pool's metrics; the message says which URL and why."""

    def __init__(self, url: str, problem: str) -> None:
        super().__init__(f"Prometheus at {url}: {problem}")
        self.url = url
        self.problem = problem


def default_selector(namespace: str, servingjob: str) -> str:
    """The label matchers of a ServingJob's series under gpufleet's label convention."""
    return f"namespace={_quote(namespace)},servingjob={_quote(servingjob)}"


def _quote(value: str) -> str:
    # PromQL string literal: JSON's escaping of backslash and double quote is the same.
    return json.dumps(value)


def _matchers(selector: str, pool: str) -> str:
    """`selector` (with or without braces) plus `pool="<pool>"`, without braces."""
    inner = selector.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    inner = inner.rstrip(",").strip()
    pool_matcher = f"pool={_quote(pool)}"
    return f"{inner},{pool_matcher}" if inner else pool_matcher


def _latencies(role: PoolRole) -> tuple[str, ...]:
    if role is PoolRole.PREFILL:
        return ("ttft",)
    if role is PoolRole.DECODE:
        return ("itl",)
    return ("ttft", "itl")


def _qname(q: float) -> str:
    return f"p{round(q * 100)}"


def build_query(
    selector: str, pool: str, role: PoolRole, *, rate_window_s: int, stale_after_s: float
) -> str:
    """The one PromQL expression whose result vector holds every field of a pool's sample."""
    s = _matchers(selector, pool)
    w = f"{rate_window_s}s"
    recent = f"time() - {_num(stale_after_s)}"

    def either(metric: str, expr: str) -> str:
        # `expr` over the official name, else over its underscore-escaped spelling (see
        # `escaped_name`); `or` keeps one series per label set, so nothing is counted twice.
        names = (metric, escaped_name(metric))
        return "(" + " or ".join(expr.format(m=f"{n}{{{s}}}") for n in names) + ")"

    def fresh(metric: str) -> str:
        # The series, restricted to those with a sample newer than the staleness limit.
        return either(metric, f"({{m}} and (timestamp({{m}}) > {recent}))")

    def rate(metric: str) -> str:
        return either(metric, f"(rate({{m}}[{w}]) and (timestamp({{m}}) > {recent}))")

    def newest(expr: str) -> str:
        # Newest sample time of the clock metrics (all series of a scrape share its time).
        return "max(" + " or ".join(either(m, expr) for m in CLOCK_METRICS) + ")"

    horizon = max(1, math.ceil(_HISTORY_FACTOR * stale_after_s))
    step = max(1, math.ceil(horizon / _HISTORY_STEPS))
    exprs: dict[str, str] = {
        "request_rate": f"sum({rate('vllm:request_success_total')})",
        "prompt_token_rate": f"sum({rate('vllm:prompt_tokens_total')})",
        "generation_token_rate": f"sum({rate('vllm:generation_tokens_total')})",
        "num_waiting": f"sum({fresh('vllm:num_requests_waiting')})",
        "num_running": f"sum({fresh('vllm:num_requests_running')})",
        "kv_cache_usage": f"avg({fresh('vllm:kv_cache_usage_perc')})",
        "ready_replicas": f"count(count by (instance) ({fresh('vllm:num_requests_running')}))",
        # Exact while the series are live; the subquery also sees through staleness markers.
        "ts_live": newest("timestamp({m})"),
        "ts_history": f"max_over_time({newest('timestamp({m})')}[{horizon}s:{step}s])",
    }
    histograms = {"ttft": TTFT_HISTOGRAM, "itl": ITL_HISTOGRAM}
    for latency in _latencies(role):
        buckets = f"sum by (le) ({rate(histograms[latency] + '_bucket')})"
        for q in QUANTILES:
            exprs[f"{latency}_{_qname(q)}"] = f"histogram_quantile({q}, {buckets})"
    return " or ".join(
        f'label_replace({expr}, "{FIELD_LABEL}", "{name}", "", "")' for name, expr in exprs.items()
    )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class PrometheusMetrics(Closing):
    """Reads `MetricsSample`s of serving pools from one Prometheus server's HTTP API.

    `client` is for tests and shared connection pools; a client passed in is not closed by
    `close()`. Thread-safe as far as httpx's client is (one request per `sample`).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        rate_window_s: int = 60,
        client: httpx.Client | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if rate_window_s < 1:
            raise ValueError("rate_window_s must be at least 1 s")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.rate_window_s = rate_window_s
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout_s)

    def sample(
        self, selector: str, pool: str, role: PoolRole, now: float, stale_after_s: float
    ) -> MetricsSample:
        """The pool's metrics at `now` (Unix seconds); see the module docstring for semantics."""
        if stale_after_s <= 0:
            raise ValueError("stale_after_s must be positive")
        query = build_query(
            selector, pool, role, rate_window_s=self.rate_window_s, stale_after_s=stale_after_s
        )
        values = self._query(query, now, context=f"selector {{{_matchers(selector, pool)}}}")
        return _to_sample(values, role, now)

    def _query(self, query: str, now: float, context: str) -> dict[str, float]:
        """Run an instant query; returns the values by field name (NaN and Inf included)."""
        endpoint = f"{self.url}/api/v1/query"
        form = {"query": query, "time": f"{now:.3f}", "timeout": f"{self.timeout_s:g}"}
        try:
            # POST: the combined query is too long to be comfortable in a URL.
            response = self._client.post(endpoint, data=form, timeout=self.timeout_s)
        except httpx.TimeoutException as exc:
            raise self._unavailable(
                f"no answer within {self.timeout_s:g} s ({type(exc).__name__})"
            ) from exc
        except httpx.ConnectError as exc:
            raise self._unavailable(f"cannot connect: {exc}") from exc
        except httpx.HTTPError as exc:
            raise self._unavailable(f"request failed: {exc}") from exc
        return self._parse(response, query, context)

    def _parse(self, response: httpx.Response, query: str, context: str) -> dict[str, float]:
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("status") == "error":
            # Prometheus' own error: bad_data (PromQL syntax), execution, timeout, unavailable.
            kind = body.get("errorType", "error")
            raise self._unavailable(
                f"HTTP {response.status_code}, {kind}: {body.get('error', '')} "
                f"({context}; query: {_excerpt(query)})",
            )
        if response.status_code != 200:
            raise self._unavailable(f"HTTP {response.status_code}: {_excerpt(response.text)}")
        if not isinstance(body, dict) or body.get("status") != "success":
            raise self._unavailable(f"not a Prometheus API answer: {_excerpt(response.text)}")
        for warning in body.get("warnings") or ():
            logger.warning("Prometheus at %s warns: %s", self.url, warning)
        data = body.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            kind = data.get("resultType") if isinstance(data, dict) else None
            raise self._unavailable(f"expected a vector result, got {kind!r}")
        values: dict[str, float] = {}
        for item in data.get("result") or ():
            try:
                name = item["metric"][FIELD_LABEL]
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise self._unavailable(
                    f"malformed result element {_excerpt(json.dumps(item))}"
                ) from exc
            if name in values:
                raise self._unavailable(f"field {name!r} answered twice")
            values[name] = value
        return values

    def _unavailable(self, problem: str) -> MetricsUnavailable:
        return MetricsUnavailable(self.url, problem)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _BODY_EXCERPT else text[:_BODY_EXCERPT] + "…"


def _finite(values: dict[str, float], name: str) -> float | None:
    value = values.get(name)
    return value if value is not None and math.isfinite(value) else None


def _quantiles(values: dict[str, float], latency: str) -> LatencyQuantiles | None:
    qs = [_finite(values, f"{latency}_{_qname(q)}") for q in QUANTILES]
    if any(q is None for q in qs):
        return None  # no observations in the window (NaN) or no histogram at all
    p50, p90, p99 = (float(q) for q in qs if q is not None)
    return LatencyQuantiles(p50, p90, p99)


def _to_sample(values: dict[str, float], role: PoolRole, now: float) -> MetricsSample:
    stamps = [
        t for t in (_finite(values, "ts_live"), _finite(values, "ts_history")) if t is not None
    ]
    ready = _finite(values, "ready_replicas")
    latencies = _latencies(role)
    return MetricsSample(
        timestamp=max(stamps) if stamps else now,
        request_rate=_finite(values, "request_rate"),
        prompt_token_rate=_finite(values, "prompt_token_rate"),
        generation_token_rate=_finite(values, "generation_token_rate"),
        num_waiting=_finite(values, "num_waiting"),
        num_running=_finite(values, "num_running"),
        ttft=_quantiles(values, "ttft") if "ttft" in latencies else None,
        itl=_quantiles(values, "itl") if "itl" in latencies else None,
        kv_cache_usage=_finite(values, "kv_cache_usage"),
        ready_replicas=None if ready is None else round(ready),
    )
