"""Goodput-aware growth of elastic TrainingJobs on the sandbox, through `gpufleet operator` as a
real process and the sandbox's real API server.

Aspects: two elastic jobs on T4 (2 replicas running, room to grow to 6) with different
`spec.elastic.scaling` curves compete for GPUs that free up: both free GPUs go to the job whose
next replicas add the most (its curve still climbs), none to the one whose curve has flattened;
the climbing job then reports (annotation `gpufleet.io/throughput`) that its throughput fell at
4 replicas: the operator records it, refines the curve in the status and on the pods, the other
job takes the replica that now does less than nothing, and the next two free GPUs go to it too.
An elastic job grown into every free GPU gives replicas that add little to a job that started
later whose next replicas add more, until no move gains more than it disrupts (the split of
most goodput), never touching either job's minimum nor marking the job Preempted. An
unreadable report is shown on the job (condition ThroughputReported False, a Warning Event)
and changes nothing; an invalid curve is refused by the API server naming the field. No GPU is
ever double-booked nor a gang partly bound.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract import names
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, SettledInvariants, training_job, wait_for

pytestmark = pytest.mark.integration

# Marginal gains from 2 running replicas: climbs 0.8, 0.7, ...; flat 0.4, 0.3, ...
CLIMBS = [1.0, 1.9, 2.7, 3.4, 4.0, 4.5]
FLAT = [1.0, 1.6, 2.0, 2.3, 2.5, 2.6]
# Measured at 2 and 4 replicas: the refined curve's next steps from 4 are 0.28 and 0.24.
SLOWER_AT_FOUR = "2=190,4=160"


def elastic(name: str, curve: list[float]) -> dict[str, Any]:
    job = training_job(name, replicas=2, gpus=1, gpu_type="T4")
    job["spec"]["elastic"] = {"minReplicas": 2, "maxReplicas": len(curve), "scaling": curve}
    return job


def bound(kube: Kube, ns: str, name: str) -> int:
    pods = kube.pods(ns, f"{names.TRAININGJOB_LABEL}={name}")
    return sum(
        1 for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") != "Failed"
    )


def status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict((kube.job(ns, name) or {}).get("status") or {})


def test_free_gpus_go_where_the_marginal_goodput_is_highest(kube: Kube, ns: str) -> None:
    # The 16 T4 GPUs: 12 held by three fixed jobs, 2 + 2 by the elastic jobs as they start.
    for name, replicas in (("hold", 8), ("first-free", 2), ("then-free", 2)):
        kube.create_job(ns, training_job(name, replicas, 1, "T4"))
    for name in ("hold", "first-free", "then-free"):
        wait_for(lambda n=name: kube.phase(ns, n) == "Running", f"{name} Running", 60)
    kube.create_job(ns, elastic("climbs", CLIMBS))
    kube.create_job(ns, elastic("flat", FLAT))
    watch = SettledInvariants(kube.core)

    def started() -> bool:
        assert watch.check() == []
        return all(
            bound(kube, ns, n) == 2 and len(kube.pods(ns, f"{names.TRAININGJOB_LABEL}={n}")) == 6
            for n in ("climbs", "flat")
        )

    wait_for(started, "both elastic jobs running 2 replicas with room to grow to 6", 60)
    for name, curve in (("climbs", CLIMBS), ("flat", FLAT)):
        assert status(kube, ns, name)["scaling"] == curve

    # Two GPUs free: both go to the job whose curve still climbs (0.8 + 0.7 against 0.4 + 0.3).
    kube.delete_job(ns, "first-free")

    def grown() -> bool:
        assert watch.check() == []
        return bound(kube, ns, "climbs") == 4

    wait_for(grown, "climbs grown to 4", 60)
    time.sleep(3)  # no later cycle moves a GPU the other way
    assert (bound(kube, ns, "climbs"), bound(kube, ns, "flat")) == (4, 2)

    # The climbing job reports its throughput fell at 4 replicas; the operator refines its curve.
    kube.patch_job(ns, "climbs", {"metadata": {"annotations": {names.THROUGHPUT: SLOWER_AT_FOUR}}})

    def refined() -> list[float] | None:
        st = status(kube, ns, "climbs")
        curve = st.get("scaling") or []
        waiting = [
            p
            for p in kube.pods(ns, f"{names.TRAININGJOB_LABEL}=climbs")
            if not p["spec"].get("nodeName")
        ]
        on_pods = {(p["metadata"].get("annotations") or {}).get(names.SCALING) for p in waiting}
        if len(curve) == 6 and curve[3] < curve[2] and len(on_pods) == 1 and None not in on_pods:
            return list(curve)
        return None

    curve = wait_for(refined, "the refined curve in the status and on the waiting pods", 30)
    assert status(kube, ns, "climbs")["throughput"] == [
        {"replicas": 2, "value": 190.0},
        {"replicas": 4, "value": 160.0},
    ]
    assert curve[4] - curve[3] < FLAT[2] - FLAT[1]  # its next step is now worth less than flat's

    # Its 4th replica now does less than nothing (-0.385) and flat's 3rd adds 0.4: with no GPU
    # freeing, flat takes it (core/rebalance.py); not climbs' 3rd (0.085), for a gain (0.4 -
    # 0.085, x the T4's 0.35) below the disruption's price.
    seen: list[tuple[int, int]] = []

    def counts() -> tuple[int, int]:
        assert watch.check() == []
        seen.append((bound(kube, ns, "climbs"), bound(kube, ns, "flat")))
        return seen[-1]

    wait_for(lambda: counts() == (3, 3), "flat's 3rd replica taken from climbs", 60)
    time.sleep(3)
    assert counts() == (3, 3), seen[-20:]

    # Two more GPUs free: both go to flat (0.3, 0.2 against climbs' -0.385, then 0.282).
    kube.delete_job(ns, "then-free")
    wait_for(lambda: counts() == (3, 5), "flat grown to 5", 60)
    time.sleep(3)
    assert counts() == (3, 5), seen[-20:]
    assert invariants.check(kube.core) == []


# Steps from 2 replicas: GROWS 0.8, 0.7, 0.1, 0.1; LEVELS 0.3, 0.25, 0.2, 0.15 ... Of four
# GPUs beyond both minimums the goodput is highest as GROWS 0.8 + 0.7 and LEVELS 0.3 + 0.25.
GROWS = [1.0, 1.9, 2.7, 3.4, 3.5, 3.6]
LEVELS = [1.0, 1.3, 1.55, 1.75, 1.9, 2.0]


def test_held_growth_moves_to_the_job_whose_next_replicas_add_more(kube: Kube, ns: str) -> None:
    # The 16 T4 GPUs: 8 held by a fixed job; the first elastic job grows into 6 of the other 8.
    kube.create_job(ns, training_job("hold", 8, 1, "T4"))
    wait_for(lambda: kube.phase(ns, "hold") == "Running", "hold Running", 60)
    kube.create_job(ns, elastic("levels", LEVELS))
    watch = SettledInvariants(kube.core)

    def grown() -> bool:
        assert watch.check() == []
        return bound(kube, ns, "levels") == 6

    wait_for(grown, "levels grown to 6", 60)
    minimum = {
        p["metadata"]["uid"]
        for p in kube.pods(ns, f"{names.TRAININGJOB_LABEL}=levels")
        if p["metadata"]["labels"].get(names.RANK_LABEL) in ("0", "1")
    }
    assert len(minimum) == 2

    # The second starts at its minimum on the last 2 free GPUs; no GPU frees after that, and
    # levels' 6th and 5th replicas (0.1, 0.15) go to grows' 3rd and 4th (0.8, 0.7); then no
    # move gains more than it disrupts (levels' 4th adds 0.2, grows' 5th 0.1).
    kube.create_job(ns, elastic("grows", GROWS))

    def rebalanced() -> bool:
        assert watch.check() == []
        pods = kube.pods(ns, f"{names.TRAININGJOB_LABEL}=levels")
        assert minimum <= {p["metadata"]["uid"] for p in pods}, "levels' minimum was touched"
        return (bound(kube, ns, "grows"), bound(kube, ns, "levels")) == (4, 4)

    wait_for(rebalanced, "grows 4 and levels 4 replicas", 90)
    time.sleep(5)  # and it stays there
    assert (bound(kube, ns, "grows"), bound(kube, ns, "levels")) == (4, 4)
    assert kube.phase(ns, "levels") == "Running" and kube.phase(ns, "grows") == "Running"
    assert kube.condition(ns, "levels", "Preempted") is None  # shrunk, not preempted
    assert invariants.check(kube.core) == []


def test_an_unreadable_report_is_shown_on_the_job(kube: Kube, ns: str) -> None:
    kube.create_job(ns, elastic("reports", FLAT))
    wait_for(lambda: status(kube, ns, "reports").get("scaling") == FLAT, "curve in the status")
    kube.patch_job(ns, "reports", {"metadata": {"annotations": {names.THROUGHPUT: "fast"}}})

    def shown() -> dict[str, Any] | None:
        c = kube.condition(ns, "reports", "ThroughputReported")
        return c if c is not None and c["status"] == "False" else None

    reported = wait_for(shown, "ThroughputReported False")
    assert reported["reason"] == "ThroughputUnreadable"
    assert "replicas=throughput" in reported["message"]
    assert status(kube, ns, "reports")["scaling"] == FLAT

    def warned() -> bool:  # posted after the status patch of the same pass
        events = kube.events(ns, "reports")
        return any(e["reason"] == "ThroughputUnreadable" and e["type"] == "Warning" for e in events)

    wait_for(warned, "a ThroughputUnreadable Warning Event")


def test_an_invalid_curve_is_refused_naming_the_field(kube: Kube, ns: str) -> None:
    with pytest.raises(ApiException) as refused:
        kube.create_job(ns, elastic("bad", [1.0, 1.8, 1.5, 2.0, 2.1, 2.2]))
    assert refused.value.status == 422
    body = refused.value.body or ""
    assert "spec.elastic.scaling" in body and "must not decrease" in body
    assert kube.job(ns, "bad") is None
