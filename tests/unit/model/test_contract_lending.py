"""The lending contract (model/contract/lending.py) and the invariant checker's view of it.

Aspects under test: `loan_gpus` accepts exactly an asleep, live standby of strictly higher
priority on the borrower's node, holding the borrowed whole GPUs, named by a live preemptible
borrower (recalled standbys stay lent until the borrower is gone); every other pairing is no
loan. The invariant checker reports no double booking and no over-commit for a valid loan, and
reports both for each near miss (awake standby, non-preemptible borrower, a third pod).
The patches: lend is conditional on a resourceVersion, recall and wake clear each other.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.model.contract import lending, names
from gpufleet.model.contract.standby import ASLEEP, wake_patch
from gpufleet.testing.invariants import capacity_violations, double_bookings

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def pod(name: str, gpus: str, node: str = "n0", **ann: str) -> dict[str, Any]:
    count = len(gpus.split(","))
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {names.ASSIGNED_GPUS: gpus, **ann},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": names.SCHEDULER_NAME,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(count)}}}],
        },
        "status": {"phase": "Running"},
    }


def standby(name: str = "web", gpus: str = "0,1", **ann: str) -> dict[str, Any]:
    return pod(name, gpus, **{names.STANDBY: ASLEEP, names.PRIORITY: "5", **ann})


def borrower(gpus: str = "1", lenders: str = "ns/web", **ann: str) -> dict[str, Any]:
    return pod("train", gpus, **{names.BORROWS: lenders, names.PRIORITY: "0", **ann})


def loans(*pods: dict[str, Any]) -> dict[int, str]:
    by_key = {lending.pod_key(p): p for p in pods}
    return lending.loan_gpus(pods[-1], by_key)


def node(gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": "n0"}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def test_a_valid_loan_names_the_lent_gpus() -> None:
    assert loans(standby(), borrower()) == {1: "ns/web"}
    # The borrower's own GPUs are not on loan; a recalled standby is still lent.
    assert loans(standby(), borrower("1,2")) == {1: "ns/web"}
    assert loans(standby(**{names.RECALL: "t"}), borrower()) == {1: "ns/web"}
    # Two standbys, one replica.
    two = [standby("a", "0"), standby("b", "1"), borrower("0,1", "ns/a,ns/b")]
    assert loans(*two) == {0: "ns/a", 1: "ns/b"}


@pytest.mark.parametrize(
    ("lender", "who", "shared"),
    [
        (pod("web", "0,1", **{names.PRIORITY: "5"}), borrower(), True),  # awake
        (standby(), borrower(**{names.PREEMPTIBLE: "false"}), True),
        (standby(**{names.PRIORITY: "0"}), borrower(), True),  # same priority
        (standby(gpus="0"), borrower(), False),  # GPU not the standby's
        (
            pod("web", "0,1", node="n1", **{names.STANDBY: ASLEEP, names.PRIORITY: "5"}),
            borrower(),
            False,
        ),
        (standby(gpus="1", **{names.ASSIGNED_MIG: "1g.10gb@0"}), borrower(), False),  # a MIG slice
        (standby(), borrower(lenders="ns/other"), True),
    ],
)
def test_every_other_pairing_is_no_loan(
    lender: dict[str, Any], who: dict[str, Any], shared: bool
) -> None:
    assert loans(lender, who) == {}
    # Where both record the same GPU, the checker reports it.
    assert bool(double_bookings([lender, who])) is shared


def test_a_finished_standby_lends_nothing() -> None:
    gone = standby()
    gone["status"]["phase"] = "Succeeded"
    assert loans(gone, borrower()) == {}


def test_the_checker_accepts_a_loan_and_counts_its_gpu_once() -> None:
    pods = [standby(), borrower(), pod("other", "2,3")]
    assert double_bookings(pods) == [] and capacity_violations([node(4)], pods) == []
    # A third pod on the lent GPU is a double booking; one more GPU in use an over-commit.
    third = pod("third", "1")
    assert double_bookings([*pods, third]) == ["n0 gpu1 held by ns/third, ns/web"]
    assert capacity_violations([node(4)], [*pods, third]) != []
    awake = pod("web", "0,1", **{names.PRIORITY: "5"})
    assert capacity_violations([node(4)], [awake, borrower(), pod("other", "2,3")]) != []


def test_patches() -> None:
    lend = lending.lend_patch("ns/train", "42")
    assert lend == {
        "metadata": {"annotations": {names.LENT_TO: "ns/train"}, "resourceVersion": "42"}
    }
    assert lending.lend_patch("ns/train", None)["metadata"].keys() == {"annotations"}
    assert lending.unlend_patch() == {"metadata": {"annotations": {names.LENT_TO: None}}}
    assert lending.recall_patch(NOW)["metadata"]["annotations"][names.RECALL]
    wake = wake_patch(NOW, "7")
    assert wake["metadata"]["resourceVersion"] == "7"
    assert wake["metadata"]["annotations"][names.RECALL] is None
    assert lending.borrows_annotation(["ns/b", "ns/a", "ns/b"]) == {names.BORROWS: "ns/a,ns/b"}
    assert lending.borrowed_from(borrower(lenders="ns/a, bad,ns/b")) == ("ns/a", "ns/b")
