"""Helpers of the admin API's integration tests: the API served over TLS against the sandbox,
ServiceAccounts with roles, and their bound tokens (TokenRequest)."""

from __future__ import annotations

import contextlib
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.admin.rbac import READER_RULES as READER_ONLY
from gpufleet.admin.rbac import USER_RULES
from gpufleet.admin.server import AdminServer
from gpufleet.admin.tls import ensure_self_signed
from gpufleet.admin.wiring import build_context
from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.processes import free_port
from gpufleet.scheduler.runtime import api_client
from gpufleet.settings import AdminSettings, PlacementSettings
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for

# Every route of the admin API, and only the reading ones.
ADMIN_RULES = USER_RULES
READER_RULES = READER_ONLY


class AdminApi:
    """A standalone admin API (`gpufleet admin`: informers of its own) on a free loopback port
    with a self-signed certificate, its policy starting from `placement`."""

    def __init__(
        self,
        sandbox: Sandbox,
        state: Path,
        placement: PlacementSettings | None = None,
        **settings_: Any,
    ) -> None:
        cert, key = ensure_self_signed(state / "tls")
        self.cert = cert
        settings = AdminSettings(
            port=0, tls_cert_file=cert, tls_key_file=key, token_cache_ttl_s=2, **settings_
        )
        self.api = api_client(str(sandbox.kubeconfig))
        self.context = build_context(self.api, settings, placement=placement)
        self.server = AdminServer(self.context)

    def __enter__(self) -> AdminApi:
        self.server.start()
        self.url = f"https://127.0.0.1:{self.server.port}"
        wait_for(lambda: self.get("/readyz").status_code == 200, "admin API ready", 60)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.stop()
        self.api.close()  # its pooled connections, closed now rather than by the collector

    def client(self, token: str | None = None, timeout: float = 60.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(
            base_url=self.url, verify=self.ssl_context(), headers=headers, timeout=timeout
        )

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts the API's self-signed certificate."""
        return ssl.create_default_context(cafile=str(self.cert))

    def get(self, path: str, token: str | None = None, **kwargs: Any) -> httpx.Response:
        with self.client(token) as http:
            return http.get(path, **kwargs)


class Accounts:
    """ServiceAccounts in one namespace, each bound to its own rules, with bound tokens."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.rbac = client.RbacAuthorizationV1Api(kube.core.api_client)
        self._cluster_objects: list[str] = []

    def create(self, name: str, cluster_rules: list[dict[str, Any]] | None = None) -> str:
        """A ServiceAccount with `cluster_rules` granted cluster-wide; returns its token."""
        body: Any = {"metadata": {"name": name}}
        self.kube.core.create_namespaced_service_account(self.namespace, body)
        if cluster_rules:
            role = f"{self.namespace}-{name}-{uuid.uuid4().hex[:4]}"
            self.rbac.create_cluster_role({"metadata": {"name": role}, "rules": cluster_rules})
            self.rbac.create_cluster_role_binding(
                {
                    "metadata": {"name": role},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": role,
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": name, "namespace": self.namespace}
                    ],
                }
            )
            self._cluster_objects.append(role)
        return self.token(name)

    def grant_in(self, name: str, namespace: str, rules: list[dict[str, Any]]) -> None:
        """A Role and RoleBinding in `namespace` for the account `name`."""
        role = f"{name}-{uuid.uuid4().hex[:4]}"
        self.rbac.create_namespaced_role(namespace, {"metadata": {"name": role}, "rules": rules})
        self.rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.namespace}],
            },
        )

    def token(self, name: str) -> str:
        """A bound token for the account, from the TokenRequest API."""
        body: Any = {"spec": {"expirationSeconds": 3600}}
        raw: Any = self.kube.core.create_namespaced_service_account_token(
            name, self.namespace, body
        )
        return str(raw.status.token)

    def cleanup(self) -> None:
        for role in self._cluster_objects:
            with contextlib.suppress(ApiException):
                self.rbac.delete_cluster_role_binding(role)
            with contextlib.suppress(ApiException):
                self.rbac.delete_cluster_role(role)


@contextlib.contextmanager
def accounts(kube: Kube, namespace: str) -> Iterator[Accounts]:
    made = Accounts(kube, namespace)
    try:
        yield made
    finally:
        made.cleanup()


@contextlib.contextmanager
def admin_with_token(
    sandbox: Sandbox, kube: Kube, folder: Path, account: str
) -> Iterator[tuple[AdminApi, str]]:
    """A standalone admin API and the token of a fresh account `account-<n>` with
    ADMIN_RULES."""
    with accounts(kube, "default") as made, AdminApi(sandbox, folder) as api:
        token = made.create(f"{account}-{id(api) % 10_000}", ADMIN_RULES)
        wait_settled(1.0)
        yield api, token


def wait_settled(seconds: float) -> None:
    """Give RBAC caches of the API server a moment (bindings apply within a second)."""
    time.sleep(seconds)


def mig_configs(kube: Kube) -> dict[str, str | None]:
    """Each node's `nvidia.com/mig.config` label (None without one)."""
    return {
        n.metadata.name: (n.metadata.labels or {}).get(names.MIG_CONFIG_LABEL)
        for n in kube.core.list_node().items
    }


def restore_mig_configs(kube: Kube, namespace: str, before: dict[str, str | None]) -> None:
    """Put back the MIG layouts of `before` that the scheduler changed for this test's jobs
    (later test modules expect the sandbox's fleet as it was made): the namespace's jobs are
    deleted first, so the GPUs are empty when the MIG manager repartitions them."""
    for job in kube.jobs(namespace):
        kube.delete_job(namespace, job["metadata"]["name"])
    wait_for(lambda: not kube.pods(namespace), f"pods of {namespace} gone", 60)
    changed = {
        node: layout
        for node, layout in before.items()
        if layout is not None and mig_configs(kube).get(node) != layout
    }
    for node, layout in changed.items():
        body: Any = {
            "metadata": {
                "labels": {names.MIG_CONFIG_LABEL: layout, names.MIG_STATE_LABEL: "pending"}
            }
        }
        kube.core.patch_node(node, body)

    def applied() -> bool:
        nodes = {n.metadata.name: n.metadata.labels or {} for n in kube.core.list_node().items}
        return all(
            nodes[n].get(names.MIG_CONFIG_LABEL) == layout
            and nodes[n].get(names.MIG_STATE_LABEL) == "success"
            for n, layout in changed.items()
        )

    wait_for(applied, f"MIG layouts of {sorted(changed)} restored", 60)


@contextlib.contextmanager
def operator_serving_admin(
    sandbox: Sandbox, kube: Kube, folder: Path, settings_yaml: str
) -> Iterator[tuple[OperatorProcess, str, Path]]:
    """`gpufleet operator` with the settings file `settings_yaml`, serving the admin API over a
    self-signed certificate on a free port: the process, the API's URL and the certificate."""
    cert, key = ensure_self_signed(folder / "tls")
    config = folder / "settings.yaml"
    config.write_text(settings_yaml)
    port = free_port()
    proc = OperatorProcess(
        sandbox.kubeconfig,
        folder / "operator.log",
        kube.coordination,
        f"--config={config}",
        f"--admin-port={port}",
        f"--admin-tls-cert={cert}",
        f"--admin-tls-key={key}",
    )
    try:
        proc.start(timeout=180)  # a start imports the admin API's stack too: slow when loaded
        yield proc, f"https://127.0.0.1:{port}", cert
    finally:
        proc.stop()
