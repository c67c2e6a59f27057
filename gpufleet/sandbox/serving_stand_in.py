"""The sandbox's stand-in for a ServingJob's vLLM servers and the Prometheus that scrapes them.

`python -m gpufleet.sandbox.serving_stand_in` runs, until SIGTERM, a `LiveServingSim` for one
disaggregated ServingJob (its pool sizes are the job's Running pods, so the autoscaler's
decisions change what the simulated servers can do) fed by a repeating load pattern, and a real
Prometheus (Debian's `prometheus`) scraping the simulated `/metrics` endpoints with the
`namespace`/`servingjob`/`pool` labels the autoscaler selects on. When both are up it writes
`serving.json` in its state directory: the Prometheus URL, and the PIDs and markers the sandbox
needs to stop them.

The simulated replicas are a Llama-3.1-8B-class model on one GPU each, each running at the
roofline speed (`gpufleet.sim.serving.profiles`) of the GPU type the scheduler put its pod on (the
pod's `gpufleet.io/gpu-type`). The A100-80GB profile is only the fallback, for a pod without a
type, on a MIG slice, or on a type without a profile (V100-32GB, T4). The load repeats: five
quiet minutes at 1 request/s, then a four-minute burst at 8 requests/s, every request 4,096
prompt tokens and 512 generated tokens. A burst's 33,000 prompt tokens/s need two H100 prefill
replicas (about 24,700 tokens/s each) or five A100 ones (7,800), within the example's six, so
both pools grow in each burst and shrink after it on whichever type the scheduler picks.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from gpufleet.sandbox.prometheus_server import PrometheusServer
from gpufleet.scheduler.runtime import api_client
from gpufleet.sim.serving.live import LiveServingSim, PodLister
from gpufleet.sim.serving.model import ServingConfig
from gpufleet.sim.serving.profiles import replica_profile
from gpufleet.sim.serving.trace import Request, poisson_requests

__all__ = ["INFO_FILE", "demo_load", "kube_pods", "main"]

INFO_FILE: Final = "serving.json"
QUIET_S, BURST_S = 300.0, 240.0
QUIET_RATE, BURST_RATE = 1.0, 8.0
PROMPT_TOKENS, OUTPUT_TOKENS = 4096, 512
SCRAPE_INTERVAL_S = 5.0

log = logging.getLogger("gpufleet.sandbox.serving_stand_in")


def demo_load(hours: float, seed: int = 0) -> tuple[Request, ...]:
    """The repeating quiet/burst pattern for `hours`, as Poisson arrivals."""
    duration = hours * 3600.0
    schedule: list[tuple[float, float]] = []
    t = 0.0
    while t < duration:
        schedule += [(t, QUIET_RATE), (t + QUIET_S, BURST_RATE)]
        t += QUIET_S + BURST_S
    return poisson_requests(
        schedule,
        duration,
        prompt_tokens=PROMPT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        seed=seed,
    )


def kube_pods(core: client.CoreV1Api, namespace: str) -> PodLister:
    """A `LiveServingSim`'s view of the cluster: the pods of `namespace` that match a label
    selector, read from the Kubernetes API."""

    def list_pods(selector: str) -> list[dict[str, Any]]:
        raw: Any = core.list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(raw.data)["items"]
        return items

    return list_pods


def serving_config() -> ServingConfig:
    profile = replica_profile("A100-SXM-80GB")  # the fallback; see the module docstring
    return ServingConfig.of(profile)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gpufleet.sandbox.serving_stand_in")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--servingjob", required=True)
    parser.add_argument("--hours", type=float, default=8.0, help="length of the load pattern")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    state_dir: Path = args.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    core = client.CoreV1Api(api_client(args.kubeconfig))
    requests = demo_load(args.hours)
    with PrometheusServer(state_dir / "prometheus", scrape_interval_s=SCRAPE_INTERVAL_S) as prom:
        pods = kube_pods(core, args.namespace)
        sim = LiveServingSim(pods, args.namespace, args.servingjob, serving_config(), requests)
        with sim:
            prom.reload(sim.scrape_targets())
            info: dict[str, Any] = {
                "prometheus_url": prom.url,
                "prometheus_pid": prom.pid,
                "prometheus_marker": str(prom.config_path),
                "endpoints": sim.endpoints,
            }
            (state_dir / INFO_FILE).write_text(json.dumps(info, indent=2))
            log.info("serving %s/%s; Prometheus at %s", args.namespace, args.servingjob, prom.url)
            stop.wait()
    (state_dir / INFO_FILE).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
