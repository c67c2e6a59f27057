"""Node reservations for long-waiting wide gangs: the queues' starvation protection on nodes.

Aging (fairshare.py) offers a gang that has waited `Policy.queue_aging_s` to placement before
the others, but a gang that needs many GPUs on one node (a same-node gang, or a single replica
of several GPUs) can still wait for hours: every GPU a finishing job frees is taken by a small
gang in the same decision, so no node ever empties while small jobs keep arriving. When such an
aged gang fits nowhere, the decision reserves one node for it: the node closest to holding it,
i.e. among the schedulable nodes of a type it accepts and its queue's quota allows there, with
at least the GPUs it needs, the one with the most free GPUs, then the fewest running gangs, then
the gang's best type. The reservation takes the node's free whole GPUs for the rest of the
decision, so no later gang and no move lands there; the node drains as its jobs finish, and the
gang, going first as an aged gang, takes it in the decision after it is empty.

This is the reservation of backfilling batch schedulers without runtime estimates: the node is
chosen from the current state only (never from job lengths). Choosing instead the node whose
running gangs' progress estimates (`RunProgress`) end first was tried on the tuning windows and
did no better: the largest of a node's estimates understates when its last gang ends.

An aged gang whose replicas may sit on different nodes (topology `any` with several replicas)
fits nowhere when too few GPUs of any type are free at once, and it starves the same way: the
gangs behind it take every GPU a finishing job frees (held-out 2017-11-22 s0, greedy: a 24-GPU
gang of one-GPU replicas waited 4.6 h). It is given the fewest nodes that hold it packed
(`spread.fewest_node_count`) of the type where those nodes, the ones with the most free
GPUs (then the fewest running gangs), hold most of it now; its queue's quota is checked up to
the top-level queue only, since on a full type the cluster's capacity is what the drain waits
for. These nodes are not evacuated (evacuation.py empties one node for one gang).

At most `MAX_RESERVED` gangs get a reservation per decision, the first aged ones in the queues'
order (the longest waiting first), which bounds the capacity held idle. Gangs of one GPU (any
free GPU fits them) and MIG gangs get no reservation. The
rule belongs to the queues (it needs their aging order), so it applies when the snapshot carries
queues; the greedy pass makes the reservations and CP-SAT starts from a state with the same GPUs
taken, so both engines keep the node free. A reservation never stands in the way of preemption:
the reserved GPUs are given back while stuck gangs look for victims (a queue's reclaim of its
nominal quota, or a higher priority, comes before a drain) and taken again, where still free,
after. A gang that needs no victim of its own there, placed on queue quota other gangs' victims
gave back (preempt.py), plans with them kept (`kept_while`). A preemptor may still evict a
victim and then land on lifted GPUs without using the victim's (preempt.py); two fixes were
measured and not kept (bench/README.md, Queues, fiftieth and fifty-second passes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gpufleet.core.demand import Gang, Topology
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.core.spread import fewest_node_count
from gpufleet.core.state import ClusterState

__all__ = [
    "MAX_RESERVED",
    "kept_while",
    "lift_reservations",
    "renew_reservations",
    "reservable",
    "reserve_node",
    "with_reservations",
]

MAX_RESERVED = 1  # gangs given a node per decision


def reservable(gang: Gang, aging_s: float) -> bool:
    """Whether `gang` may be given a node (or a spreadable gang nodes) when it fits nowhere
    (module docstring)."""
    if gang.mig_profile is not None or gang.waited_s < aging_s:
        return False
    return gang.gpus_needed(gang.replicas_min) > 1


def _one_node(gang: Gang) -> bool:
    return gang.topology is Topology.SAME_NODE or gang.replicas_min == 1


def reserve_node(
    state: ClusterState,
    gang: Gang,
    types: Sequence[str],
    allowed: frozenset[int] | None = None,
) -> int | None:
    """Reserve for `gang` the node closest to holding it (module docstring): take its free
    whole GPUs in `state` and return its index; None when no node of `types` could hold it.
    `types` are the gang's usable types, best first; `allowed` the nodes it may use. A gang
    whose replicas may sit on different nodes gets the fewest nodes closest to holding it
    instead (`_reserve_room`; the first of them is returned)."""
    gangs_on = _gangs_on(state)
    if not _one_node(gang):
        return _reserve_room(state, gang, types, allowed, gangs_on)
    need = gang.gpus_needed(gang.replicas_min)
    gate = state.gate
    best: tuple[int, int, int, int] | None = None
    for order, gpu_type in enumerate(types):
        if gate is not None and not gate.allows(gang, gpu_type, gang.replicas_min):
            continue
        for n in state.nodes_by_type.get(gpu_type, []):
            if state.nodes[n].gpu_count < need or (allowed is not None and n not in allowed):
                continue
            key = (-len(state.whole_mode_gpus(n)), gangs_on[n], order, n)
            if best is None or key < best:
                best = key
    if best is None:
        return None
    node = best[3]
    gpus = tuple(state.whole_mode_gpus(node))
    state.take_whole(node, gpus)
    if gate is not None:
        gate.reserved.append((node, gpus))
        gate.reserved_for[node] = gang
    return node


def _gangs_on(state: ClusterState) -> Counter[int]:
    """Running gangs per node index."""
    gangs_on: Counter[int] = Counter()
    for running in state.snapshot.running:
        for name in {r.node for r in running.replicas}:
            if name in state.node_index:
                gangs_on[state.node_index[name]] += 1
    return gangs_on


def _reserve_room(
    state: ClusterState,
    gang: Gang,
    types: Sequence[str],
    allowed: frozenset[int] | None,
    gangs_on: Counter[int],
) -> int | None:
    """Reserve for a spreadable `gang` the fewest nodes that hold it packed, on the type where
    they are closest to it (module docstring); the first node's index, None when no type has
    such nodes. Not recorded in `reserved_for`: evacuation empties one node for one gang."""
    size = gang.gpus_per_replica
    need = gang.replicas_min
    gate = state.gate
    best: tuple[tuple[int, int, int], list[int]] | None = None
    for order, gpu_type in enumerate(types):
        # The cluster's capacity aside: on a full type what runs there is what the room waits
        # for (a quota check with it refused every drain of a busy type).
        if gate is not None and not gate.allows_in_queues(gang, gpu_type, need):
            continue
        fewest = fewest_node_count(state, gpu_type, size, need)
        if fewest is None:
            continue
        ranked = sorted(
            (-(len(state.whole_mode_gpus(n)) // size), gangs_on[n], n)
            for n in state.nodes_by_type.get(gpu_type, [])
            if state.nodes[n].gpu_count >= size and (allowed is None or n in allowed)
        )
        chosen = ranked[:fewest]
        if sum(state.nodes[n].gpu_count // size for _, _, n in chosen) < need:
            continue  # too few nodes of the type it may use to hold it packed
        held = min(need, -sum(r for r, _, _ in chosen))
        key = (-held, sum(g for _, g, _ in chosen), order)
        if best is None or key < best[0]:
            best = (key, [n for _, _, n in chosen])
    if best is None:
        return None
    for n in best[1]:
        gpus = tuple(state.whole_mode_gpus(n))
        state.take_whole(n, gpus)
        if gate is not None:
            gate.reserved.append((n, gpus))
    return best[1][0]


def with_reservations(initial: ClusterState, reserved_in: ClusterState) -> ClusterState:
    """`initial` with the GPUs the greedy pass reserved in `reserved_in` taken, so that a solver
    starting from `initial` (CP-SAT) keeps the same nodes free of new gangs."""
    gate = reserved_in.gate
    if gate is None or not gate.reserved:
        return initial
    state = initial.copy()
    for node, gpus in gate.reserved:
        state.take_whole(node, gpus)
    return state


def lift_reservations(state: ClusterState) -> list[tuple[int, tuple[int, ...]]]:
    """Give the GPUs reserved in `state` back (before preemption); returns them for
    `renew_reservations`."""
    gate = state.gate
    if gate is None or not gate.reserved:
        return []
    lifted, gate.reserved = gate.reserved, []
    for node, gpus in lifted:
        if gpus:  # a reservation keeps none when its node's free GPUs are already kept
            state.release(ReplicaPlacement(state.nodes[node].name, gpus))
    return lifted


def _still_free(
    state: ClusterState, lifted: Sequence[tuple[int, tuple[int, ...]]]
) -> list[tuple[int, tuple[int, ...]]]:
    """The lifted GPUs that are still empty and in whole mode, by node."""
    out = []
    for node, gpus in lifted:
        free = tuple(g for g in gpus if g in state.empty[node] and state.layout[node][g] is None)
        if free:
            out.append((node, free))
    return out


@contextmanager
def kept_while(
    state: ClusterState, lifted: Sequence[tuple[int, tuple[int, ...]]]
) -> Iterator[None]:
    """Take the lifted GPUs that are still free for the duration (a plan made inside leaves
    the drains' GPUs alone), and give them back after."""
    kept = _still_free(state, lifted)
    for node, gpus in kept:
        state.take_whole(node, gpus)
    try:
        yield
    finally:
        for node, gpus in kept:
            state.release(ReplicaPlacement(state.nodes[node].name, gpus))


def renew_reservations(state: ClusterState, lifted: Sequence[tuple[int, tuple[int, ...]]]) -> None:
    """Reserve again the lifted GPUs that are still free (preemption placed nothing there)."""
    gate = state.gate
    if gate is None:
        return
    for node, free in _still_free(state, lifted):
        state.take_whole(node, free)
        gate.reserved.append((node, free))
