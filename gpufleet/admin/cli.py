"""`gpufleet admin`: serve the admin API on its own, for development (argument parsing)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from gpufleet.admin.settings import AdminSettings


def add_admin_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "admin", help="serve the admin API and dashboard on their own (development)"
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8443, help="port to listen on")
    parser.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate for TLS")
    parser.add_argument("--tls-key", type=Path, default=None, help="PEM key for TLS")
    parser.add_argument(
        "--self-signed",
        type=Path,
        default=None,
        metavar="DIR",
        help="serve TLS with a self-signed certificate kept in DIR (made once with openssl)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )


def run_admin(args: argparse.Namespace) -> int:
    from gpufleet.admin.server import run_standalone
    from gpufleet.admin.tls import ensure_self_signed
    from gpufleet.scheduler.runtime import api_client

    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    cert, key = args.tls_cert, args.tls_key
    if args.self_signed is not None:
        cert, key = ensure_self_signed(args.self_signed)
    settings = AdminSettings(host=args.host, port=args.port, tls_cert_file=cert, tls_key_file=key)
    return run_standalone(api_client(args.kubeconfig), settings)
