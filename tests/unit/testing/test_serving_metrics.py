"""Unit tests of the switched serving metrics addresses the autoscaler e2e tests scrape.

Aspects under test: the addresses stay the same while the served simulator changes; each series
is the served simulator's own (values from its model at scrape time) with the given labels
added; serving nothing exposes no vLLM series; a new simulator replaces the old one whole.
"""

from __future__ import annotations

import urllib.request

from gpufleet.sim.serving.exporter import ServingExporter
from gpufleet.sim.serving.model import ServingConfig, ServingModel
from gpufleet.sim.serving.profiles import replica_profile
from gpufleet.sim.serving.trace import Request
from gpufleet.testing.serving_metrics import SwitchedServingMetrics

POOLS = ("prefill", "decode")


def model(prompt_tokens: int) -> ServingModel:
    config = ServingConfig.of(replica_profile("H100-SXM-80GB"), 1, 1, 0.0)
    served = ServingModel(config, (Request(0, 0.0, prompt_tokens, 4),))
    served.advance_to(5.0)
    return served


def scrape(address: str) -> dict[str, str]:
    """The exposed sample lines by series name (up to the value), comments left out."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    lines = [x for x in text.splitlines() if x and not x.startswith("#")]
    return {x.rsplit(" ", 1)[0]: x.rsplit(" ", 1)[1] for x in lines}


def prompt_tokens(series: dict[str, str]) -> dict[str, float]:
    return {k: float(v) for k, v in series.items() if k.startswith("vllm:prompt_tokens_total{")}


def test_the_addresses_expose_the_served_simulator_with_its_labels() -> None:
    first, second = ServingExporter(model(300)), ServingExporter(model(700))
    with SwitchedServingMetrics(POOLS) as switched:
        addresses = dict(switched.addresses)
        assert sorted(addresses) == sorted(POOLS)
        assert switched.targets() == [(addresses[p], {}) for p in POOLS]
        assert not any(k.startswith("vllm:") for k in scrape(addresses["prefill"]))

        switched.serve(first, {"namespace": "a", "servingjob": "coder"})
        (series, value), *rest = prompt_tokens(scrape(addresses["prefill"])).items()
        assert not rest and value == 300
        for label in ('namespace="a"', 'servingjob="coder"', 'pool="prefill"'):
            assert label in series, series
        assert 'pool="decode"' in next(iter(prompt_tokens(scrape(addresses["decode"]))))

        switched.serve(second, {"namespace": "b", "servingjob": "coder"})
        assert switched.addresses == addresses
        ((series, value),) = prompt_tokens(scrape(addresses["prefill"])).items()
        assert value == 700 and 'namespace="b"' in series and 'namespace="a"' not in series

        switched.serve(None)
        assert not any(k.startswith("vllm:") for k in scrape(addresses["prefill"]))
