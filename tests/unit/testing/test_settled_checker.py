"""What the checkers for polling loops (`SettledChecker`, `final_check`) let wait and what they
do not: only a partly bound gang waits for its grace (bindings in flight); a GPU held twice, a
node over-committed or a rank with two live pods is a violation on the very read that shows it,
also when the next read is clean. The sandbox tests poll the cluster with these checkers, so
their failures depend on it."""

from __future__ import annotations

from typing import Any

from gpufleet.model.contract import names
from gpufleet.testing import invariants
from tests.unit.testing.checker_fakes import Clock, Reads

NODE = {"metadata": {"name": "n0"}, "status": {"allocatable": {names.WHOLE_GPU_RESOURCE: "4"}}}
GANG = "gang t/g: 1 live pods bound, the gang needs 2"


def pod(name: str, node: str | None, gpus: str = "", **labels: str) -> dict[str, Any]:
    """A live pod of gpufleet in namespace t, on `node` holding GPUs `gpus` (one when
    unbound)."""
    annotations = {names.ASSIGNED_GPUS: gpus} if gpus else {}
    count = str(len(gpus.split(","))) if gpus else "1"
    if names.GANG_LABEL in labels:
        annotations[names.GANG_SIZE] = "2"
    return {
        "metadata": {
            "name": name,
            "namespace": "t",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            "nodeName": node,
            "containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": count}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def cluster_of(*reads: list[dict[str, Any]]) -> Reads:
    """Node n0 (4 GPUs) and one list of pods per read (the last one repeats)."""
    return Reads(*reads, nodes=(NODE,))


IN_G = {names.GANG_LABEL: "g"}
WHOLE = [pod("g-0", "n0", "2", **IN_G), pod("g-1", "n0", "3", **IN_G)]
HALF = [pod("g-0", "n0", "2", **IN_G), pod("g-1", None, **IN_G)]
TWICE = [pod("a", "n0", "0"), pod("b", "n0", "0")]  # GPU 0 held by two live pods
OVER = [pod("a", "n0", "0,1,2"), pod("b", "n0", "3,4")]  # 5 GPUs in use, 4 there
RANK = {names.TRAININGJOB_LABEL: "job", names.RANK_LABEL: "0"}
DUPLICATE = [pod("job-0", None, **RANK), pod("job-0-again", None, **RANK)]


def settled(cluster: Reads, clock: Clock) -> invariants.SettledChecker:
    return invariants.SettledChecker(cluster, grace=3, clock=clock)  # type: ignore[arg-type]


def test_the_settled_checker_reports_a_gpu_held_twice_on_its_first_read() -> None:
    found = settled(cluster_of(TWICE), Clock()).check()
    assert found == ["n0 gpu0 held by t/a, t/b"]


def test_the_settled_checker_reports_an_over_committed_node_on_its_first_read() -> None:
    found = settled(cluster_of(OVER), Clock()).check()
    assert found == ["n0: 5 x nvidia.com/gpu in use, 4 allocatable"]


def test_the_settled_checker_reports_a_rank_with_two_live_pods_on_its_first_read() -> None:
    assert settled(cluster_of(DUPLICATE), Clock()).check() == ["t/job rank 0: 2 pods"]


def test_the_settled_checker_lets_a_partly_bound_gang_wait_for_its_grace_only() -> None:
    clock = Clock()
    checker = settled(cluster_of(HALF), clock)
    seen = []
    for _ in range(8):  # every second for 8 s, the gang partly bound throughout
        seen.append(checker.check())
        clock.sleep(1.0)
    assert seen[:4] == [[]] * 4  # up to the 3 s grace: bindings in flight
    assert seen[4:] == [[GANG]] * 4


def test_the_settled_checker_passes_a_gang_whole_within_its_grace() -> None:
    clock = Clock()
    checker = settled(cluster_of(HALF, WHOLE), clock)
    assert checker.check() == []
    clock.sleep(1.0)
    assert checker.check() == []


def test_final_check_keeps_a_double_booking_a_later_read_no_longer_shows() -> None:
    # Read 1: GPU 0 held twice, the gang half bound (so it reads again); read 2: all clean.
    cluster = cluster_of([*TWICE, *HALF], WHOLE)
    clock = Clock()
    found = invariants.final_check(cluster, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert found == ["n0 gpu0 held by t/a, t/b"] and cluster.reads == 2
