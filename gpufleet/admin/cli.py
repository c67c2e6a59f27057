"""The admin API's commands: `gpufleet admin` serves it (development); `gpufleet fleet`, `jobs`,
`whatif` and `drain` call it with the kubeconfig user's credentials (argument parsing, output).

`gpufleet admin` reads the settings root as `gpufleet operator` does (the YAML file, the
environment; its flags win), so its view of the fleet counts the pods of the scheduler named by
`scheduler.name`, and its policy starts from the `placement` group, like the operator's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpufleet.model.contract.assignment import MigState
from gpufleet.model.input_error import InputError
from gpufleet.settings import CONFIG_FILE_ENV, Settings, SettingsError, load

SERVER_ENV = "GPUFLEET_ADMIN_SERVER"
DEFAULT_SERVER = "https://127.0.0.1:8443"
DEFAULT_PORT = 8443  # of `gpufleet admin`, which always serves (admin.port 0 means serve none)
CLIENT_COMMANDS = ("fleet", "jobs", "queues", "whatif", "drain")

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def add_admin_parsers(subparsers: Subparsers) -> None:
    serve = subparsers.add_parser(
        "admin", help="serve the admin API and dashboard on their own (development)"
    )
    serve.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"YAML file of settings as `gpufleet operator` reads it (default: ${CONFIG_FILE_ENV},"
        " else none); scheduler.name, placement and admin come from it and the environment",
    )
    serve.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (setting kubeconfig; default: in-cluster)",
    )
    serve.add_argument(
        "--host", default=None, help="address to listen on (setting admin.bind_address)"
    )
    serve.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port to listen on (setting admin.port; default {DEFAULT_PORT})",
    )
    serve.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate for TLS")
    serve.add_argument("--tls-key", type=Path, default=None, help="PEM key for TLS")
    serve.add_argument(
        "--self-signed",
        type=Path,
        default=None,
        metavar="DIR",
        help="serve TLS with a self-signed certificate kept in DIR (made once with openssl)",
    )
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    fleet = _client_parser(subparsers, "fleet", "the GPU fleet: nodes, GPUs in use, MIG, power")
    fleet.add_argument("-o", "--output", choices=["table", "json"], default="table")
    jobs = _client_parser(subparsers, "jobs", "jobs: placement, why they wait, queue position")
    jobs.add_argument("-n", "--namespace", default=None, help="only this namespace")
    jobs.add_argument("--queue", default=None, help="only this queue")
    jobs.add_argument("--phase", default=None, help="only this phase, e.g. Queued")
    jobs.add_argument("-o", "--output", choices=["table", "json"], default="table")
    queues = _client_parser(
        subparsers, "queues", "GPUQueues: used, borrowed, lent and pending GPUs, shares"
    )
    queues.add_argument("-o", "--output", choices=["table", "json"], default="table")
    whatif = _client_parser(
        subparsers, "whatif", "where a manifest would run now (nothing written)"
    )
    whatif.add_argument(
        "-f", "--filename", type=Path, required=True, help="TrainingJob or ServingJob YAML"
    )
    whatif.add_argument(
        "-n", "--namespace", default=None, help="namespace (default: the manifest's)"
    )
    whatif.add_argument("-o", "--output", choices=["table", "json"], default="table")
    drain = _client_parser(
        subparsers, "drain", "move the GPU jobs off a node, whole gangs, PDBs kept"
    )
    drain.add_argument("node", help="node name")
    drain.add_argument("--dry-run", action="store_true", help="only show what would move")
    drain.add_argument("-o", "--output", choices=["table", "json"], default="table")


def _client_parser(subparsers: Subparsers, name: str, help: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=f"{help} (admin API)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig whose user's token to send")
    parser.add_argument("--context", default=None, help="kubeconfig context")
    parser.add_argument(
        "--server",
        default=None,
        help=f"admin API URL (default: ${SERVER_ENV}, else {DEFAULT_SERVER})",
    )
    parser.add_argument("--token", default=None, help="bearer token instead of the kubeconfig's")
    parser.add_argument(
        "--certificate-authority", type=Path, default=None, help="CA file to verify the API with"
    )
    parser.add_argument(
        "--insecure-skip-tls-verify", action="store_true", help="do not verify the certificate"
    )
    return parser


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
    try:
        settings = admin_settings(args, cert, key)
    except SettingsError as exc:
        print(f"gpufleet admin: error: {exc}", file=sys.stderr)
        return 2
    return run_standalone(api_client(settings.kubeconfig), settings)


def admin_settings(
    args: argparse.Namespace,
    cert: Path | None = None,
    key: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """The settings of `gpufleet admin`: its flags over the environment (default os.environ)
    over the config file over the defaults; served on DEFAULT_PORT unless a port is set.
    Raises `SettingsError`."""
    admin = {"bind_address": args.host, "port": args.port, "tls_cert_file": cert}
    flags = {"kubeconfig": args.kubeconfig, "admin": {**admin, "tls_key_file": key}}
    settings = load(flags=flags, environ=environ, config_file=args.config)
    if settings.admin.port == 0 and args.port is None:
        served = settings.admin.model_copy(update={"port": DEFAULT_PORT})
        settings = settings.model_copy(update={"admin": served})
    return settings


def run_client(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    """One of the client commands; 1 when the API refused it or a drain left gangs."""
    from gpufleet.admin.client import AdminClient, ClientError, kubeconfig_token

    try:
        token = args.token or kubeconfig_token(args.kubeconfig, args.context)
        server = args.server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER
        api = AdminClient(server, token, args.certificate_authority, args.insecure_skip_tls_verify)
        try:
            return _command(api, args, out)
        finally:
            api.close()
    except ClientError as exc:
        print(f"gpufleet {args.command}: error: {exc}", file=sys.stderr)
        return 1


def _command(api: Any, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    as_json = args.output == "json"
    match args.command:
        case "fleet":
            doc = api.fleet()
            out(json.dumps(doc, indent=2) if as_json else show_fleet(doc))
        case "jobs":
            jobs = api.jobs(namespace=args.namespace, queue=args.queue, phase=args.phase)
            out(json.dumps(jobs, indent=2) if as_json else show_jobs(jobs))
        case "queues":
            queues = api.queues()
            out(json.dumps(queues, indent=2) if as_json else show_queues(queues))
        case "whatif":
            manifest = _manifest(args.filename, args.namespace)
            doc = api.whatif(manifest)
            out(json.dumps(doc, indent=2) if as_json else show_whatif(doc))
        case "drain":
            doc = api.drain(args.node, args.dry_run)
            out(json.dumps(doc, indent=2) if as_json else show_drain(doc))
            return 0 if doc["complete"] else 1
    return 0


def _manifest(path: Path, namespace: str | None) -> dict[str, Any]:
    """The one manifest of `path`; bad input (exit status 2) when it cannot be read."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), source=path) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError("not valid YAML", source=path, line=line) from exc
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise InputError("must hold exactly one TrainingJob or ServingJob", source=path)
    manifest: dict[str, Any] = docs[0]
    if namespace:
        manifest.setdefault("metadata", {})["namespace"] = namespace
    return manifest


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    lines = [header, *rows]
    return "\n".join(
        "   ".join(str(cell).ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def show_fleet(doc: dict[str, Any]) -> str:
    rows = []
    for n in doc["nodes"]:
        state = "NotReady" if not n["ready"] else "Cordoned" if n["unschedulable"] else "Ready"
        mig = n.get("migConfig") or ""
        if mig and n.get("migConfigState") != MigState.SUCCESS:
            mig += f" ({n.get('migConfigState')})"
        rows.append(
            [n["name"], n["gpuType"], state, f"{n['gpusInUse']}/{len(n['gpus'])}", mig,
             f"{n['powerW']:.0f}"]
        )  # fmt: skip
    table = _table(["NODE", "GPU TYPE", "STATE", "GPUS IN USE", "MIG", "POWER W"], rows)
    capacity = ", ".join(
        f"{c['gpuType']}{' ' + c['migProfile'] if c.get('migProfile') else ''} "
        f"{c['allocated']}/{c['allocatable']}"
        + (f" ({c['outsideQueues']} outside queues)" if c.get("outsideQueues") else "")
        for c in doc["capacity"]
    )
    return (
        f"{table}\n\nallocated/allocatable: {capacity}\n"
        f"estimated power: {doc['powerW'] / 1000:.1f} kW; gangs waiting: {doc['pendingGangs']}"
    )


def show_jobs(jobs: list[dict[str, Any]]) -> str:
    rows = []
    for j in jobs:
        waiting = j.get("waiting")
        why = f"{waiting['reason']}: {waiting['message']}" if waiting else ""
        nodes = ",".join(sorted({r["node"] for r in j["placement"]}))
        rows.append(
            [j["namespace"], j["kind"], j["name"], j["queue"], j.get("phase") or "",
             j.get("gpuType") or "", nodes, str(j.get("queuePosition") or ""), why]
        )  # fmt: skip
    header = ["NAMESPACE", "KIND", "NAME", "QUEUE", "PHASE", "GPU TYPE", "NODES", "POS", "WHY"]
    return _table(header, rows)


def show_queues(queues: list[dict[str, Any]]) -> str:
    """One row per queue and resource; a queue without any shows one row of its counts."""
    rows = []
    for q in queues:
        active = next((c for c in q["conditions"] if c["type"] == "Active"), None)
        state = "Active" if active is None or active["status"] == "True" else active["reason"]
        jobs = f"{q['runningJobs']}/{q['pendingJobs']}"
        shares = f"{q['fairShare']:.2f}/{q['attainedShare']:.2f}"
        head = [q["name"], q.get("parent") or "", state, jobs, shares]
        for r in q["resources"] or [None]:
            if r is None:
                rows.append([*head, "", "", "", "", "", "", ""])
                continue
            kind = r["gpuType"] + (f" {r['migProfile']}" if r.get("migProfile") else "")
            numbers = [r["nominal"], r["used"], r["borrowed"], r["lent"], r["pending"], r["held"]]
            rows.append([*head, kind, *map(str, numbers)])
    header = ["QUEUE", "PARENT", "STATE", "RUN/WAIT", "FAIR/ATTAINED", "GPU TYPE", "NOMINAL",
              "USED", "BORROWED", "LENT", "PENDING", "HELD"]  # fmt: skip
    return _table(header, rows)


def show_whatif(doc: dict[str, Any]) -> str:
    job = doc["job"]
    verdict = "would run now" if doc["placed"] else "would wait"
    lines = [f"{job['kind']} {job['namespace']}/{job['name']} {verdict} (policy {doc['policy']})"]
    for gang in doc["gangs"]:
        if not gang["placed"]:
            waiting = gang["waiting"]
            lines.append(f"  {gang['gang']}: waits: {waiting['reason']}: {waiting['message']}")
            lines += _moved_for(gang)
            continue
        where = "; ".join(
            f"{r['node']} GPU {','.join(map(str, r['gpus']))}"
            + (f" slice {r['migSlice']}" if r.get("migSlice") else "")
            for r in gang["replicas"]
        )
        lines.append(f"  {gang['gang']}: {gang['gpus']} x {gang['gpuType']} on {where}")
        for victim in gang["preempts"]:
            lines.append(f"    preempts {victim['gang']} ({len(victim['pods'])} pods)")
        awaited = gang.get("waitsFor") or []  # absent from older servers' answers
        if awaited:
            evicted_for = sorted({g for a in awaited for g in a["forGang"]})
            lines.append(
                f"    waits for {', '.join(a['gang'] for a in awaited)} to exit "
                f"(evicted for {', '.join(evicted_for)})"
            )
        for change in gang["migChanges"]:
            layout = ",".join(change["layout"]) if change["layout"] else "MIG off"
            lines.append(f"    repartitions {change['node']} GPU {change['gpu']} to {layout}")
        lines += _moved_for(gang)
    return "\n".join(lines)


def _moved_for(gang: dict[str, Any]) -> list[str]:
    """The running gangs moved to make room for `gang` (absent from older servers' answers)."""
    return [
        f"    moves {m['gang']} from {','.join(m['fromNodes'])} ({m['fromGpuType']}) to "
        f"{','.join(m['toNodes'])} ({m['gpuType']}), {m['delayS']:.0f}s later"
        for m in gang.get("moves") or ()
    ]


def show_drain(doc: dict[str, Any]) -> str:
    rows = [
        [g["gang"], g["outcome"], str(len(g["pods"])), g.get("reason") or ""] for g in doc["gangs"]
    ]
    head = f"node {doc['node']}: " + ("dry run" if doc["dryRun"] else "cordoned")
    tail = "every gang moved" if doc["complete"] else "some gangs stay (see WHY)"
    if not rows:
        return f"{head}; no GPU jobs on it"
    return f"{head}\n{_table(['GANG', 'OUTCOME', 'PODS', 'WHY'], rows)}\n{tail}"
