"""`gpufleet device-plugin`: the fake GPU device plugin as a command (composition root).

It works out the node's GPUs (from a fleet file, or from the node's GFD labels), optionally
labels the node like GFD would, and serves every resource to the kubelet until SIGTERM or
SIGINT; SIGHUP re-reads the health file at once. API access (a kubeconfig, or the in-cluster
service account) is optional with a fleet file: without it the plugin finds its pool by node
name and packs allocations instead of following the scheduler's assignment.
"""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.agent.deviceplugin.devices import (
    POOL_LABEL,
    NodeGpus,
    gpus_from_fleet,
    gpus_from_labels,
)
from gpufleet.agent.deviceplugin.server import (
    DEFAULT_PLUGIN_DIR,
    DevicePlugin,
    NoPods,
    PluginSettings,
    PodSource,
)
from gpufleet.agent.node_command import (
    add_common_arguments,
    core_api,
    setup_logging,
    stop_on_signals,
)
from gpufleet.model.fleet import load_fleet
from gpufleet.model.input_error import InputError
from gpufleet.model.migparted import load_default_configs

log = logging.getLogger("gpufleet.deviceplugin")


class KubePods:
    """The pods bound to one node, listed from the API server on each call."""

    def __init__(self, api: client.CoreV1Api, node: str) -> None:
        self._api = api
        self._node = node

    def pods(self) -> list[Mapping[str, Any]]:
        pods = self._api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self._node}", _request_timeout=5
        )
        # The API's own (camelCase) shape, as the scheduler writes and reads it.
        items: list[Mapping[str, Any]] = self._api.api_client.sanitize_for_serialization(pods.items)
        return items


def add_device_plugin_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    parser = subparsers.add_parser(
        "device-plugin",
        help="fake NVIDIA GPU device plugin for a kubelet (kind clusters, tests)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    add_common_arguments(
        parser, "API access for pod assignments and labels (default: in-cluster, when in a pod)"
    )
    parser.add_argument(
        "--fleet",
        type=Path,
        default=None,
        help="fleet YAML giving the node's GPUs by its pool (default: read the node's GFD labels)",
    )
    parser.add_argument(
        "--mig-layouts",
        type=Path,
        default=None,
        help="mig-parted config file naming the MIG layouts (default: gpufleet's shipped layouts)",
    )
    parser.add_argument(
        "--device-plugin-dir",
        type=Path,
        default=DEFAULT_PLUGIN_DIR,
        help=f"the kubelet's device-plugin folder (default: {DEFAULT_PLUGIN_DIR})",
    )
    parser.add_argument(
        "--device-dir",
        type=Path,
        default=PluginSettings.device_dir,
        help=f"where the fake device nodes are made (default: {PluginSettings.device_dir})",
    )
    parser.add_argument(
        "--health-file",
        type=Path,
        default=None,
        help="file listing unhealthy device ids, one per line (re-read on change and on SIGHUP)",
    )
    parser.add_argument(
        "--label-node",
        action="store_true",
        help="write the GFD labels of the fake GPUs onto the node",
    )
    parser.add_argument(
        "--lend-devices",
        action="store_true",
        help="advertise each whole GPU twice, the second device for a pod borrowing it from "
        "an asleep standby (gpufleet must then be the only scheduler of GPU pods on the node)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=PluginSettings.poll_interval_s,
        help="seconds between checks of the kubelet's socket and the health file (default: 1)",
    )


def _mig_configs(path: Path | None) -> dict[str, Any]:
    if path is None:
        return load_default_configs()
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise InputError("file not found", source=path) from None
    except yaml.YAMLError as exc:
        raise InputError.from_yaml_error(exc, path) from None
    if not isinstance(doc, dict) or "mig-configs" not in doc:
        raise InputError("not a mig-parted config (no 'mig-configs' mapping)", source=path)
    return doc


def node_gpus(args: argparse.Namespace, api: client.CoreV1Api | None) -> NodeGpus:
    """The node's GPUs from the fleet file or, without one, from its GFD labels."""
    labels: dict[str, str] = {}
    if api is not None:
        try:
            meta = api.read_node(args.node_name).metadata
        except ApiException as exc:
            if exc.status == 404:
                raise InputError("no such node", field="--node-name") from None
            raise RuntimeError(f"cannot read node {args.node_name!r}: {exc.reason}") from exc
        labels = (meta.labels if meta is not None else None) or {}
    configs = _mig_configs(args.mig_layouts)
    if args.fleet is not None:
        fleet = load_fleet(args.fleet)
        try:
            return gpus_from_fleet(fleet, args.node_name, configs, labels.get(POOL_LABEL))
        except ValueError as exc:  # no pool for this node, or a pool these GPUs cannot be
            raise InputError(str(exc), source=args.fleet) from None
    if api is None:
        raise InputError(
            "without --fleet the plugin reads the node's GFD labels: give --kubeconfig",
            field="--fleet",
        )
    try:
        return gpus_from_labels(labels, configs)
    except ValueError as exc:
        raise InputError(str(exc), field=f"node {args.node_name} labels") from None


def run_device_plugin(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    if not args.node_name:
        raise InputError("required (or $NODE_NAME)", field="--node-name")
    if args.poll_interval <= 0:
        raise InputError("must be positive", field="--poll-interval")
    api = core_api(args.kubeconfig)
    gpus = replace(node_gpus(args, api), lend_devices=args.lend_devices)
    if args.label_node:
        if api is None:
            raise InputError("needs API access: give --kubeconfig", field="--label-node")
        try:
            api.patch_node(args.node_name, {"metadata": {"labels": gpus.labels()}})
        except ApiException as exc:
            raise RuntimeError(f"cannot label node {args.node_name!r}: {exc.reason}") from exc
        log.info("labelled node %s with the GFD labels of its fake GPUs", args.node_name)
    pods: PodSource = KubePods(api, args.node_name) if api is not None else NoPods()
    settings = PluginSettings(
        plugin_dir=args.device_plugin_dir,
        device_dir=args.device_dir,
        health_file=args.health_file,
        poll_interval_s=args.poll_interval,
    )
    plugin = DevicePlugin(gpus, settings, pods)
    resources = {r: len(d) for r, d in gpus.by_resource().items()}
    log.info("node %s: %s, %s", args.node_name, gpus.gpu_type, resources)
    stop = stop_on_signals(plugin.wake)
    signal.signal(signal.SIGHUP, lambda _s, _f: plugin.wake())
    plugin.run(stop)
    return 0
