"""Fakes and builders for the admin API's unit tests: a reviewer with fixed answers, the
sandbox's default fleet as Node objects, jobs and their pods built by the operator's builders.

The live view is the real `LiveFleet` over a real `SchedulerCache`, filled directly instead of
by informers; only the TokenReview/SubjectAccessReview adapter is faked (it is tested against
the API server in tests/integration/test_admin_auth.py).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import yaml
from kubernetes import client

from gpufleet.admin.auth import Access, RateLimiter, User
from gpufleet.admin.context import AdminContext
from gpufleet.admin.live import JobStore, LiveFleet
from gpufleet.admin.nodes import NodeActions
from gpufleet.admin.policy import PolicyStore
from gpufleet.admin.server import AdminServer
from gpufleet.admin.wiring import policy_watch
from gpufleet.model.contract import names
from gpufleet.model.fleet import load_fleet
from gpufleet.model.gpus import load_catalog
from gpufleet.model.migparted import load_default_configs
from gpufleet.operator import children
from gpufleet.operator.objects import TrainingJobObject
from gpufleet.sandbox.control_plane import default_fleet_path
from gpufleet.sandbox.node_manifests import fleet_manifests
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.settings import AdminSettings, PlacementSettings

Obj = dict[str, Any]

ADMIN = User("admin", "u-1", ("system:authenticated",))
VIEWER = User("viewer", "u-2", ("system:authenticated",))
# A loopback port nothing listens on: the "API server" of unit tests refuses connections.
UNREACHABLE = "http://127.0.0.1:9"
TOKENS = {"admin-token": ADMIN, "viewer-token": VIEWER}


@dataclass
class FakeReviewer:
    """Tokens -> users; grants as (user, verb, resource, namespace), namespace "" = all."""

    grants: set[tuple[str, str, str, str]] = field(default_factory=set)
    authentications: int = 0
    authorizations: list[tuple[str, Access]] = field(default_factory=list)

    def authenticate(self, token: str) -> User | None:
        self.authentications += 1
        return TOKENS.get(token)

    def authorize(self, user: User, access: Access) -> tuple[bool, str]:
        self.authorizations.append((user.username, access))
        what = access.path or access.resource
        for ns in {access.namespace, ""}:
            if (user.username, access.verb, what, ns) in self.grants:
                return True, ""
        return False, "no RBAC rule allows it"


def admin_grants() -> set[tuple[str, str, str, str]]:
    verbs = {
        ("list", "nodes"),
        ("patch", "nodes"),
        ("list", "trainingjobs"),
        ("list", "servingjobs"),
        ("get", "trainingjobs"),
        ("get", "servingjobs"),
        ("create", "trainingjobs"),
        ("create", "servingjobs"),
        ("list", "gpuqueues"),
        ("get", "gpuqueues"),
        ("get", "/metrics"),
    }
    return {("admin", verb, resource, "") for verb, resource in verbs}


def sandbox_nodes() -> list[Obj]:
    """The Node objects `gpufleet sandbox up` creates for the default fleet, made Ready."""
    nodes = fleet_manifests(load_fleet(default_fleet_path()), load_default_configs())
    out = []
    for node in nodes:
        node = copy.deepcopy(node)
        node.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]
        labels = node["metadata"]["labels"]
        if names.MIG_CONFIG_LABEL in labels:
            labels[names.MIG_STATE_LABEL] = "success"
        out.append(node)
    return out


def training_job(
    name: str,
    namespace: str = "team-a",
    replicas: int = 1,
    gpus: int | None = 1,
    gpu_type: str = "H100-80GB",
    mig: str | None = None,
    priority: int = 0,
    queue: str = "default",
    phase: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> Obj:
    size: Obj = {"migProfile": mig} if mig else {"gpusPerReplica": gpus}
    job: Obj = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": created,
        },
        "spec": {
            "replicas": replicas,
            **size,
            "gpuTypes": [{"name": gpu_type}],
            "priority": priority,
            "queue": queue,
            "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}},
        },
    }
    if phase:
        job["status"] = {"phase": phase, "gpuSeconds": 120.0, "estimatedEnergyJoules": 5e4}
    return job


def job_pods(job: Obj) -> list[Obj]:
    """The job's worker pods as the operator creates them (pending)."""
    typed = TrainingJobObject.of(job)
    pods = [children.worker_pod(typed, i) for i in range(int(job["spec"]["replicas"]))]
    for pod in pods:
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["status"] = {"phase": "Pending"}
    return pods


def bind(pod: Obj, node: str, gpus: str, gpu_type: str, mig: str | None = None) -> Obj:
    """`pod` as the scheduler's binding leaves it."""
    pod = copy.deepcopy(pod)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    annotations = pod["metadata"].setdefault("annotations", {})
    annotations[names.ASSIGNED_GPUS] = gpus
    annotations[names.ASSIGNED_TYPE] = gpu_type
    if mig:
        annotations[names.ASSIGNED_MIG] = mig
    return pod


def waiting(pod: Obj, message: str) -> Obj:
    """`pod` with the scheduler's why-pending condition."""
    pod = copy.deepcopy(pod)
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    return pod


def live_fleet(
    nodes: Iterable[Obj], pods: Iterable[Obj], jobs: Iterable[Obj], synced: bool = True
) -> LiveFleet:
    cache = SchedulerCache()
    cache.replace_nodes(list(nodes))
    cache.replace_pods(list(pods))
    cache.configmap_event(
        "ADDED",
        {
            "metadata": {"name": names.MIG_CONFIGMAP_NAME},
            "data": {names.MIG_CONFIGMAP_KEY: yaml.safe_dump(load_default_configs())},
        },
    )
    store = JobStore()
    jobs = list(jobs)
    for kind in ("TrainingJob", "ServingJob"):
        store.replace(kind, [j for j in jobs if j["kind"] == kind])
    return LiveFleet(cache, store, load_catalog(), also_ready=lambda: synced)


def context(
    live: LiveFleet,
    reviewer: FakeReviewer | None = None,
    settings: AdminSettings | None = None,
    limiter: RateLimiter | None = None,
) -> AdminContext:
    settings = settings or AdminSettings()
    return AdminContext(
        settings=settings,
        live=live,
        reviewer=reviewer or FakeReviewer(admin_grants()),
        limiter=limiter or RateLimiter(1000.0, 1000),
        # Never reached by these tests: node writes are tested against the API server.
        nodes=NodeActions(client.ApiClient(client.Configuration(host=UNREACHABLE)), live),
        policy=policy_watch(settings, PlacementSettings()),
        policy_store=PolicyStore(
            client.ApiClient(client.Configuration(host=UNREACHABLE)), "ns", "p"
        ),
    )


@contextlib.contextmanager
def served(ctx: AdminContext) -> Iterator[httpx.Client]:
    """The app on a real uvicorn server on a free loopback port, and a client for it."""
    settings = ctx.settings.model_copy(update={"port": 0})
    ctx.settings = settings
    with (
        AdminServer(ctx) as server,
        httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as http,
    ):
        yield http


def auth(token: str = "admin-token") -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
