"""Phase 9 of the cycle: why each gang waits, written into its pods' PodScheduled condition.

Every message has the form `Reason: message`: the core's pending reason, or one of the codes
the scheduler adds (`SchedulerReason`, in the contract). A reason is written once it has held for
`explain_delay` seconds, and `busy_delay` longer while bindings are in flight (see `write`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpufleet.core.decision import Decision
from gpufleet.model.contract.reasons import SchedulerReason, pending_text, scheduled_message
from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.cluster_view import ClusterView
from gpufleet.scheduler.eligibility import Outcome

PREEMPTING_MESSAGE = pending_text(
    SchedulerReason.PREEMPTING, "waiting for the gangs or elastic replicas it preempted to exit"
)


def pending_messages(
    waiting: Mapping[str, str],
    capped: Mapping[str, str],
    decision: Decision,
    held: Mapping[str, str],
    blocked: Mapping[str, str],
    filters: Mapping[str, Outcome] | None = None,
) -> dict[str, str]:
    """Gang id -> why it waits this cycle.

    `waiting`: gangs not offered to the core; `capped`: gang -> the identical gang offered in
    its place; `held`: placed gangs the cycle could not bind yet; `blocked`: preemptors a
    disruption budget stopped, whose reason stays that while their victims are held back from
    the core (which alone would only say "no room"); `filters`: which node filters left out
    how many nodes for each offered gang, added to the core's reason.
    """
    messages = dict(waiting)
    for gid, peer in capped.items():
        messages[gid] = pending_text(SchedulerReason.QUEUED, f"behind identical gang {peer}")
    for p in decision.pending:
        message = pending_text(p.reason, p.message)
        outcome = (filters or {}).get(p.gang_id)
        if outcome is not None:
            message = outcome.reason(message)
        messages[p.gang_id] = blocked.get(p.gang_id, message)
    for gid in held:
        messages.setdefault(gid, held[gid])
    for gid, peer in capped.items():
        # The core's reason for the last identical gang offered holds for those behind it.
        if peer in messages:
            messages[gid] = messages[peer]
    return messages


class WaitingReasons:
    """Gang -> (its pending reason, since when), and the writes of reasons that held."""

    def __init__(
        self, binder: Binder, clock: Callable[[], float], delay: float, busy_delay: float
    ) -> None:
        self.binder = binder
        self.clock = clock
        self.delay = delay
        self.busy_delay = busy_delay
        self._reasons: dict[str, tuple[str, float]] = {}

    def write(self, messages: Mapping[str, str], view: ClusterView, busy: bool) -> None:
        """Write each gang's reason into its pods once it has held long enough.

        While a pool frees up, each cycle gives the gangs still waiting a new, short-lived
        reason, and a status write per waiting pod would compete with the bindings for the API
        server. While bindings are in flight (`busy`) a reason must hold `busy_delay` longer:
        in a burst (a pool uncordoned under 1,000 waiting pods) the reason of the pods still
        waiting holds for seconds while they are being placed, and a status write for each of
        them (through the generated client, ~3 ms of CPU each) delayed the bindings. A gang
        still waiting when the burst is over gets its reason then. A gang still waiting for its
        own pods to be created says nothing: its count changes with every pod and rewriting
        every member's condition each cycle costs more than it tells.
        """
        quiet = pending_text(SchedulerReason.GANG, "waiting for")
        loud = {g: m for g, m in messages.items() if not m.startswith(quiet)}
        members: dict[str, tuple[str, ...]] = dict(view.held_pods)
        members.update({pg.gang.id: pg.pods for pg in view.pending})
        now = self.clock()
        delay = self.delay + (self.busy_delay if busy else 0.0)
        seen = self._reasons
        self._reasons = {
            g: seen[g] if g in seen and seen[g][0] == m else (m, now) for g, m in loud.items()
        }
        writes: dict[str, str] = {}
        for gid, message in loud.items():
            if now - self._reasons[gid][1] < delay:
                continue
            for key in members.get(gid, ()):
                f = view.facts.get(key)
                if f is not None and scheduled_message(f.pod) != message:
                    writes[key] = message
        if writes:
            self.binder.mark_pending(writes)
