"""The validator's check of the queues' limits while victims still run (validate_quota.py
`_Moments`): every set of gone victims is a moment, since victims exit in any order.

Before, past 10 distinct awaited victim sets the validator checked each set alone, not their
unions, so a queue over its limit only once two placements' victims had gone (and a third's
not yet) passed. Now it searches the unions per resource and drops the branches that cannot
break a limit; the property below holds it to every subset of gone victims.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.decision import Decision, GangPlacement, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

STILL_RUN = "still run"


def one_gpu(gang_id: str, node: str, gpu: int, waits_for: tuple[str, ...] = ()) -> GangPlacement:
    return GangPlacement(gang_id, "L4", (ReplicaPlacement(node, (gpu,)),), waits_for=waits_for)


def two_waits_case(
    fillers: int, p2_waits: tuple[str, ...]
) -> tuple[Snapshot, list[Gang], Decision]:
    """L4 nodes of 8 GPUs, one GPU per gang. Queue a (nominal 2, no borrowing) holds va; x
    (no nominal quota) borrows v1, v2 and the `fillers` w0, w1, ... a's p1 and p2 reclaim v1
    and v2, z's pz reclaims va, and each of x's f0, f1, ... (priority 1) evicts its w: every
    gang awaits a set of its own. Once v1 and v2 have gone and va still runs, p1 and p2 start
    beside va: a holds 3 of 2 (2 before the decision, and 2 after it). `p2_waits`: p2's
    `waits_for`."""
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={"L4": Quota(2, borrowing_limit=0)}),
            QueueSpec("x", quotas={"L4": Quota(0)}),
            QueueSpec("z", quotas={"L4": Quota(4)}),
        ]
    )
    builder = cluster()
    slots = [(f"n{i // 8}", i % 8) for i in range(3 + fillers)]
    for name in sorted({node for node, _ in slots}):
        builder.node(name, "L4", 8)
    (n1, g1), (n2, g2), (na, ga), *rest = slots
    builder.run("v1", n1, (g1,), queue="x").run("v2", n2, (g2,), queue="x")
    builder.run("va", na, (ga,), queue="a")
    pending = [
        gang("p1", "L4", queue="a"),
        gang("p2", "L4", queue="a"),
        gang("pz", "L4", queue="z"),
    ]
    placements = [one_gpu("p1", n1, g1), one_gpu("p2", n2, g2, p2_waits), one_gpu("pz", na, ga)]
    preemptions = [
        Preemption("v1", "p1", reclaim=True),
        Preemption("v2", "p2", reclaim=True),
        Preemption("va", "pz", reclaim=True),
    ]
    for i, (node, gpu) in enumerate(rest):
        builder.run(f"w{i}", node, (gpu,), queue="x")
        pending.append(gang(f"f{i}", "L4", queue="x", priority=1))
        placements.append(one_gpu(f"f{i}", node, gpu))
        preemptions.append(Preemption(f"w{i}", f"f{i}"))
    snapshot = builder.queues(tree).build()
    return snapshot, pending, Decision(placements=tuple(placements), preemptions=tuple(preemptions))


def test_a_queue_over_its_limit_once_two_of_sixteen_awaited_sets_have_gone() -> None:
    # 16 distinct awaited sets; each alone leaves a at 2 of 2, v1 and v2 gone together 3.
    snapshot, pending, decision = two_waits_case(13, ())
    assert decision_problems(snapshot, pending, decision) == [
        "p1, p2 bound once v1, v2 have gone, while other victims still run: queue a over its "
        "L4 limit: 3 > 2 (a gang waits for the victims whose GPUs or queue quota it takes: "
        "waits_for)"
    ]


def test_no_union_breaks_the_limit_when_p2_also_waits_for_va() -> None:
    # p2 starts only once va has gone too: a holds at most 2 at every moment.
    snapshot, pending, decision = two_waits_case(13, ("va",))
    assert decision_problems(snapshot, pending, decision) == []


# --- every subset of gone victims, recomputed here ------------------------------------------

TYPES = ("L4", "A100-80GB")
QUEUES = ("a", "b", "c", "d")
PROBLEM = re.compile(r"(queue (\w+)|cluster) over its (\S+) (?:limit|capacity)")
GONE = re.compile(r"bound once (.*?) (?:has|have) gone")


def limit_breaks(
    tree: QueueTree,
    capacity: Counter[str],
    old: dict[str | None, Counter[str]],
    new: dict[str | None, Counter[str]],
) -> set[tuple[str | None, str]]:
    """(queue, or None for the cluster; resource) over its limit in `new` and above `old`."""

    def load(usage: dict[str | None, Counter[str]], name: str | None, r: str) -> int:
        kids = tree.kids(name)
        return usage.get(name, Counter())[r] + sum(
            max(load(usage, k, r), tree.queues[k].quota(r).kept) for k in kids
        )

    out: set[tuple[str | None, str]] = set()
    for r in TYPES:
        for name in tree.queues:
            limit = tree.queues[name].quota(r).ceiling
            if load(new, name, r) > limit and load(new, name, r) > load(old, name, r):
                out.add((name, r))
        if load(new, None, r) > capacity[r] and load(new, None, r) > load(old, None, r):
            out.add((None, r))
    return out


def every_moment(
    snapshot: Snapshot, pending: list[Gang], decision: Decision
) -> dict[frozenset[str], set[tuple[str | None, str]]]:
    """Each set of gone victims short of all of them, with the limits broken there."""
    assert snapshot.queues is not None
    tree = snapshot.queues
    capacity: Counter[str] = Counter()
    for node in snapshot.nodes:
        capacity[node.gpu_type] += node.gpu_count
    running = {r.id: r for r in snapshot.running}
    gangs = {g.id: g for g in pending}
    before: dict[str | None, Counter[str]] = {}
    for r in snapshot.running:
        before.setdefault(r.queue, Counter())[r.gpu_type] += sum(len(x.gpus) for x in r.replicas)
    victims = sorted(p.gang_id for p in decision.preemptions)
    own = {p.gang_id: {v.gang_id for v in decision.preemptions if v.for_gang == p.gang_id}
           for p in decision.placements}  # fmt: skip
    out: dict[frozenset[str], set[tuple[str | None, str]]] = {}
    for size in range(len(victims)):
        for gone in map(frozenset, combinations(victims, size)):
            usage = {q: Counter(c) for q, c in before.items()}
            for v in gone:
                usage[running[v].queue][running[v].gpu_type] -= sum(
                    len(x.gpus) for x in running[v].replicas
                )
            for p in decision.placements:
                if (own[p.gang_id] | set(p.waits_for)) <= gone:
                    g = gangs[p.gang_id]
                    usage.setdefault(g.queue, Counter())[p.gpu_type] += g.gpus_needed(1)
            out[gone] = limit_breaks(tree, capacity, before, usage)
    return out


@st.composite
def waiting_decisions(draw: st.DrawFn) -> tuple[Snapshot, list[Gang], Decision]:
    """Up to 4 queues (c and d under a, or top-level), victims and bystanders of 1-3 GPUs on
    two types, up to 6 placements, each with its own victims (0-2) and a random `waits_for`."""
    specs = []
    for name in QUEUES:
        quotas = {}
        for r in TYPES:
            nominal = draw(st.integers(0, 6))
            borrow = draw(st.none() | st.integers(0, 3))
            lend = draw(st.none() | st.integers(0, nominal))
            quotas[r] = Quota(nominal, borrowing_limit=borrow, lending_limit=lend)
        parent = "a" if name in ("c", "d") and draw(st.booleans()) else None
        specs.append(QueueSpec(name, parent=parent, quotas=quotas))
    tree = QueueTree.build(specs)
    builder = cluster()
    running: list[RunningGang] = []
    for r in TYPES:
        for i in range(draw(st.integers(1, 3))):
            builder.node(f"{r}-{i}", r, 4)
    nodes = {r: [n.name for n in builder.nodes if n.gpu_type == r] for r in TYPES}
    count = draw(st.integers(1, 6))
    for i in range(count + draw(st.integers(0, 3))):  # the first `count` are victims
        r = draw(st.sampled_from(TYPES))
        gpus = draw(st.integers(1, 3))
        node = draw(st.sampled_from(nodes[r]))
        queue = draw(st.sampled_from(QUEUES))
        running.append(
            RunningGang(
                f"v{i}" if i < count else f"r{i}",
                r,
                (ReplicaPlacement(node, tuple(range(gpus))),),
                queue=queue,
            )
        )
    victims = [g.id for g in running[:count]]
    pending: list[Gang] = []
    placements: list[GangPlacement] = []
    for i in range(draw(st.integers(1, 6))):
        r = draw(st.sampled_from(TYPES))
        gpus = draw(st.integers(1, 3))
        pending.append(gang(f"p{i}", r, gpus=gpus, queue=draw(st.sampled_from(QUEUES))))
        waits = tuple(sorted(draw(st.sets(st.sampled_from(victims), max_size=3))))
        replica = ReplicaPlacement(draw(st.sampled_from(nodes[r])), tuple(range(gpus)))
        placements.append(GangPlacement(f"p{i}", r, (replica,), waits_for=waits))
    preemptions = tuple(
        Preemption(v, draw(st.sampled_from([p.gang_id for p in placements]))) for v in victims
    )
    # A gang that evicts a victim does not also list it in waits_for.
    owner = {p.gang_id: p.for_gang for p in preemptions}
    placements = [
        replace(p, waits_for=tuple(v for v in p.waits_for if owner[v] != p.gang_id))
        for p in placements
    ]
    snapshot = replace(builder.queues(tree).build(), running=tuple(running))
    return snapshot, pending, Decision(placements=tuple(placements), preemptions=preemptions)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=waiting_decisions())
def test_the_limits_while_victims_run_are_judged_at_every_moment(
    case: tuple[Snapshot, list[Gang], Decision],
) -> None:
    snapshot, pending, decision = case
    truth = every_moment(snapshot, pending, decision)
    found: set[tuple[str | None, str]] = set()
    for problem in decision_problems(snapshot, pending, decision):
        if STILL_RUN not in problem:
            continue
        match = PROBLEM.search(problem)
        assert match is not None
        broken = (match.group(2), match.group(3))
        named = GONE.search(problem)
        gone = frozenset(named.group(1).split(", ")) if named else frozenset()
        assert broken in truth[gone], problem  # a real moment, with that limit broken there
        found.add(broken)
    assert found == set().union(*truth.values())  # and every limit broken at some moment
