"""The `gpufleet` command."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

from gpufleet.admin.cli import CLIENT_COMMANDS, add_admin_parsers, run_admin, run_client
from gpufleet.agent.deviceplugin.plugin_command import add_device_plugin_parser, run_device_plugin
from gpufleet.agent.powercap.agent_command import add_node_agent_parser, run_node_agent
from gpufleet.app.command import add_operator_parser, run_operator
from gpufleet.cliargs import OneLineParser, add_subcommands, input_error_exit
from gpufleet.model.input_error import InputError
from gpufleet.sandbox.binaries import BuildError
from gpufleet.sim.simulate_command import add_simulate_parser, run_simulate


def _sandbox_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sandbox = subparsers.add_parser(
        "sandbox", help="local control plane with a simulated GPU fleet"
    )
    sandbox.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where the sandbox keeps its state (default: $GPUFLEET_SANDBOX_DIR or "
        "~/.local/state/gpufleet/sandbox)",
    )
    actions = sandbox.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="build (once), start, and create the fleet's nodes")
    up.add_argument("--fleet", type=Path, default=None, help="fleet YAML (default: built-in)")
    up.add_argument(
        "--operator", action="store_true", help="also run `gpufleet operator` in the background"
    )
    up.add_argument(
        "--apf",
        action="store_true",
        help="start the API server with API Priority and Fairness (throttling with 429)",
    )
    demo = actions.add_parser("demo", help="`up`, apply the examples, show fleet and jobs")
    demo.add_argument("--fleet", type=Path, default=None, help="fleet YAML (default: built-in)")
    demo.add_argument("--examples", type=Path, default=Path("examples"), help="manifest folder")
    actions.add_parser("down", help="stop every sandbox process and delete its data")
    actions.add_parser("status", help="print the state of every component as JSON")
    actions.add_parser("kubeconfig", help="print the kubeconfig path")
    actions.add_parser(
        "build", help="only build the control-plane binaries and helm into the cache"
    )


def _run_sandbox(args: argparse.Namespace) -> int:
    from gpufleet.sandbox.binaries import EVERY_COMPONENT, ensure_binaries
    from gpufleet.sandbox.control_plane import Sandbox

    sandbox = Sandbox(args.state_dir)
    match args.action:
        case "build":
            ensure_binaries(components=EVERY_COMPONENT)
        case "up":
            sandbox.up(args.fleet, operator=args.operator, apf=args.apf)
        case "demo":
            from gpufleet.sandbox.demo import run_demo

            run_demo(sandbox, args.fleet, args.examples)
        case "down":
            sandbox.down()
        case "status":
            info = sandbox.status()
            print(json.dumps(info, indent=2))
            return 0 if info["running"] else 1
        case "kubeconfig":
            print(sandbox.kubeconfig)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = OneLineParser(
        prog="gpufleet", description="Kubernetes-native scheduler and autoscaler for GPU clusters"
    )
    parser.add_argument(
        "--version", action="version", version=f"gpufleet {metadata.version('gpufleet')}"
    )
    subparsers = add_subcommands(parser, "command")
    _sandbox_parser(subparsers)
    add_operator_parser(subparsers)
    add_simulate_parser(subparsers)
    add_device_plugin_parser(subparsers)
    add_admin_parsers(subparsers)
    add_node_agent_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one `gpufleet` command; bad input is one line on stderr and exit status 2."""
    args = build_parser().parse_args(argv)
    try:
        match args.command:
            case "sandbox":
                return _run_sandbox(args)
            case "operator":
                return run_operator(args)
            case "simulate":
                return run_simulate(args)
            case "device-plugin":
                return run_device_plugin(args)
            case "node-agent":
                return run_node_agent(args)
            case "admin":
                return run_admin(args)
            case command if command in CLIENT_COMMANDS:
                return run_client(args)
    except InputError as exc:
        return input_error_exit(f"gpufleet {args.command}", exc)
    except (BuildError, TimeoutError, RuntimeError, ValueError, FileNotFoundError) as exc:
        print(f"gpufleet: error: {exc}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
