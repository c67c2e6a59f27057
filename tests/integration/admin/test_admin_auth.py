"""Every route of the admin API against the sandbox's real kube-apiserver, whose TokenReview
and SubjectAccessReview decide: a table of ServiceAccount tokens (minted with TokenRequest) that
have the needed roles, only the reading ones, or none, plus a missing and a forged token —
401 without a valid token, 403 without the permission, 200 with it, never a 500. Also: a
ServiceAccount allowed to list jobs in one namespace sees exactly that namespace's jobs; the
`gpufleet fleet/jobs/whatif/drain` commands send their kubeconfig user's token and RBAC decides.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from admin_helpers import ADMIN_RULES, READER_RULES, AdminApi, accounts, wait_settled

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, training_job, wait_for


@dataclass
class World:
    api: AdminApi
    ns: str
    other_ns: str
    tokens: dict[str, str | None]


@pytest.fixture(scope="module")
def world(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    ns = f"admin-auth-{uuid.uuid4().hex[:6]}"
    other = f"{ns}-other"
    for name in (ns, other):
        kube.create_namespace(name)
    kube.create_job(ns, training_job("visible", 1, 1, "T4"))
    kube.create_job(other, training_job("hidden", 1, 1, "T4"))
    with accounts(kube, ns) as made, AdminApi(sandbox, tmp_path_factory.mktemp("admin")) as api:
        tokens: dict[str, str | None] = {
            "admin": made.create("admin", ADMIN_RULES),
            "reader": made.create("reader", READER_RULES),
            "nobody": made.create("nobody"),
            "missing": None,
            "forged": "not-a-token",
        }
        made.create("scoped")
        made.grant_in(
            "scoped",
            ns,
            [{"apiGroups": ["gpufleet.io"], "resources": ["trainingjobs"], "verbs": ["list"]}],
        )
        tokens["scoped"] = made.token("scoped")
        wait_settled(1.0)
        wait_for(lambda: len(api.context.live.jobs.items()) >= 2, "the API sees both jobs", 30)
        yield World(api, ns, other, tokens)
    for name in (ns, other):
        kube.clean_namespace(name)


def _whatif(ns: str) -> dict[str, Any]:
    manifest = training_job("what-if", 1, 1, "L4")
    manifest["metadata"]["namespace"] = ns
    return manifest


# (method, path template, body, status for: admin, reader, nobody)
ROUTES = [
    ("GET", "/api/v1/fleet", None, (200, 200, 403)),
    ("GET", "/api/v1/jobs?namespace={ns}", None, (200, 200, 403)),
    ("GET", "/api/v1/jobs/{ns}/TrainingJob/visible", None, (200, 200, 403)),
    ("POST", "/api/v1/whatif", "whatif", (200, 403, 403)),
    ("POST", "/api/v1/nodes/t4-3/cordon", None, (200, 403, 403)),
    ("POST", "/api/v1/nodes/t4-3/uncordon", None, (200, 403, 403)),
    ("POST", "/api/v1/nodes/t4-3/drain?dryRun=true", None, (200, 403, 403)),
    ("PUT", "/api/v1/nodes/a100-2/mig-layout", {"layout": "all-disabled"}, (200, 403, 403)),
    ("GET", "/api/v1/policy", None, (200, 200, 403)),
    # Allowed, then refused for want of If-Match: authorization comes first.
    ("PUT", "/api/v1/policy", {"preset": "balanced"}, (428, 403, 403)),
    ("GET", "/metrics", None, (200, 200, 403)),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [pytest.param(*r, id=f"{r[0]} {r[1].split('?')[0]}") for r in ROUTES],
)
def test_route_status_by_identity(
    world: World, method: str, path: str, body: Any, expected: tuple[int, int, int]
) -> None:
    url = path.format(ns=world.ns)
    payload = _whatif(world.ns) if body == "whatif" else body
    table = {"admin": expected[0], "reader": expected[1], "nobody": expected[2]}
    table |= {"missing": 401, "forged": 401}
    got = {}
    for who in table:
        with world.api.client(world.tokens[who]) as http:
            response = http.request(method, url, json=payload)
        got[who] = response.status_code
        if response.status_code >= 400:
            assert response.headers["content-type"] == "application/problem+json", who
    assert got == table


def test_probes_need_no_token(world: World) -> None:
    for path in ("/healthz", "/readyz"):
        assert world.api.get(path).status_code == 200


def test_a_user_sees_only_the_namespaces_they_may_list(world: World) -> None:
    scoped = world.tokens["scoped"]
    items = world.api.get("/api/v1/jobs", scoped).json()["items"]
    assert [(j["namespace"], j["name"]) for j in items] == [(world.ns, "visible")]
    assert world.api.get(f"/api/v1/jobs?namespace={world.other_ns}", scoped).status_code == 403
    everything = world.api.get("/api/v1/jobs", world.tokens["admin"]).json()["items"]
    names = {(j["namespace"], j["name"]) for j in everything}
    assert {(world.ns, "visible"), (world.other_ns, "hidden")} <= names
    # The node the table cordoned and uncordoned is schedulable again.
    fleet = world.api.get("/api/v1/fleet", world.tokens["admin"]).json()
    t4 = next(n for n in fleet["nodes"] if n["name"] == "t4-3")
    assert t4["unschedulable"] is False


def test_the_api_uses_the_servers_certificate(world: World) -> None:
    import httpx

    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{world.api.url}/healthz", verify=True, timeout=10)
    assert world.api.get("/healthz").json() == {"status": "ok"}


def _kubeconfig(sandbox: Sandbox, token: str, path: Path) -> Path:
    """A kubeconfig for the sandbox whose user authenticates with `token`."""
    doc = yaml.safe_load(sandbox.kubeconfig.read_text())
    doc["users"] = [{"name": "sa", "user": {"token": token}}]
    doc["contexts"][0]["context"]["user"] = "sa"
    path.write_text(yaml.safe_dump(doc))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_commands_send_the_kubeconfig_users_token(
    world: World, sandbox: Sandbox, tmp_path: Path
) -> None:
    api = world.api
    common = ["--server", api.url, "--certificate-authority", str(api.cert)]
    admin = ["--kubeconfig", str(_kubeconfig(sandbox, str(world.tokens["admin"]), tmp_path / "a"))]
    reader = [
        "--kubeconfig",
        str(_kubeconfig(sandbox, str(world.tokens["reader"]), tmp_path / "r")),
    ]

    fleet = _cli("fleet", *reader, *common)
    assert fleet.returncode == 0, fleet.stderr
    assert {"h100-0", "a100-mig-0", "t4-3"} <= {
        line.split()[0] for line in fleet.stdout.splitlines() if line
    }
    jobs = _cli("jobs", "-n", world.ns, *reader, *common)
    assert jobs.returncode == 0 and "visible" in jobs.stdout and "hidden" not in jobs.stdout

    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(_whatif(world.ns)))
    whatif = _cli("whatif", "-f", str(manifest), *admin, *common)
    assert whatif.returncode == 0, whatif.stderr
    assert f"TrainingJob {world.ns}/what-if would run now" in whatif.stdout
    assert "1 x L4 on l4-" in whatif.stdout
    denied = _cli("whatif", "-f", str(manifest), *reader, *common)
    assert denied.returncode == 1 and "403 Forbidden" in denied.stderr

    drain = _cli("drain", "t4-3", "--dry-run", "-o", "json", *admin, *common)
    assert drain.returncode == 0, drain.stderr
    assert json.loads(drain.stdout)["dryRun"] is True

    # The sandbox's own kubeconfig authenticates with a client certificate: no token to send.
    certificate = _cli("fleet", "--kubeconfig", str(sandbox.kubeconfig), *common)
    assert certificate.returncode == 1 and "no bearer token" in certificate.stderr
