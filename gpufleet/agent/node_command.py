"""What every node agent's command shares: the node it runs on, API access, logging."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from kubernetes import client, config

__all__ = ["add_common_arguments", "core_api", "setup_logging", "stop_on_signals"]


def add_common_arguments(parser: argparse.ArgumentParser, kubeconfig_help: str) -> None:
    """--node-name, --kubeconfig and --log-level."""
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="this node's name (default: $NODE_NAME)",
    )
    parser.add_argument("--kubeconfig", type=Path, default=None, help=kubeconfig_help)
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")


def core_api(kubeconfig: Path | None) -> client.CoreV1Api | None:
    """API access from the kubeconfig, else in-cluster when in a pod; None otherwise."""
    if kubeconfig is not None:
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        return client.CoreV1Api(api)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return client.CoreV1Api()
    return None


def stop_on_signals(wake: Callable[[], None]) -> threading.Event:
    """An event SIGTERM and SIGINT set (and `wake` the agent's loop to see it)."""
    stop = threading.Event()
    log = logging.getLogger("gpufleet.agent")

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()
        wake()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return stop
