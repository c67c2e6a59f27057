"""What one scheduling cycle did (`CycleReport`): returned to tests, logged, and counted as
metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.scheduler.power_marks import PowerReport


@dataclass
class CycleReport:
    """What one cycle did; each phase adds what it did."""

    cycle: int
    bound: list[str] = field(default_factory=list)  # gang ids, bindings answered
    sent: int = 0  # bindings sent this cycle (answered in the background)
    pending: dict[str, str] = field(default_factory=dict)  # gang id -> message
    preempted: list[str] = field(default_factory=list)  # victim gang ids
    mig_requests: dict[str, str] = field(default_factory=dict)  # node -> config name
    restarted: list[str] = field(default_factory=list)  # gangs restarted whole
    moved: list[str] = field(default_factory=list)  # gangs restarted on a faster placement
    completed: list[str] = field(default_factory=list)  # partly bound gangs being completed
    bind_failures: dict[str, str] = field(default_factory=dict)  # gang id -> error
    lent: list[str] = field(default_factory=list)  # "standby->borrowing gang" loans made
    reclaimed: list[str] = field(default_factory=list)  # borrowers preempted for their lenders
    power: PowerReport = field(default_factory=PowerReport)  # idle-node power-down marks
    timings: dict[str, float] = field(default_factory=dict)
    # CPU seconds of the scheduler's thread in the cycle: the wall times above stretch with
    # the machine's load, this does not (benchmarks on a shared machine report both).
    cpu_s: float = 0.0
    error: str | None = None

    @property
    def acted(self) -> bool:
        """Whether the cycle changed anything in the cluster (worth a log line)."""
        return bool(
            self.sent
            or self.bound
            or self.preempted
            or self.mig_requests
            or self.restarted
            or self.moved
            or self.lent
            or self.reclaimed
            or self.power.power_off
            or self.power.wake
            or self.power.booted
        )
