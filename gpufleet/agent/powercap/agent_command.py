"""`gpufleet node-agent`: the power-cap node agent as a command (composition root).

One runs on every GPU node (the chart's `nodeAgent` DaemonSet). `--limiter nvml` applies caps
through NVML (real GPUs, root on the host); `--limiter record` only records them (fake GPUs: the
sandbox, kind). Either way the caps in force are recorded on the node. Stops on SIGTERM or
SIGINT.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.agent.node_command import (
    add_common_arguments,
    core_api,
    setup_logging,
    stop_on_signals,
)
from gpufleet.agent.powercap.limiters import NvmlLimiter, PowerLimiter, RecordingLimiter
from gpufleet.agent.powercap.node_agent import NodeAgent
from gpufleet.model.input_error import InputError

log = logging.getLogger("gpufleet.nodeagent")

LIMITERS = ("nvml", "record")


def add_node_agent_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    parser = subparsers.add_parser(
        "node-agent",
        help="apply the power caps gpufleet decided to this node's GPUs (NVML)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    add_common_arguments(parser, "API access (default: in-cluster, when in a pod)")
    parser.add_argument(
        "--limiter",
        choices=LIMITERS,
        default="nvml",
        help="nvml: set the GPUs' power limits; record: fake GPUs, only record the caps "
        "(default: nvml)",
    )
    parser.add_argument(
        "--relist",
        type=float,
        default=30.0,
        help="seconds between two full lists of the node's pods (default: 30)",
    )


def _core_api(kubeconfig: Path | None) -> client.CoreV1Api:
    if kubeconfig is not None and not kubeconfig.is_file():
        raise InputError("file not found", source=kubeconfig)
    api = core_api(kubeconfig)
    if api is None:
        raise InputError("not in a pod: give --kubeconfig", field="--kubeconfig")
    return api


def _limiter(name: str) -> PowerLimiter:
    if name == "record":
        return RecordingLimiter()
    try:
        return NvmlLimiter()
    except ImportError:
        raise RuntimeError("--limiter nvml needs the nvidia-ml-py package") from None
    except Exception as exc:  # pynvml.NVMLError: no driver, no GPU
        raise RuntimeError(f"NVML is not available on this node: {exc}") from exc


def run_node_agent(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    if not args.node_name:
        raise InputError("required (or $NODE_NAME)", field="--node-name")
    if args.relist <= 0:
        raise InputError("must be positive", field="--relist")
    api = _core_api(args.kubeconfig)
    agent = NodeAgent(api, args.node_name, _limiter(args.limiter), relist_s=args.relist)
    try:
        agent.load_record()
    except ApiException as exc:
        if exc.status == 404:
            raise InputError("no such node", field="--node-name") from None
        raise RuntimeError(f"cannot read node {args.node_name!r}: {exc.reason}") from exc
    stop = stop_on_signals(agent.stop)
    log.info("node %s: applying power caps (%s)", args.node_name, args.limiter)
    agent.run(stop)
    return 0
