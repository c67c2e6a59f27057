"""When a partly bound gang is a violation (gpufleet.testing.invariants.PartialGangClock).

Binding a gang is one Binding per pod. The chaos run's checker saw `chaos/j00022` partly bound
for about 20 s: its leader had sent both Bindings, one was written, and it was SIGKILLed; the
next leader completed the gang in its first cycle, 19 s later (the Lease's 15 s and its start).
Nobody could have completed it sooner, so the clock judges a killed leader's gang against the
next holder's takeover; a live leader still gets 3 s, whatever the Lease says."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.model.contract import names
from gpufleet.testing import invariants
from gpufleet.testing.invariants import ALWAYS_LEADING, PartialGangClock, Term
from tests.unit.testing.checker_fakes import Clock, Reads

GANG = "gang chaos/g: 1 live pods bound, the gang needs 2"
PARTIAL = {"chaos/g": GANG}


def run(clock: PartialGangClock, timeline: list[tuple[float, bool, Term | None]]) -> list[str]:
    """Every look of `timeline` (at, gang partly bound?, Lease term); the distinct overdue."""
    found: dict[str, float] = {}
    for at, partial, term in timeline:
        for text in clock.observe(PARTIAL if partial else {}, term, at):
            found.setdefault(text, at)
    return list(found)


def killed_leader(completed_at: float | None, until: float = 60.0) -> list[Any]:
    """Checks every 2 s: the gang partly bound from 0 s, when its leader L1 (renewing every
    5 s, last at -2 s) was killed; L1's Lease expires at 13 s, L2 takes it at 14.5 s and
    renews every 5 s; the gang is whole from `completed_at` (None: never)."""
    old = Term("l1", -500.0, -2.0)
    out = []
    for i in range(int(until / 2) + 1):
        at = 2.0 * i
        term = old if at < 14.5 else Term("l2", 14.5, 14.5 + 5 * ((at - 14.5) // 5))
        partial = completed_at is None or at < completed_at
        out.append((at, partial, term))
    return out


def test_a_killed_leaders_gang_completed_in_the_next_leaders_first_cycle_is_no_violation() -> None:
    # j00022: completed 19 s after the kill, 4.5 s after the new leader took the Lease.
    timeline = killed_leader(completed_at=19.0)
    assert run(PartialGangClock(grace=3, takeover=20), timeline) == []
    # The rule before (3 s from first seen, whoever leads) reported it at 4 s.
    blind = [(at, partial, ALWAYS_LEADING) for at, partial, _ in timeline]
    assert run(PartialGangClock(grace=3, takeover=20), blind) == [GANG]


def test_a_killed_leaders_gang_the_next_leader_never_completes_is_one() -> None:
    found = run(PartialGangClock(grace=3, takeover=20), killed_leader(completed_at=None))
    assert found == [GANG]
    # Judged once the new leader renewed past its takeover (14.5 + 20 + 3 = 37.5 s).
    timeline = killed_leader(completed_at=None)
    clock = PartialGangClock(grace=3, takeover=20)
    first = next(at for at, p, term in timeline if clock.observe(PARTIAL if p else {}, term, at))
    assert 37.5 < first <= 37.5 + 5 + 2


def test_a_live_leader_leaving_a_gang_partly_bound_is_caught_after_the_grace() -> None:
    # Leading for minutes, renewing every 5 s: the Lease excuses nothing.
    def term(at: float) -> Term:
        return Term("l1", -500.0, 5 * (at // 5))

    timeline = [(2.0 * i, True, term(2.0 * i)) for i in range(10)]
    clock = PartialGangClock(grace=3, takeover=20)
    overdue = [at for at, p, t in timeline if clock.observe(PARTIAL if p else {}, t, at)]
    assert overdue and overdue[0] <= 3 + 5 + 2  # its first renewal after the grace
    assert overdue == [at for at, _, _ in timeline if at >= overdue[0]]  # while it lasts


def test_a_live_leaders_gang_that_clears_before_its_renewal_is_still_reported() -> None:
    # Partly bound 0-6 s; the holder renews at 0 and 10 s: it was alive throughout.
    timeline = [
        (0.0, True, Term("l1", -500.0, 0.0)),
        (2.0, True, Term("l1", -500.0, 0.0)),
        (4.0, True, Term("l1", -500.0, 0.0)),
        (6.0, True, Term("l1", -500.0, 0.0)),
        (8.0, False, Term("l1", -500.0, 0.0)),
        (10.0, False, Term("l1", -500.0, 10.0)),
    ]
    assert run(PartialGangClock(grace=3, takeover=20), timeline) == [GANG]


def test_bindings_in_flight_under_a_live_leader_are_no_violation() -> None:
    timeline = [(0.0, True, Term("l1", -500.0, 0.0)), (2.0, True, Term("l1", -500.0, 0.0))]
    timeline += [(4.0, False, Term("l1", -500.0, 0.0)), (10.0, False, Term("l1", -500.0, 10.0))]
    assert run(PartialGangClock(grace=3, takeover=20), timeline) == []


def test_a_gang_seen_in_a_new_leaders_start_has_its_takeover() -> None:
    # A dead leader's Binding the API server wrote after the new leader took the Lease.
    timeline = [(at, 2.0 <= at < 16.0, Term("l2", 0.0, 5 * (at // 5))) for at in range(0, 40, 2)]
    assert run(PartialGangClock(grace=3, takeover=20), timeline) == []
    timeline = [(at, 2.0 <= at < 30.0, Term("l2", 0.0, 5 * (at // 5))) for at in range(0, 40, 2)]
    assert run(PartialGangClock(grace=3, takeover=20), timeline) == [GANG]


def test_nobody_holding_the_lease_defers_the_verdict_to_the_next_holder() -> None:
    # Released (a handover's SIGTERM) while the gang was partly bound; the next holder takes
    # over at 20 s and completes it at 25 s.
    new = Term("l2", 20.0, 20.0)
    timeline = [(at, at < 25, None if at < 20 else new) for at in range(0, 40, 2)]
    assert run(PartialGangClock(grace=3, takeover=20), timeline) == []


def test_without_leader_election_the_grace_counts_from_first_seen() -> None:
    clock = PartialGangClock(grace=3, takeover=20)
    assert clock.observe(PARTIAL, ALWAYS_LEADING, 0.0) == []
    assert clock.observe(PARTIAL, ALWAYS_LEADING, 2.0) == []
    assert clock.observe(PARTIAL, ALWAYS_LEADING, 4.0) == [GANG]
    assert clock.observe({}, ALWAYS_LEADING, 6.0) == []
    assert not clock.watching


# --- read from the API server ----------------------------------------------------------------


class FakeLeases:
    def __init__(self, spec: dict[str, Any] | None) -> None:
        self.spec = spec

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Any:
        assert (name, namespace) == ("gpufleet-operator", "gpufleet-system")
        if self.spec is None:
            raise ApiException(status=404)
        return SimpleNamespace(data=json.dumps({"spec": self.spec}).encode())


def test_read_term_parses_the_holder_and_its_times() -> None:
    spec = {
        "holderIdentity": "host-12-abc",
        "acquireTime": "2026-12-03T23:00:00.500000Z",
        "renewTime": "2026-12-03T23:00:10.000000Z",
        "leaseDurationSeconds": 15,
    }
    term = invariants.read_term(FakeLeases(spec))  # type: ignore[arg-type]
    assert term is not None and term.holder == "host-12-abc"
    assert term.renewed - term.acquired == pytest.approx(9.5)
    assert term.acquired == pytest.approx(1796338800.5)


@pytest.mark.parametrize(
    "spec",
    [None, {"holderIdentity": None, "acquireTime": "2026-12-03T23:00:00.000000Z"}],
    ids=["no-lease", "released"],
)
def test_read_term_nobody_holds(spec: dict[str, Any] | None) -> None:
    assert invariants.read_term(FakeLeases(spec)) is None  # type: ignore[arg-type]


def pod(name: str, node: str | None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "chaos",
            "labels": {names.GANG_LABEL: "g"},
            "annotations": {names.GANG_SIZE: "2"},
        },
        "spec": {"schedulerName": names.SCHEDULER_NAME, "nodeName": node},
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_final_check_reads_again_a_gang_caught_between_its_bindings() -> None:
    # The soak's one-off "gang j00323: 1 live pods bound, the gang needs 2" at its final check,
    # a single read, of a gang being bound in its last minute.
    core = Reads([pod("g-0", "n0"), pod("g-1", None)], [pod("g-0", "n0"), pod("g-1", "n1")])
    clock = Clock()
    assert invariants.check(Reads(*core.states)) == [GANG]  # type: ignore[arg-type]
    found = invariants.final_check(core, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert found == [] and core.reads == 2


def test_final_check_reports_a_gang_partly_bound_for_the_grace() -> None:
    core = Reads([pod("g-0", "n0"), pod("g-1", None)])
    clock = Clock()
    found = invariants.final_check(core, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert found == [GANG] and 7 <= core.reads <= 9


def test_settled_checker_reads_the_term_and_judges_by_it() -> None:
    core = Reads([pod("g-0", "n0"), pod("g-1", None)])
    clock = Clock()

    def term() -> Term:  # l1 killed at 1000 s; l2 takes over at 1005 s, renews every 5 s
        if clock.t < 1005:
            return Term("l1", 0.0, 998.0)
        return Term("l2", 1005.0, 1005.0 + 5 * ((clock.t - 1005) // 5))

    checker = invariants.SettledChecker(
        core,  # type: ignore[arg-type]
        grace=3,
        takeover=20,
        term=term,
        clock=clock,
    )
    seen = []
    for _ in range(20):
        seen.append(checker.check())
        clock.sleep(2.0)
    # l1 never renews; l2 is judged at its first renewal after 1005 + 20 + 3 s.
    first = next(i for i, found in enumerate(seen) if found)
    assert seen[first] == [GANG] and 1000 + 2 * first == 1030
