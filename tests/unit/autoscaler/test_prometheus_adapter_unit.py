"""Unit tests of the Prometheus metrics adapter in isolation (httpx.MockTransport, no server).

Aspects under test: the default selector and selector normalisation (braces, escaping, the added
pool matcher); the PromQL built per role (vLLM names and their underscore-escaped spelling, rate
window, staleness filter, timestamp search horizon, quantiles); the request (POST to
`/api/v1/query` under a path prefix, `time=now`); parsing a vector into a `MetricsSample` (NaN
and absent fields -> None, timestamp from the newest sample or `now`); every remote failure
mapped to `MetricsUnavailable` with a message naming the URL and the cause; client ownership.
The same adapter is tested against a real Prometheus in tests/integration.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs

import httpx
import pytest

from gpufleet.autoscaler.prometheus import (
    FIELD_LABEL,
    MetricsUnavailable,
    PrometheusMetrics,
    build_query,
    default_selector,
)
from gpufleet.core.autoscaling_types import LatencyQuantiles, MetricsSample, PoolRole

URL = "http://prom.example:9090/prom"
NOW = 1_800_000_000.0
SELECTOR = default_selector("team-a", "chat")

Handler = Callable[[httpx.Request], httpx.Response]


def vector(fields: dict[str, str]) -> dict[str, object]:
    """A successful instant-query answer with one sample per field."""
    result = [{"metric": {FIELD_LABEL: k}, "value": [NOW, v]} for k, v in fields.items()]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def adapter(handler: Handler, **kwargs: object) -> PrometheusMetrics:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    return PrometheusMetrics(URL, client=client, **kwargs)  # type: ignore[arg-type]


def answer(body: object, status: int = 200) -> Handler:
    return lambda request: httpx.Response(status, json=body)


def sample(handler: Handler, role: PoolRole = PoolRole.PREFILL) -> MetricsSample:
    with adapter(handler) as metrics:
        return metrics.sample(SELECTOR, "prefill", role, NOW, 30.0)


# --- selectors and queries ------------------------------------------------------------------


def test_default_selector_uses_the_label_convention() -> None:
    assert default_selector("ns", "job") == 'namespace="ns",servingjob="job"'
    assert default_selector('a"b', "c\\d") == 'namespace="a\\"b",servingjob="c\\\\d"'


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param('model_name="m"', '{model_name="m",pool="p-1"}', id="bare-matchers"),
        pytest.param('{model_name="m"}', '{model_name="m",pool="p-1"}', id="with-braces"),
        pytest.param('model_name="m", ', '{model_name="m",pool="p-1"}', id="trailing-comma"),
        pytest.param("", '{pool="p-1"}', id="empty"),
    ],
)
def test_the_pool_matcher_is_added_to_any_selector(selector: str, expected: str) -> None:
    query = build_query(selector, "p-1", PoolRole.DECODE, rate_window_s=60, stale_after_s=60)
    assert f"vllm:num_requests_running{expected}" in query


@pytest.mark.parametrize(
    ("role", "present", "absent"),
    [
        pytest.param(PoolRole.PREFILL, ["ttft_p50", "ttft_p99"], ["itl_p50"], id="prefill"),
        pytest.param(PoolRole.DECODE, ["itl_p50", "itl_p90"], ["ttft_p50"], id="decode"),
        pytest.param(PoolRole.UNIFIED, ["ttft_p90", "itl_p99"], [], id="unified"),
    ],
)
def test_latency_quantiles_are_queried_per_role(
    role: PoolRole, present: list[str], absent: list[str]
) -> None:
    query = build_query(SELECTOR, "x", role, rate_window_s=60, stale_after_s=60)
    for name in present:
        assert f'"{FIELD_LABEL}", "{name}"' in query
    for name in absent:
        assert f'"{name}"' not in query


def test_query_reads_vllm_names_both_spellings_window_and_staleness() -> None:
    query = build_query(SELECTOR, "prefill", PoolRole.UNIFIED, rate_window_s=45, stale_after_s=90)
    sel = '{namespace="team-a",servingjob="chat",pool="prefill"}'
    for name in (
        "vllm:request_success_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
    ):
        assert f"rate({name}{sel}[45s])" in query
        assert f"rate({name.replace(':', '_')}{sel}[45s])" in query
    assert f"(vllm:kv_cache_usage_perc{sel} and (timestamp(vllm:kv_cache_usage_perc{sel})" in query
    assert "> time() - 90)" in query
    assert "histogram_quantile(0.99, sum by (le) (" in query
    assert "count(count by (instance) (" in query
    # The timestamp search looks two staleness periods back, at most 120 steps.
    assert "[180s:2s])" in query
    assert query.count("label_replace(") == 9 + 6


# --- parsing --------------------------------------------------------------------------------


def test_a_full_answer_becomes_a_sample_and_the_request_is_an_instant_query() -> None:
    seen: list[httpx.Request] = []
    fields = {
        "request_rate": "2.5",
        "prompt_token_rate": "2500",
        "generation_token_rate": "125",
        "num_waiting": "3",
        "num_running": "7",
        "kv_cache_usage": "0.25",
        "ready_replicas": "2",
        "ts_live": str(NOW - 1.5),
        "ts_history": str(NOW - 2.5),
        "ttft_p50": "0.1",
        "ttft_p90": "0.2",
        "ttft_p99": "0.4",
    }

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=vector(fields))

    got = sample(handler)
    assert got == MetricsSample(
        timestamp=NOW - 1.5,
        request_rate=2.5,
        prompt_token_rate=2500.0,
        generation_token_rate=125.0,
        num_waiting=3.0,
        num_running=7.0,
        ttft=LatencyQuantiles(0.1, 0.2, 0.4),
        itl=None,
        kv_cache_usage=0.25,
        ready_replicas=2,
    )
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == f"{URL}/api/v1/query"
    form = parse_qs(request.content.decode())
    assert form["time"] == [f"{NOW:.3f}"]
    assert form["timeout"] == ["5"]
    assert 'pool="prefill"' in form["query"][0]


def test_missing_and_nan_fields_are_none_and_history_gives_the_timestamp() -> None:
    # Exporter stopped: only the history subquery still sees its last sample; histogram NaN.
    fields = {"ts_history": str(NOW - 40), "ttft_p50": "NaN", "ttft_p90": "NaN"}
    got = sample(answer(vector(fields)))
    assert got == MetricsSample(timestamp=NOW - 40)


def test_no_series_at_all_means_a_sample_at_now_with_every_field_none() -> None:
    assert sample(answer(vector({}))) == MetricsSample(timestamp=NOW)


def test_infinite_quantile_is_unknown() -> None:
    fields = {"itl_p50": "0.01", "itl_p90": "0.02", "itl_p99": "+Inf", "ts_live": str(NOW)}
    assert sample(answer(vector(fields)), PoolRole.DECODE).itl is None


# --- failures -------------------------------------------------------------------------------


def raising(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


@pytest.mark.parametrize(
    ("handler", "fragments"),
    [
        pytest.param(
            raising(httpx.ConnectError("[Errno 111] Connection refused")),
            ["cannot connect", "Connection refused"],
            id="connection-refused",
        ),
        pytest.param(
            raising(httpx.ReadTimeout("timed out")), ["no answer within 5 s"], id="timeout"
        ),
        pytest.param(
            raising(httpx.RemoteProtocolError("peer closed connection")),
            ["request failed", "peer closed"],
            id="protocol-error",
        ),
        pytest.param(
            lambda r: httpx.Response(503, text="Service Unavailable\n" + "x" * 1000),
            ["HTTP 503: Service Unavailable x", "…"],
            id="http-503-text",
        ),
        pytest.param(
            answer(
                {
                    "status": "error",
                    "errorType": "bad_data",
                    "error": '1:12: parse error: unexpected "=" in label matching',
                },
                400,
            ),
            [
                "HTTP 400, bad_data",
                "parse error: unexpected",
                'selector {namespace="team-a",servingjob="chat",pool="prefill"}; query: label_',
            ],
            id="bad-promql",
        ),
        pytest.param(
            answer({"status": "error", "errorType": "timeout", "error": "query timed out"}, 503),
            ["HTTP 503, timeout: query timed out"],
            id="query-timeout",
        ),
        pytest.param(
            lambda r: httpx.Response(200, text="<html>Grafana</html>"),
            ["not a Prometheus API answer: <html>Grafana</html>"],
            id="not-prometheus",
        ),
        pytest.param(
            answer({"status": "success", "data": {"resultType": "matrix", "result": []}}),
            ["expected a vector result, got 'matrix'"],
            id="wrong-result-type",
        ),
        pytest.param(
            answer({"status": "success", "data": {"resultType": "vector", "result": [{}]}}),
            ["malformed result element {}"],
            id="malformed-element",
        ),
        pytest.param(
            answer(
                {
                    "status": "success",
                    "data": {
                        "resultType": "vector",
                        "result": [
                            {"metric": {FIELD_LABEL: "num_running"}, "value": [NOW, "1"]},
                            {"metric": {FIELD_LABEL: "num_running"}, "value": [NOW, "2"]},
                        ],
                    },
                }
            ),
            ["field 'num_running' answered twice"],
            id="duplicate-field",
        ),
    ],
)
def test_remote_failures_raise_metrics_unavailable_naming_url_and_cause(
    handler: Handler, fragments: list[str]
) -> None:
    with pytest.raises(MetricsUnavailable) as info:
        sample(handler)
    message = str(info.value)
    assert message.startswith(f"Prometheus at {URL}: ")
    assert info.value.url == URL
    for fragment in fragments:
        assert fragment in message


def test_invalid_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        PrometheusMetrics(URL, timeout_s=0)
    with pytest.raises(ValueError, match="rate_window_s"):
        PrometheusMetrics(URL, rate_window_s=0)
    with (
        adapter(answer(vector({}))) as metrics,
        pytest.raises(ValueError, match="stale_after_s"),
    ):
        metrics.sample(SELECTOR, "p", PoolRole.DECODE, NOW, 0)


def test_close_closes_only_a_client_the_adapter_created() -> None:
    shared = httpx.Client(transport=httpx.MockTransport(answer(vector({}))))
    with PrometheusMetrics(URL, client=shared):
        pass
    assert not shared.is_closed
    shared.close()
    own = PrometheusMetrics(URL)
    own.close()
    assert own._client.is_closed
