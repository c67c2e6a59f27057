"""The admin API served by `gpufleet operator` (`--admin-port`, TLS) and the live policy:

- GET /policy shows the settings' policy and ETag "absent"; PUT needs If-Match (428), refuses
  a stale one (412), stores the policy in its ConfigMap and answers the new ETag;
- the scheduler decides with it from its next cycle: under the energy preset every gang gets a
  GPU power cap, under the settings' balanced preset none does;
- it survives a restart of the operator; a document that does not parse is reported by GET and
  leaves the settings' policy in force; deleting the ConfigMap goes back to the settings;
- the PUT is one audit line in the operator's log;
- the process serving the API labels its own pod (the chart's admin Service selects it) and
  clears the label when it stops.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from admin_helpers import ADMIN_RULES, accounts, wait_settled
from kubernetes.client.exceptions import ApiException

from gpufleet.admin.tls import ensure_self_signed
from gpufleet.admin.wiring import SERVING_LABEL
from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.sandbox.processes import free_port
from gpufleet.settings import POLICY_CONFIGMAP, SYSTEM_NAMESPACE
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for


class ServedOperator:
    """`gpufleet operator` with the admin API on a free port over a self-signed certificate,
    told (as the chart tells it through the downward API) that it runs in pod `self.pod`."""

    def __init__(self, sandbox: Sandbox, kube: Kube, state: Path) -> None:
        cert, key = ensure_self_signed(state / "tls")
        self.cert = cert
        self.port = free_port()
        self.pod = f"operator-{uuid.uuid4().hex[:6]}"
        config = state / "settings.yaml"
        config.write_text(
            yaml.safe_dump({"admin": {"pod_name": self.pod, "pod_namespace": SYSTEM_NAMESPACE}})
        )
        self.proc = OperatorProcess(
            sandbox.kubeconfig,
            state / "operator.log",
            kube.coordination,
            f"--config={config}",
            f"--admin-port={self.port}",
            f"--admin-tls-cert={cert}",
            f"--admin-tls-key={key}",
        )
        self.url = f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        # A start imports the admin API's stack too and serves TLS: on a machine loaded by
        # several suites at once it has taken over a minute.
        self.proc.start(timeout=180)
        wait_for(lambda: self._ready(), "the operator's admin API ready", 60)

    def _ready(self) -> bool:
        try:
            with self.client() as http:  # closed each time: warnings are errors
                return http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def client(self, token: str | None = None) -> httpx.Client:
        import ssl

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        verify = ssl.create_default_context(cafile=str(self.cert))
        return httpx.Client(base_url=self.url, verify=verify, headers=headers, timeout=60)


@pytest.fixture(scope="module")
def served(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedOperator]:
    op = ServedOperator(sandbox, kube, tmp_path_factory.mktemp("served"))
    # The pod the process believes it runs in: a pod no scheduler places (it only carries a
    # label), standing in for the chart's operator pod.
    body: Any = {
        "metadata": {"name": op.pod, "labels": {SERVING_LABEL: "serving"}},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]},
    }
    kube.core.create_namespaced_pod(SYSTEM_NAMESPACE, body)
    op.start()
    yield op
    op.proc.stop()
    kube.core.delete_namespaced_pod(op.pod, SYSTEM_NAMESPACE, grace_period_seconds=0)
    try:
        kube.core.delete_namespaced_config_map(POLICY_CONFIGMAP, SYSTEM_NAMESPACE)
    except ApiException as exc:
        assert exc.status == 404


@pytest.fixture(scope="module")
def operator(served: ServedOperator) -> OperatorProcess:
    """This module's operator is the one serving the admin API (the `ns` fixture uses it)."""
    return served.proc


def _serving_label(kube: Kube, pod: str) -> str | None:
    labels = kube.core.read_namespaced_pod(pod, SYSTEM_NAMESPACE).metadata.labels or {}
    value: str | None = labels.get(SERVING_LABEL)
    return value


def test_the_serving_replica_labels_its_pod(served: ServedOperator, kube: Kube) -> None:
    # The pod of the process serving the API carries the label (written just after the API
    # starts answering: on a loaded machine the test can read the pod before the write lands).
    wait_for(lambda: _serving_label(kube, served.pod) == "serving", "the label set", 30)
    served.proc.stop()
    assert _serving_label(kube, served.pod) is None  # a stopped process serves nothing
    served.start()
    wait_for(lambda: _serving_label(kube, served.pod) == "serving", "the label set again", 30)


def _caps(kube: Kube, ns: str, job: str) -> set[str | None]:
    pods = wait_for(
        lambda: [
            p for p in kube.pods(ns, f"gpufleet.io/trainingjob={job}") if p["spec"].get("nodeName")
        ],
        f"{job} bound",
        90,
    )
    return {(p["metadata"].get("annotations") or {}).get(names.POWER_CAP) for p in pods}


def test_policy_put_with_etags_drives_the_scheduler(
    served: ServedOperator, kube: Kube, ns: str
) -> None:
    with accounts(kube, ns) as made:
        token = made.create("policy-admin", ADMIN_RULES)
        wait_settled(1.0)
        with served.client(token) as http:
            first = http.get("/api/v1/policy")
            assert first.status_code == 200, first.text
            assert first.headers["etag"] == '"absent"'
            assert first.json()["source"] == "settings" and first.json()["preset"] == "balanced"
            kube.create_job(ns, training_job("before", 1, 1, "A100-80GB"))
            assert _caps(kube, ns, "before") == {None}

            energy: dict[str, Any] = {"preset": "energy", "weights": {"fragmentation": 0.1}}
            missing = http.put("/api/v1/policy", json=energy)
            stale = http.put("/api/v1/policy", json=energy, headers={"If-Match": '"123"'})
            assert (missing.status_code, stale.status_code) == (428, 412)
            stored = http.put("/api/v1/policy", json=energy, headers={"If-Match": '"absent"'})
            assert stored.status_code == 200, stored.text
            body = stored.json()
            assert body["source"] == "configmap" and body["preset"] == "energy"
            assert body["effectiveWeights"]["fragmentation"] == 0.1 and body["powerCaps"]
            assert body["updatedBy"] == f"system:serviceaccount:{ns}:policy-admin"
            again = http.put("/api/v1/policy", json=energy, headers={"If-Match": '"absent"'})
            assert again.status_code == 412
            assert http.get("/api/v1/policy").headers["etag"] == stored.headers["etag"]

        # The scheduler's next decisions cap every gang's GPUs.
        kube.create_job(ns, training_job("after", 1, 1, "A100-80GB"))
        caps = _caps(kube, ns, "after")
        assert len(caps) == 1 and None not in caps

        # After a restart the stored policy is still the one in force.
        served.proc.kill()
        served.start()
        kube.create_job(ns, training_job("restarted", 1, 1, "A100-80GB"))
        assert None not in _caps(kube, ns, "restarted")
        with served.client(token) as http:
            assert http.get("/api/v1/policy").json()["source"] == "configmap"

        # A document that does not parse leaves the settings' policy in force, and says so.
        broken: Any = {"data": {"policy.yaml": yaml.safe_dump({"preset": "fastest"})}}
        kube.core.patch_namespaced_config_map(POLICY_CONFIGMAP, SYSTEM_NAMESPACE, broken)
        with served.client(token) as http:
            shown = wait_for(
                lambda: (doc := http.get("/api/v1/policy").json())["error"] and doc,
                "the bad document reported",
                30,
            )
        assert shown["source"] == "settings" and shown["preset"] == "balanced"
        assert "preset" in shown["error"]
        kube.create_job(ns, training_job("fallback", 1, 1, "A100-80GB"))
        assert _caps(kube, ns, "fallback") == {None}

    audit = [
        json.loads(line.split(" gpufleet.admin.audit ", 1)[1])
        for line in served.proc.log.read_text().splitlines()
        if " gpufleet.admin.audit " in line
    ]
    puts = [(a["status"], a["outcome"]) for a in audit if a["method"] == "PUT"]
    assert puts == [(428, "failed"), (412, "failed"), (200, "succeeded"), (412, "failed")]
