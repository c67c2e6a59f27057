"""The `gpufleet operator` command: argument parsing for gpufleet/cli.py, and `python -m`."""

from __future__ import annotations

import argparse
import sys

from gpufleet.operator.app import OperatorOptions, run


def add_operator_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "operator", help="run the TrainingJob operator and the gpufleet scheduler"
    )
    _arguments(parser)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster)")
    parser.add_argument(
        "--namespace",
        default=None,
        help="handle TrainingJobs of this namespace only (default: all)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="serve Prometheus metrics on 127.0.0.1:PORT"
    )
    parser.add_argument(
        "--node-failure-grace",
        type=float,
        default=30.0,
        help="seconds a node may be NotReady before its gangs are restarted elsewhere",
    )
    parser.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        help="seconds a standby waits after the leader stops renewing before taking over",
    )


def run_operator(args: argparse.Namespace) -> int:
    return run(
        OperatorOptions(
            kubeconfig=args.kubeconfig,
            namespace=args.namespace,
            log_level=args.log_level,
            metrics_port=args.metrics_port,
            node_failure_grace=args.node_failure_grace,
            lease_duration=args.lease_duration,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufleet operator", description=__doc__)
    _arguments(parser)
    return run_operator(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
