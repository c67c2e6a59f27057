"""The what-if takes the scheduler's stateful steps (scheduler/stateful_steps.py), against the
sandbox with `gpufleet operator` running and serving the admin API beside its scheduler, and a
standalone admin API (`gpufleet admin`) beside it, both with a service tier of 8 GPU-seconds:

- a job's progress prices the work a service-tier eviction throws away: a long job past the
  tier, checkpointing every hour, holds every T4 of its queue; a fresh job of its queue and
  priority would evict it but for the run time since its checkpoint, which the fresh job's
  gain cannot pay back (`borrowing.restarts_paid_back`). Both APIs answer that the fresh job
  would wait, naming no victim (without the job's progress they named the long job); given
  the job, the scheduler agrees: it writes the same reason on the fresh job's pods and the
  long job keeps its GPUs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from admin_helpers import ADMIN_RULES, AdminApi, accounts, operator_serving_admin, wait_settled

from gpufleet.model.contract import names
from gpufleet.model.contract.reasons import PendingNote
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.settings import PlacementSettings
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

THETA = 8.0  # GPU-seconds: half a second of the long job's 16 GPUs
GPUS = 16  # every T4 of the default fleet: 4 nodes x 4
QUEUE = f"steps-{uuid.uuid4().hex[:6]}"


class Apis:
    """The operator's admin API (beside its scheduler) and a standalone one, and a token."""

    def __init__(self, operator_url: str, cert: Path, standalone: AdminApi, token: str) -> None:
        self.operator_url = operator_url
        self.cert = cert
        self.standalone = standalone
        self.token = token

    def clients(self) -> dict[str, httpx.Client]:
        import ssl

        headers = {"Authorization": f"Bearer {self.token}"}
        verify = ssl.create_default_context(cafile=str(self.cert))
        beside = httpx.Client(
            base_url=self.operator_url, verify=verify, headers=headers, timeout=60
        )
        return {"beside": beside, "standalone": self.standalone.client(self.token)}


@pytest.fixture(scope="module")
def served(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorProcess, str, Path]]:
    """The operator with the service tier, serving the admin API; the module's queue."""
    kube.create_queue(QUEUE, "T4", GPUS)
    folder = tmp_path_factory.mktemp("operator")
    try:
        settings = f"placement:\n  service_tier_gpu_s: {THETA}\n"
        with operator_serving_admin(sandbox, kube, folder, settings) as process:
            yield process
    finally:
        sandbox.kubectl("delete", "gq", QUEUE, "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def operator(served: tuple[OperatorProcess, str, Path]) -> OperatorProcess:
    """This module's operator is the one serving the admin API (the `ns` fixture uses it)."""
    return served[0]


@pytest.fixture(scope="module")
def apis(
    sandbox: Sandbox,
    kube: Kube,
    served: tuple[OperatorProcess, str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Apis]:
    _, url, cert = served
    placement = PlacementSettings(service_tier_gpu_s=THETA)
    with (
        accounts(kube, "default") as made,
        AdminApi(sandbox, tmp_path_factory.mktemp("admin"), placement=placement) as standalone,
    ):
        token = made.create(f"steps-{id(standalone) % 10_000}", ADMIN_RULES)
        wait_settled(1.0)
        apis = Apis(url, cert, standalone, token)
        for name, http in apis.clients().items():
            with http:
                wait_for(lambda h=http: _ready(h), f"the {name} admin API ready", 90)
        yield apis


def _ready(http: httpx.Client) -> bool:
    try:
        return http.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def _job(name: str, checkpoint: bool) -> dict[str, Any]:
    """Four workers of 4 T4 each (every T4 of the fleet) in the module's queue, priority 0."""
    manifest = training_job(name, replicas=4, gpus=4, gpu_type="T4")
    manifest["spec"]["queue"] = QUEUE
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    if checkpoint:
        manifest["spec"]["checkpoint"] = {"intervalSeconds": 3600}
    return manifest


def _live(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    pods = kube.pods(ns, f"{names.TRAININGJOB_LABEL}={name}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _started(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    """The job's pods when all four are bound and started (have a start time)."""
    pods = _live(kube, ns, name)
    ok = len(pods) == 4 and all(
        p["spec"].get("nodeName") and (p.get("status") or {}).get("startTime") for p in pods
    )
    return pods if ok else []


def _scheduler_reason(kube: Kube, ns: str, name: str) -> PendingNote | None:
    """The reason the scheduler wrote on the job's first pod (PodScheduled=False)."""
    for pod in _live(kube, ns, name):
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
                return PendingNote.parse(c["message"])
    return None


def test_whatif_prices_the_lost_work_of_a_tier_eviction(kube: Kube, ns: str, apis: Apis) -> None:
    kube.create_job(ns, _job("long", checkpoint=True))
    pods = wait_for(lambda: _started(kube, ns, "long"), "long's workers started", 90)
    uids = {p["metadata"]["uid"] for p in pods}
    # Past the tier for sure (it counts 16 GPUs from the pods' start times), then ask.
    latest = max(parse_time(p["status"]["startTime"]) for p in pods if p["status"]["startTime"])
    assert latest is not None
    wait_for(
        lambda: (datetime.now(UTC) - latest).total_seconds() > THETA / GPUS + 1.0,
        "long past the service tier",
        30,
    )
    fresh = _job("fresh", checkpoint=False)
    fresh["metadata"]["namespace"] = ns
    answers: dict[str, dict[str, Any]] = {}
    for api, http in apis.clients().items():
        with http:
            response = http.post("/api/v1/whatif", json=fresh)
        assert response.status_code == 200, response.text
        (answers[api],) = response.json()["gangs"]
    for api, gang in answers.items():
        # Without the long job's progress, both named it as the victim.
        assert not gang["placed"] and gang["preempts"] == [], (api, gang)
    reasons = {api: gang["waiting"]["reason"] for api, gang in answers.items()}
    assert len(set(reasons.values())) == 1, answers

    # The scheduler agrees: it writes that reason on the fresh job's pods (once it has held
    # for explain_delay_s: had it preempted, the reason would be WaitingForPreemption), and
    # the long job keeps its GPUs.
    kube.create_job(ns, fresh)
    written = wait_for(
        lambda: _scheduler_reason(kube, ns, "fresh"), "the scheduler's reason for fresh", 60
    )
    print(f"[what-if steps] what-if: {answers}; scheduler: {written.text}")
    assert written.reason is not None and written.reason.value == reasons["standalone"], written
    assert {p["metadata"]["uid"] for p in _started(kube, ns, "long")} == uids
    preempted = kube.condition(ns, "long", "Preempted")
    assert not preempted or preempted["status"] != "True", preempted
