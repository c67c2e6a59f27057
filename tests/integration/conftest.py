"""One real sandbox control plane for the whole integration test session.

It is started in a private state directory (never the user's own sandbox) and stopped when the
session ends. Its API server runs with API Priority and Fairness, as production ones do: the
tests' admin user (`system:masters`) is exempt from it, and the throttling test gives its own
user a tight priority level. If the binaries cannot be built or the cluster does not come up,
every test that uses it errors with the reason: nothing is skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gpufleet.sandbox.binaries import BuildError
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.runtime import api_client
from gpufleet.settings import LeaseSettings
from gpufleet.testing.fleet_layouts import restore_mig_layouts
from gpufleet.testing.operator import Kube, OperatorProcess

# The session's sandbox once a test has asked for it (modules that need none do not start it).
_STARTED: list[Sandbox] = []


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A running sandbox with the default fleet and gpufleet's CRDs installed."""
    sbx = Sandbox(tmp_path_factory.mktemp("sandbox"))
    try:
        sbx.up(progress=lambda msg: print(f"[sandbox] {msg}"), apf=True)
    except BuildError as exc:
        sbx.down(progress=lambda _: None)
        pytest.fail(f"cannot build the sandbox's control-plane binaries: {exc}", pytrace=False)
    except Exception as exc:
        sbx.down(progress=lambda _: None)
        pytest.fail(f"the sandbox did not start: {exc}", pytrace=False)
    _STARTED.append(sbx)
    yield sbx
    _STARTED.clear()
    sbx.down(progress=lambda _: None)


def forget_workload_estimate(sandbox: Sandbox) -> None:
    """Delete the workload estimate the operator keeps (scheduler/estimate_store.py)."""
    name, namespace = SchedulerSettings().estimate_configmap, LeaseSettings().namespace
    sandbox.kubectl("delete", "configmap", name, "-n", namespace, "--ignore-not-found")


@pytest.fixture(scope="module", autouse=True)
def fleet_layouts_given_back() -> Iterator[None]:
    """After each module, the MIG layouts its jobs made gpufleet change go back to the fleet
    file's, and the workload estimate its operator kept is deleted: the sandbox is shared by the
    session, and no module's outcome may depend on the modules that ran before it."""
    yield
    for sbx in _STARTED:
        restore_mig_layouts(sbx)
        forget_workload_estimate(sbx)


@pytest.fixture(scope="session")
def kube(sandbox: Sandbox) -> Kube:
    """API clients for the sandbox."""
    return Kube(api_client(str(sandbox.kubeconfig)))


@pytest.fixture(scope="module")
def operator(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """`gpufleet operator` as a real child process, one per test module, stopped by PID."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with OperatorProcess(sandbox.kubeconfig, log, kube.coordination) as proc:
        yield proc


@pytest.fixture
def ns(kube: Kube, operator: OperatorProcess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, named after its module, emptied and deleted afterwards."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    name = f"{module.replace('_', '-')[:40]}-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(name)
    yield name
    if operator.proc is None or operator.proc.poll() is not None:
        operator.start()  # a test that killed the operator may leave it dead; clean-up needs it
    kube.clean_namespace(name)
