"""`kill -9` of `gpufleet operator` (operator and scheduler together) at several points of a
job's life: it rebuilds its state from the cluster on restart and finishes the work with no
duplicate pods, no partly bound gang and no GPU used twice (invariants read from the cluster).
Also leader election: a standby takes over from a dead leader, and a leader paused past its
Lease stands down when it resumes."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

WORKERS = 16  # every T4 GPU of the default fleet


def restart(operator: OperatorProcess) -> None:
    operator.kill()
    operator.start()


def assert_clean(kube: Kube, ns: str, job: str, replicas: int) -> None:
    pods = kube.pods(ns, f"gpufleet.io/trainingjob={job}")
    ranks = sorted(int(p["metadata"]["labels"]["gpufleet.io/rank"]) for p in pods)
    assert ranks == list(range(replicas))
    # No GPU used twice and no duplicate worker, at any moment.
    nodes, everything = invariants.read_cluster(kube.core)
    assert invariants.capacity_violations(nodes, everything) == []
    assert invariants.double_bookings(everything) == []
    assert invariants.duplicate_workers(everything) == []
    # A gang the kill left partly bound (or partly evicted) is completed or restarted whole
    # by the next cycles of the restarted scheduler, not at the instant the job turns Running.
    # Up to 30 s, beyond the checkers' own bound for a new leader (invariants.TAKEOVER_S of
    # taking the Lease, then 3 s for its bindings); one clean read ends the wait, and a read
    # between two bindings only reads again.
    wait_for(lambda: invariants.check(kube.core) == [], "no partly bound gang", 30)


KillPoint = Callable[[Kube, str], object]

KILL_POINTS: list[Any] = [
    pytest.param(lambda kube, ns: True, id="right-after-apply"),
    pytest.param(lambda kube, ns: len(kube.pods(ns)) >= 1, id="first-pod-created"),
    pytest.param(
        lambda kube, ns: any(p["spec"].get("nodeName") for p in kube.pods(ns)),
        id="first-pod-bound",
    ),
    pytest.param(lambda kube, ns: kube.phase(ns, "big") == "Running", id="running"),
]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_during_admission_leaves_no_duplicates(
    kube: Kube, ns: str, operator: OperatorProcess, point: KillPoint
) -> None:
    kube.create_job(ns, training_job("big", WORKERS, 1, "T4"))
    wait_for(lambda: point(kube, ns), "the kill point", 20)
    restart(operator)
    wait_for(lambda: kube.phase(ns, "big") == "Running", "Running after restart", 30)
    assert_clean(kube, ns, "big", WORKERS)
    job = kube.job(ns, "big")
    assert job is not None and job["status"]["restarts"] == 0


def test_kill_during_preemption_keeps_gangs_whole(
    kube: Kube, ns: str, operator: OperatorProcess
) -> None:
    kube.create_job(ns, training_job("low", 4, 4, "L4", priority=1))
    wait_for(lambda: kube.phase(ns, "low") == "Running", "low Running")
    before = {p["metadata"]["uid"] for p in kube.pods(ns)}
    kube.create_job(ns, training_job("high", 1, 4, "L4", priority=10))

    def evicting() -> bool:
        low = kube.pods(ns, "gpufleet.io/trainingjob=low")
        return any(p["metadata"].get("deletionTimestamp") for p in low) or not before <= {
            p["metadata"]["uid"] for p in low
        }

    wait_for(evicting, "the first eviction")
    restart(operator)
    wait_for(lambda: kube.phase(ns, "high") == "Running", "high Running after restart", 30)

    # A member the kill left running makes the gang restart whole after the others were
    # recreated, so "recreated whole" means four pods, none of them an old one or deleting.
    def recreated() -> bool:
        low = kube.pods(ns, "gpufleet.io/trainingjob=low")
        uids = {p["metadata"]["uid"] for p in low}
        deleting = any(p["metadata"].get("deletionTimestamp") for p in low)
        return len(low) == 4 and not uids & before and not deleting

    wait_for(recreated, "low gang recreated whole")
    assert_clean(kube, ns, "high", 1)
    assert_clean(kube, ns, "low", 4)
    low = kube.pods(ns, "gpufleet.io/trainingjob=low")
    assert not any(p["spec"].get("nodeName") for p in low)  # 12 L4 GPUs left, it needs 16


@pytest.fixture
def standby(
    sandbox: Sandbox,
    kube: Kube,
    operator: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """A second `gpufleet operator`, not started; afterwards, if it took over, it stays as the
    module's operator (which the test killed or paused), else it is stopped and the module's
    operator runs again for the clean-up."""
    log = tmp_path_factory.mktemp("standby") / "operator.log"
    second = OperatorProcess(sandbox.kubeconfig, log, kube.coordination)
    yield second
    if operator.adopt(second):
        return
    second.stop()
    if operator.proc is not None and operator.proc.poll() is None:
        os.kill(operator.pid, signal.SIGCONT)  # a test that failed while it was stopped
        operator.stop()
    operator.start()


def test_standby_takes_over_when_the_leader_dies(
    kube: Kube, ns: str, operator: OperatorProcess, standby: OperatorProcess
) -> None:
    with pytest.raises(TimeoutError):
        standby.start(timeout=5)  # the leader renews the Lease: the standby only waits
    # On a loaded machine the interpreter may still be starting: kill the leader only once the
    # standby contends for the Lease, so the 15 s below measure the take-over alone.
    wait_for(
        lambda: "waiting for lease" in standby.log.read_text(errors="replace"),
        "the standby waiting for the Lease",
        60,
    )
    assert standby.proc is not None and standby.proc.poll() is None
    assert operator.holds_lease() and not standby.holds_lease()
    operator.kill()
    wait_for(standby.holds_lease, "the standby holding the Lease", 15)
    kube.create_job(ns, training_job("after-failover", 2, 1, "T4"))
    wait_for(lambda: kube.phase(ns, "after-failover") == "Running", "Running", 30)
    assert invariants.check(kube.core) == []


def test_leader_paused_past_its_lease_stands_down(
    kube: Kube, ns: str, operator: OperatorProcess, standby: OperatorProcess
) -> None:
    os.kill(operator.pid, signal.SIGSTOP)
    # Once the stopped leader's Lease has expired, and its caches are synced (both slow on a
    # loaded machine: within 30 s the standby had taken the Lease but not yet synced).
    standby.start(timeout=60)
    kube.create_job(ns, training_job("while-paused", 2, 1, "T4"))
    wait_for(lambda: kube.phase(ns, "while-paused") == "Running", "Running", 30)
    os.kill(operator.pid, signal.SIGCONT)
    # The resumed leader's cache is stale; it must not schedule on it, and it stops once its
    # renewal finds the Lease taken.
    proc = operator.proc
    assert proc is not None
    wait_for(lambda: proc.poll() is not None, "the old leader exiting", 15)
    assert proc.returncode == 1
    kube.create_job(ns, training_job("after-resume", 2, 1, "T4"))
    wait_for(lambda: kube.phase(ns, "after-resume") == "Running", "Running", 30)
    assert_clean(kube, ns, "while-paused", 2)
    assert_clean(kube, ns, "after-resume", 2)
    assert standby.holds_lease()
