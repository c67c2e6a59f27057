"""`gpufleet operator` throttled by API Priority and Fairness (the session sandbox's API server
runs with APF on): a FlowSchema sends every request of the operator's own user to a priority
level with one concurrency share that rejects what does not fit (429 with Retry-After). A
16-worker gang, whose 16 bindings go out at once, is still bound whole: throttled requests are
waited out and sent again, so no pod is deleted and created again (a rolled-back gang's pods
come back under new UIDs), the job never restarts, the API server did reject requests, and the
job's deletion finishes under the same throttling."""

from __future__ import annotations

import functools
import re
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.scheduler.informer import Informer
from gpufleet.scheduler.throttling import THROTTLE_LIMIT_S
from gpufleet.testing.operator import (
    Kube,
    OperatorProcess,
    SettledInvariants,
    training_job,
    wait_for,
)

USER = "gpufleet-throttled"
LEVEL = "gpufleet-test-tight"
WORKERS = 16  # every T4 GPU of the default fleet: 16 bindings sent as one batch

RBAC_AND_FLOW_CONTROL = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": USER},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}],
    },
    {
        # One share of the server's 600 seats (about 3 requests at a time); what does not
        # fit is rejected at once rather than queued.
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": LEVEL},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    },
    {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": LEVEL},
        "spec": {
            "priorityLevelConfiguration": {"name": LEVEL},
            "matchingPrecedence": 500,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": USER}}],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    },
]


def _rejected(sandbox: Sandbox) -> float:
    """Requests the API server rejected at the test's priority level so far."""
    metrics = sandbox.kubectl("get", "--raw", "/metrics").stdout
    name = "apiserver_flowcontrol_rejected_requests_total"
    pattern = rf'^{name}{{[^}}]*priority_level="{LEVEL}"[^}}]*}} (\S+)$'
    return sum(float(m) for m in re.findall(pattern, metrics, flags=re.M))


@pytest.fixture(scope="module")
def throttled(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """`gpufleet operator` as USER, whose every request APF squeezes through one share."""
    kubeconfig = sandbox.user_kubeconfig(USER)
    sandbox.apply(RBAC_AND_FLOW_CONTROL)
    log = tmp_path_factory.mktemp("throttled") / "operator.log"
    try:
        with OperatorProcess(Path(kubeconfig), log, kube.coordination) as proc:
            yield proc
    finally:
        for doc in reversed(RBAC_AND_FLOW_CONTROL):
            kind = doc["kind"].lower() + "s"
            sandbox.kubectl("delete", kind, doc["metadata"]["name"], "--ignore-not-found")


class UidLog:
    """Every UID each pod name of a namespace has had, from a watch."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.uids: dict[str, set[str]] = defaultdict(set)
        self.stop = threading.Event()
        self._informer = Informer(
            f"uids-{namespace}",
            functools.partial(kube.core.list_namespaced_pod, namespace),
            self._seen_all,
            lambda _, pod: self._seen(pod),
            self.stop,
        )

    def _seen(self, pod: dict[str, Any]) -> None:
        self.uids[pod["metadata"]["name"]].add(pod["metadata"]["uid"])

    def _seen_all(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            self._seen(pod)

    def __enter__(self) -> UidLog:
        self._informer.start()
        assert self._informer.synced.wait(30)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()


def test_a_throttled_gang_is_bound_whole_without_rollback(
    sandbox: Sandbox, kube: Kube, throttled: OperatorProcess
) -> None:
    ns = f"throttling-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(ns)
    rejected_before = _rejected(sandbox)
    # Throttled bindings take seconds: a gang is partly bound while they are waited out (not a
    # fault as long as it ends whole, which the UIDs below show); the rest must hold at once.
    invariants, seen = SettledInvariants(kube.core, grace=THROTTLE_LIMIT_S), []

    def running() -> bool:
        seen.extend(invariants.check())
        return kube.phase(ns, "squeezed") == "Running"

    try:
        with UidLog(kube, ns) as uids:
            kube.create_job(ns, training_job("squeezed", WORKERS, 1, "T4"))
            wait_for(running, "the gang Running under throttling", 90)
        assert seen == []
        assert len(uids.uids) == WORKERS
        assert {name: len(u) for name, u in uids.uids.items() if len(u) > 1} == {}
        job = kube.job(ns, "squeezed")
        assert job is not None and job["status"]["restarts"] == 0
        # The throttling was real: the API server turned requests of this level away.
        assert _rejected(sandbox) > rejected_before
        kube.delete_job(ns, "squeezed")
        wait_for(lambda: kube.job(ns, "squeezed") is None, "the deletion finished", 60)
    finally:
        kube.clean_namespace(ns, timeout=60)
