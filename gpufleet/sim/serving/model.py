"""Request-level discrete-event model of a disaggregated (prefill/decode) LLM server.

Each request arrives at the **prefill** pool, waits in the pool's FCFS queue, is prefilled on one
replica in chunked-prefill iterations (`max_batched_tokens` per iteration, several requests
batched together), produces its first token there (TTFT), has its KV cache transferred to the
**decode** pool, waits there for a slot (`max_num_seqs` and KV-cache capacity), and is decoded
by continuous batching: every iteration produces one token for each running sequence and lasts
`ITL(batch, context)` from the replica's `ReplicaProfile`.

Every replica carries its own profile, so a pool may mix GPU types: a replica's prefill speed,
decode ITL, `max_num_seqs`, KV capacity, KV transfer time and billed GPUs are its own. Queued
work goes to the idle ready replica with the lowest id, whatever its type (no speed-aware
routing). Per-pool gauges aggregate over replicas: KV usage is KV used over KV capacity summed
over the serving replicas.

Replicas have a lifecycle: `set_replicas` adds replicas (with the pool's configured profile) that
become ready after `cold_start_s` (billed from the request, like a GPU pod that is pulling
weights) and removes replicas by draining them (no new work; they leave when their in-flight work
is done), so a scale-down never aborts a request. `set_replica_profiles` does the same per
profile: it converges the pool to a multiset of profiles, adding or draining replicas of each
profile only. Queued work waits for ready replicas.

Standby replicas (vLLM sleep mode level 1: weights offloaded to CPU memory, the KV cache
discarded, the GPU's memory freed while the server process stays up): `sleep` drains replicas
into the `asleep` phase instead of removing them, `wake` turns asleep replicas back into
starting ones that are ready after `wake_s` (distinct from, and much shorter than, the cold
start), and `set_replicas` wakes asleep replicas before it cold-starts new ones. An asleep
replica serves nothing and is not billed as serving GPU time (its GPU may be lent); `asleep`
counts them. `PoolConfig.standby` replicas start asleep.

The model is deterministic: the same requests, configuration and call sequence give the same
results (ties are broken by replica id and event sequence number). It exposes
- `sample(pool)`: a `MetricsSample` since the previous sample (what the policy consumes);
- `snapshot(pool)`: cumulative counters, gauges and histograms (what the exporter serves);
- `outcomes()`: per-request TTFT and time per output token, for SLO attainment.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import math
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.core.autoscaling_types import LatencyQuantiles, MetricsSample, PoolRole
from gpufleet.sim.serving.profiles import ReplicaProfile
from gpufleet.sim.serving.trace import Request

__all__ = [
    "E2E_BUCKETS",
    "ITL_BUCKETS",
    "TTFT_BUCKETS",
    "Histogram",
    "PoolConfig",
    "PoolSnapshot",
    "ReplicaPhase",
    "RequestOutcome",
    "ServingConfig",
    "ServingModel",
    "slo_attainment",
]

# Histogram bucket upper bounds in seconds (vLLM-like spacing; +Inf is implicit).
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0,
)  # fmt: skip
ITL_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
    0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
E2E_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0,
)  # fmt: skip


class ReplicaPhase(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    ASLEEP = "asleep"  # loaded but asleep: serves nothing, GPU memory freed (vLLM sleep level 1)
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """One pool of the server: its role, the replica profile, and replicas at time zero."""

    name: str
    role: PoolRole
    profile: ReplicaProfile
    initial_replicas: int = 1
    standby: int = 0  # replicas that start asleep (loaded, not serving)


@dataclass(frozen=True, slots=True)
class ServingConfig:
    """A disaggregated server: exactly one prefill and one decode pool."""

    prefill: PoolConfig
    decode: PoolConfig
    cold_start_s: float = 60.0  # lower end of 60-300 s in reference/serving.md §9 rule 5
    # Asleep -> ready: the weights come back from CPU memory (vLLM reports wake-ups 18-200x
    # faster than a reload; reference/install-operate.md). 5 s is an allowance, not a
    # measurement. A borrower that must leave the GPU first is the caller's `after_s`.
    wake_s: float = 5.0

    @classmethod
    def of(
        cls,
        profile: ReplicaProfile,
        prefill: int = 1,
        decode: int = 1,
        cold_start_s: float = 60.0,
    ) -> ServingConfig:
        """Pools named `prefill` and `decode` (the ServingJob's names), both of `profile`."""
        return cls(
            prefill=PoolConfig("prefill", PoolRole.PREFILL, profile, prefill),
            decode=PoolConfig("decode", PoolRole.DECODE, profile, decode),
            cold_start_s=cold_start_s,
        )

    def __post_init__(self) -> None:
        if self.prefill.role is not PoolRole.PREFILL or self.decode.role is not PoolRole.DECODE:
            raise ValueError("ServingConfig needs a prefill pool and a decode pool")
        if self.prefill.name == self.decode.name:
            raise ValueError("pool names must differ")
        if self.cold_start_s < 0 or self.wake_s < 0:
            raise ValueError("cold_start_s and wake_s must be >= 0")
        for pool in (self.prefill, self.decode):
            if pool.initial_replicas < 0 or pool.standby < 0:
                raise ValueError(f"pool {pool.name}: replica counts must be >= 0")


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """Latencies of one finished request. `tpot_s` is the mean gap between output tokens."""

    id: int
    arrival_s: float
    ttft_s: float
    tpot_s: float
    finish_s: float

    def meets(self, ttft_slo_s: float, itl_slo_s: float) -> bool:
        return self.ttft_s <= ttft_slo_s and self.tpot_s <= itl_slo_s


def slo_attainment(
    outcomes: Sequence[RequestOutcome], ttft_slo_s: float, itl_slo_s: float
) -> float:
    """Fraction of requests meeting both SLOs (DistServe's goodput criterion per request)."""
    if not outcomes:
        return 1.0
    return sum(o.meets(ttft_slo_s, itl_slo_s) for o in outcomes) / len(outcomes)


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative Prometheus-style histogram: per-bucket counts (not cumulative), sum, count."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]  # len(bounds) + 1, the last one is +Inf
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """Cumulative state of one pool at `time`, shaped like one vLLM engine's /metrics."""

    time: float
    role: PoolRole
    ready_replicas: int
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    prompt_tokens_total: int
    generation_tokens_total: int
    request_success_total: int
    ttft: Histogram
    itl: Histogram
    e2e: Histogram
    queue_time: Histogram
    prefill_time: Histogram


# ---------------------------------------------------------------------------------------------
# Internal mutable state
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Req:
    req: Request
    prefill_left: int
    first_token_s: float = math.nan
    scheduled_s: float = math.nan  # first prefill chunk scheduled (end of queue time)
    generated: int = 0  # tokens produced by decode (the first token comes from prefill)
    finish_s: float = math.nan

    @property
    def kv_need(self) -> int:
        return self.req.prompt_tokens + self.req.output_tokens


@dataclass(slots=True, eq=False)
class _Replica:
    rid: int
    phase: ReplicaPhase
    created_s: float
    profile: ReplicaProfile
    removed_s: float = math.nan
    awake_s: float = 0.0  # billed time of earlier awake spells (before the last sleep)
    sleep_s: float = math.nan  # when it fell asleep (NaN while awake)
    to_sleep: bool = False  # draining into `asleep`, not out of the pool
    ready_at: float = 0.0  # when the current start (cold or wake) completes
    busy: bool = False
    iter_start_s: float = 0.0
    local: list[_Req] = field(default_factory=list)  # prefill: assigned, not finished
    batch: list[tuple[_Req, int]] = field(default_factory=list)  # prefill: this iteration
    kv_used: int = 0  # decode: reserved KV tokens
    ctx_tokens: int = 0  # decode: KV tokens held by running sequences


class _Hist:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float, weight: int = 1) -> None:
        # Linear scan is fine: ~20 buckets, and most observations land in the first few.
        i = 0
        while i < len(self.bounds) and value > self.bounds[i]:
            i += 1
        self.counts[i] += weight
        self.total += value * weight

    def freeze(self) -> Histogram:
        return Histogram(self.bounds, tuple(self.counts), self.total)


class _Pool:
    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.profile = config.profile
        self.replicas: list[_Replica] = []
        self.queue: deque[_Req] = deque()
        # cumulative counters
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = 0
        self.ttft_hist = _Hist(TTFT_BUCKETS)
        self.queue_hist = _Hist(TTFT_BUCKETS)
        self.prefill_hist = _Hist(TTFT_BUCKETS)
        self.itl_hist = _Hist(ITL_BUCKETS)
        self.e2e_hist = _Hist(E2E_BUCKETS)
        # since the previous sample
        self.sample_start_s = 0.0
        self.arrivals = 0
        self.arrival_prompt_tokens = 0
        self.interval_prompt_tokens = 0
        self.interval_generation_tokens = 0
        self.ttft_values: list[float] = []
        self.itl_values: list[tuple[float, int]] = []

    def serving(self) -> list[_Replica]:
        return [r for r in self.replicas if r.phase in (ReplicaPhase.READY, ReplicaPhase.DRAINING)]


# Event kinds, ordered so simultaneous events resolve deterministically.
_READY, _PREFILL_END, _DECODE_END, _DECODE_ARRIVE = 0, 1, 2, 3


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of a sorted, non-empty sequence."""
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


def _quantiles(values: list[float]) -> LatencyQuantiles | None:
    if not values:
        return None
    ordered = sorted(values)
    return LatencyQuantiles(
        _quantile(ordered, 0.5), _quantile(ordered, 0.9), _quantile(ordered, 0.99)
    )


def _weighted_quantiles(values: list[tuple[float, int]]) -> LatencyQuantiles | None:
    if not values:
        return None
    values = sorted(values)
    total = sum(w for _, w in values)
    out: list[float] = []
    for q in (0.5, 0.9, 0.99):
        target = q * total
        acc = 0
        for v, w in values:
            acc += w
            if acc >= target:
                out.append(v)
                break
    return LatencyQuantiles(out[0], out[1], out[2])


class ServingModel:
    """The simulated server. Drive it with `advance_to`, `set_replicas` and `sample`."""

    def __init__(self, config: ServingConfig, requests: Sequence[Request]) -> None:
        self.config = config
        self._requests = sorted(requests, key=lambda r: (r.arrival_s, r.id))
        self._next_arrival = 0
        self._now = 0.0
        self._seq = 0
        self._events: list[tuple[float, int, int, int, _Req | None]] = []
        self._rid = 0
        self._pools: dict[str, _Pool] = {
            config.prefill.name: _Pool(config.prefill),
            config.decode.name: _Pool(config.decode),
        }
        self._prefill = self._pools[config.prefill.name]
        self._decode = self._pools[config.decode.name]
        self._by_rid: dict[int, tuple[_Pool, _Replica]] = {}
        self._finished: list[_Req] = []
        for pool in (self._prefill, self._decode):
            for _ in range(pool.config.initial_replicas):
                self._add_replica(pool, ready=True)
            self.add_asleep(pool.config.name, pool.config.standby)

    # --- public API ----------------------------------------------------------------------

    @property
    def now(self) -> float:
        return self._now

    @property
    def pool_names(self) -> tuple[str, str]:
        return (self.config.prefill.name, self.config.decode.name)

    def done(self) -> bool:
        """All requests of the trace have arrived and finished."""
        return self._next_arrival >= len(self._requests) and len(self._finished) == len(
            self._requests
        )

    @property
    def last_arrival_s(self) -> float:
        return self._requests[-1].arrival_s if self._requests else 0.0

    def advance_to(self, t: float) -> None:
        """Process every arrival and internal event up to and including time `t`."""
        if t < self._now:
            raise ValueError(f"cannot go back in time: {t} < {self._now}")
        requests = self._requests
        events = self._events
        while True:
            t_arr = (
                requests[self._next_arrival].arrival_s
                if self._next_arrival < len(requests)
                else math.inf
            )
            t_evt = events[0][0] if events else math.inf
            if min(t_arr, t_evt) > t:
                break
            if t_arr <= t_evt:
                self._now = t_arr
                self._arrive(requests[self._next_arrival])
                self._next_arrival += 1
            else:
                when, _, kind, rid, req = heapq.heappop(events)
                self._now = when
                self._dispatch(kind, rid, req)
        self._now = t

    def set_replicas(self, pool_name: str, replicas: int) -> None:
        """Make the pool converge to `replicas` (starting + ready) at the current time.

        New replicas get the pool's configured profile; any replica may be drained.
        """
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        pool = self._pools[pool_name]
        self._converge(pool, pool.replicas, replicas, pool.profile)

    def set_replica_profiles(self, pool_name: str, profiles: Sequence[ReplicaProfile]) -> None:
        """Make the pool converge to one replica (starting + ready) per entry of `profiles`.

        `profiles` is a multiset: for each distinct profile the pool adds or drains replicas of
        that profile only, so removing an H100 replica drains an H100 one even if an A100 one is
        idler. A draining replica of a wanted profile is un-drained before a new one is added.
        """
        pool = self._pools[pool_name]
        want = Counter(profiles)
        # Wanted profiles in the caller's order, then the ones to remove in replica order, so
        # that new replica ids follow a deterministic order.
        live = [r for r in pool.replicas if r.phase is not ReplicaPhase.GONE]
        for profile in dict.fromkeys([*profiles, *(r.profile for r in live)]):
            members = [r for r in live if r.profile == profile]
            self._converge(pool, members, want[profile], profile)

    def replica_profiles(self, pool_name: str) -> tuple[ReplicaProfile, ...]:
        """Profiles of the replicas counted toward the pool's size, in replica-id order."""
        pool = self._pools[pool_name]
        return tuple(
            r.profile
            for r in pool.replicas
            if r.phase in (ReplicaPhase.STARTING, ReplicaPhase.READY)
        )

    def replicas(self, pool_name: str) -> int:
        """Replicas counted toward the pool's size (starting + ready, not draining)."""
        pool = self._pools[pool_name]
        return sum(r.phase in (ReplicaPhase.STARTING, ReplicaPhase.READY) for r in pool.replicas)

    def ready_replicas(self, pool_name: str) -> int:
        return sum(r.phase is ReplicaPhase.READY for r in self._pools[pool_name].replicas)

    def asleep(self, pool_name: str) -> int:
        """Replicas asleep (standby): loaded, serving nothing."""
        return sum(r.phase is ReplicaPhase.ASLEEP for r in self._pools[pool_name].replicas)

    def backlog_tokens(self, pool_name: str) -> int:
        """Prompt tokens the pool has yet to prefill, queued or started (0 for a decode pool):
        what a router in front of the servers sees at once."""
        pool = self._pools[pool_name]
        if pool is not self._prefill:
            return 0
        started = sum(q.prefill_left for r in pool.replicas for q in r.local)
        return started + sum(q.prefill_left for q in pool.queue)

    def replica_phases(self, pool_name: str) -> tuple[tuple[int, ReplicaPhase], ...]:
        """(replica id, phase) of every replica ever in the pool, in id order."""
        return tuple((r.rid, r.phase) for r in self._pools[pool_name].replicas)

    def add_replicas(self, pool_name: str, count: int, after_s: float = 0.0) -> tuple[int, ...]:
        """Cold-start `count` new replicas (never a wake), whose start begins `after_s` from
        now (their GPU is still being freed); their replica ids. Billed from now."""
        pool = self._pools[pool_name]
        for _ in range(count):
            self._add_replica(pool, ready=False, after_s=after_s)
        return tuple(r.rid for r in pool.replicas[len(pool.replicas) - count :])

    def add_asleep(self, pool_name: str, count: int) -> None:
        """Add `count` replicas of the pool's profile that are already asleep (standbys that
        were loaded before the model saw them)."""
        pool = self._pools[pool_name]
        for _ in range(count):
            self._add_replica(pool, ready=True)
            self._fall_asleep(pool.replicas[-1])

    def wake(
        self,
        pool_name: str,
        count: int,
        order: Sequence[int] = (),
        after_s: Mapping[int, float] | None = None,
    ) -> int:
        """Wake up to `count` asleep replicas, those named in `order` (replica ids) first in
        that order, then the others lowest id first; they are ready after `wake_s`, plus
        `after_s[rid]` for a replica whose GPU must first be freed (its borrower stopping).
        Returns how many were woken."""
        pool = self._pools[pool_name]
        rank = {rid: i for i, rid in enumerate(order)}
        asleep = [r for r in pool.replicas if r.phase is ReplicaPhase.ASLEEP]
        asleep.sort(key=lambda r: (rank.get(r.rid, len(rank)), r.rid))
        for r in asleep[:count]:
            self._wake_replica(r, (after_s or {}).get(r.rid, 0.0))
        return min(count, len(asleep))

    def sleep(self, pool_name: str, count: int) -> int:
        """Put up to `count` serving replicas to sleep: starting ones are cancelled into
        `asleep` at once, ready ones drain first (least busy first). Returns how many."""
        pool = self._pools[pool_name]
        active = [
            r for r in pool.replicas if r.phase in (ReplicaPhase.STARTING, ReplicaPhase.READY)
        ]
        ordered = sorted(
            active, key=lambda r: (r.phase is ReplicaPhase.READY, self._load(pool, r), -r.rid)
        )
        for r in ordered[:count]:
            r.to_sleep = True
            if r.phase is ReplicaPhase.STARTING:
                self._fall_asleep(r)
            else:
                r.phase = ReplicaPhase.DRAINING
                if not r.busy and not r.local and not r.batch:
                    self._fall_asleep(r)
        return min(count, len(ordered))

    def gpu_seconds(self, pool_name: str | None = None) -> float:
        """GPU-seconds billed so far: every replica from its request until it is gone, except
        while it is asleep."""
        pools = self._pools.values() if pool_name is None else [self._pools[pool_name]]
        total = 0.0
        for pool in pools:
            for r in pool.replicas:
                total += self._awake_time(r) * r.profile.gpus
        return total

    def sample(self, pool_name: str) -> MetricsSample:
        """Pool metrics over the interval since the previous `sample` call, at the current time.

        Rates are averages over the interval; TTFT quantiles are over requests whose first token
        came in the interval; ITL quantiles are token-weighted over decode iterations (the
        `vllm:inter_token_latency_seconds` semantics). `prompt_token_rate` counts prompt tokens
        processed (prefill) or received as KV (decode); `request_rate` counts arrivals.
        """
        pool = self._pools[pool_name]
        dt = self._now - pool.sample_start_s
        serving = pool.serving()
        running, waiting, kv = self._gauges(pool)

        def rate(x: float) -> float:
            return x / dt if dt > 0 else 0.0

        sample = MetricsSample(
            timestamp=self._now,
            request_rate=rate(pool.arrivals),
            prompt_token_rate=rate(pool.interval_prompt_tokens),
            generation_token_rate=rate(pool.interval_generation_tokens),
            num_waiting=float(waiting),
            num_running=float(running),
            ttft=_quantiles(pool.ttft_values),
            itl=_weighted_quantiles(pool.itl_values),
            kv_cache_usage=kv,
            ready_replicas=len(serving),
        )
        pool.sample_start_s = self._now
        pool.arrivals = 0
        pool.arrival_prompt_tokens = 0
        pool.interval_prompt_tokens = 0
        pool.interval_generation_tokens = 0
        pool.ttft_values = []
        pool.itl_values = []
        return sample

    def snapshot(self, pool_name: str) -> PoolSnapshot:
        """Cumulative counters, gauges and histograms of one pool (exporter view)."""
        pool = self._pools[pool_name]
        running, waiting, kv = self._gauges(pool)
        return PoolSnapshot(
            time=self._now,
            role=pool.config.role,
            ready_replicas=len(pool.serving()),
            num_running=running,
            num_waiting=waiting,
            kv_cache_usage=kv,
            prompt_tokens_total=pool.prompt_tokens,
            generation_tokens_total=pool.generation_tokens,
            request_success_total=pool.success,
            ttft=pool.ttft_hist.freeze(),
            queue_time=pool.queue_hist.freeze(),
            prefill_time=pool.prefill_hist.freeze(),
            itl=pool.itl_hist.freeze(),
            e2e=pool.e2e_hist.freeze(),
        )

    def outcomes(self) -> tuple[RequestOutcome, ...]:
        """Finished requests, in request-id order."""
        out = []
        for r in sorted(self._finished, key=lambda r: r.req.id):
            ttft = r.first_token_s - r.req.arrival_s
            gaps = r.req.output_tokens - 1
            tpot = (r.finish_s - r.first_token_s) / gaps if gaps > 0 else 0.0
            out.append(RequestOutcome(r.req.id, r.req.arrival_s, ttft, tpot, r.finish_s))
        return tuple(out)

    def arrived_before(self, t: float) -> int:
        """Requests of the trace that arrive before `t`."""
        return bisect.bisect_left([r.arrival_s for r in self._requests], t)

    @property
    def num_requests(self) -> int:
        return len(self._requests)

    # --- internals -----------------------------------------------------------------------

    def _push(self, when: float, kind: int, rid: int, req: _Req | None = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, rid, req))

    def _converge(
        self, pool: _Pool, members: list[_Replica], replicas: int, profile: ReplicaProfile
    ) -> None:
        """Bring `members` (some of the pool's replicas) to `replicas` starting + ready.

        Missing replicas are un-drained or added with `profile`; surplus ones are cancelled
        while still starting, else drained.
        """
        active = [r for r in members if r.phase in (ReplicaPhase.STARTING, ReplicaPhase.READY)]
        delta = replicas - len(active)
        if delta > 0:
            # Un-drain warm replicas first: they are still loaded and cost nothing to restart.
            for r in members:
                if delta and r.phase is ReplicaPhase.DRAINING:
                    r.phase = ReplicaPhase.READY
                    r.to_sleep = False
                    delta -= 1
                    self._try_start(pool, r)
            # Then wake standbys (seconds), and only then cold-start new replicas (a minute+).
            for r in members:
                if delta and r.phase is ReplicaPhase.ASLEEP:
                    self._wake_replica(r)
                    delta -= 1
            for _ in range(delta):
                self._add_replica(pool, ready=False, profile=profile)
        elif delta < 0:
            remove = -delta
            # Cancel replicas that are still starting (newest first), then drain the least busy.
            for r in sorted(
                (r for r in active if r.phase is ReplicaPhase.STARTING), key=lambda r: -r.rid
            ):
                if remove == 0:
                    break
                self._retire(r)
                remove -= 1
            ready = sorted(
                (r for r in active if r.phase is ReplicaPhase.READY),
                key=lambda r: (self._load(pool, r), -r.rid),
            )
            for r in ready[:remove]:
                r.phase = ReplicaPhase.DRAINING
                if not r.busy and not r.local and not r.batch:
                    self._retire(r)

    def _add_replica(
        self,
        pool: _Pool,
        *,
        ready: bool,
        profile: ReplicaProfile | None = None,
        after_s: float = 0.0,
    ) -> None:
        self._rid += 1
        phase = ReplicaPhase.READY if ready else ReplicaPhase.STARTING
        r = _Replica(self._rid, phase, self._now, pool.profile if profile is None else profile)
        pool.replicas.append(r)
        self._by_rid[r.rid] = (pool, r)
        if not ready:
            r.ready_at = self._now + after_s + self.config.cold_start_s
            self._push(r.ready_at, _READY, r.rid)

    def _retire(self, r: _Replica) -> None:
        if r.to_sleep:
            self._fall_asleep(r)
            return
        r.phase = ReplicaPhase.GONE
        r.removed_s = self._now

    def _fall_asleep(self, r: _Replica) -> None:
        """Asleep: billed time so far is kept, the KV cache is gone, nothing is served."""
        r.awake_s = self._awake_time(r)
        r.phase = ReplicaPhase.ASLEEP
        r.sleep_s = self._now
        r.to_sleep = False
        r.kv_used = 0
        r.ctx_tokens = 0

    def _wake_replica(self, r: _Replica, after_s: float = 0.0) -> None:
        r.phase = ReplicaPhase.STARTING
        r.sleep_s = math.nan
        r.created_s = self._now  # a new awake spell starts (billed from the wake request)
        r.ready_at = self._now + after_s + self.config.wake_s
        self._push(r.ready_at, _READY, r.rid)

    def _awake_time(self, r: _Replica) -> float:
        """Billed seconds of a replica: earlier awake spells plus the current one."""
        if r.phase is ReplicaPhase.ASLEEP:
            return r.awake_s
        end = self._now if math.isnan(r.removed_s) else r.removed_s
        return r.awake_s + (end - r.created_s)

    def _load(self, pool: _Pool, r: _Replica) -> int:
        if pool is self._prefill:
            return sum(q.prefill_left for q in r.local)
        return len(r.local)

    def _gauges(self, pool: _Pool) -> tuple[int, int, float]:
        serving = pool.serving()
        running = sum(len(r.local) for r in serving)
        # Used over capacity summed over replicas: with mixed types a big replica weighs more.
        capacity = sum(r.profile.kv_cache_tokens for r in serving)
        if pool is self._prefill:
            used = sum(q.req.prompt_tokens for r in serving for q in r.local)
        else:
            used = sum(r.kv_used for r in serving)
        kv = used / capacity if capacity else 0.0
        return running, len(pool.queue), min(1.0, kv)

    def _arrive(self, request: Request) -> None:
        pool = self._prefill
        req = _Req(request, prefill_left=request.prompt_tokens)
        pool.queue.append(req)
        pool.arrivals += 1
        pool.arrival_prompt_tokens += request.prompt_tokens
        self._kick(pool)

    def _kick(self, pool: _Pool) -> None:
        """Let idle ready replicas (lowest id first) pick up queued work."""
        for r in pool.replicas:
            if not pool.queue:
                return
            if r.phase is ReplicaPhase.READY and not r.busy:
                self._try_start(pool, r)

    def _dispatch(self, kind: int, rid: int, req: _Req | None) -> None:
        if kind == _DECODE_ARRIVE:
            assert req is not None
            self._decode_arrive(req)
            return
        pool, r = self._by_rid[rid]
        if kind == _READY:
            # A start cancelled by a sleep and restarted by a wake leaves a stale event behind.
            if r.phase is ReplicaPhase.STARTING and self._now >= r.ready_at - 1e-9:
                r.phase = ReplicaPhase.READY
                self._try_start(pool, r)
        elif kind == _PREFILL_END:
            self._prefill_end(pool, r)
        elif kind == _DECODE_END:
            self._decode_end(pool, r)

    def _try_start(self, pool: _Pool, r: _Replica) -> None:
        if r.busy or r.phase not in (ReplicaPhase.READY, ReplicaPhase.DRAINING):
            return
        if pool is self._prefill:
            self._prefill_start(pool, r)
        else:
            self._decode_start(pool, r)
        if not r.busy and r.phase is ReplicaPhase.DRAINING:
            self._retire(r)

    # prefill ------------------------------------------------------------------------------

    def _prefill_start(self, pool: _Pool, r: _Replica) -> None:
        budget = r.profile.max_batched_tokens
        batch: list[tuple[_Req, int]] = []
        for q in r.local:  # continue requests already being chunk-prefilled here
            if budget <= 0:
                break
            chunk = min(q.prefill_left, budget)
            batch.append((q, chunk))
            budget -= chunk
        while budget > 0 and pool.queue and r.phase is ReplicaPhase.READY:
            q = pool.queue.popleft()
            q.scheduled_s = self._now
            r.local.append(q)
            chunk = min(q.prefill_left, budget)
            batch.append((q, chunk))
            budget -= chunk
        if not batch:
            return
        tokens = sum(c for _, c in batch)
        r.batch = batch
        r.busy = True
        r.iter_start_s = self._now
        self._push(self._now + r.profile.prefill_time(tokens), _PREFILL_END, r.rid)

    def _prefill_end(self, pool: _Pool, r: _Replica) -> None:
        now = self._now
        transfer = r.profile.kv_transfer_s_per_token
        for q, chunk in r.batch:
            q.prefill_left -= chunk
            pool.prompt_tokens += chunk
            pool.interval_prompt_tokens += chunk
            if q.prefill_left > 0:
                continue
            r.local.remove(q)
            q.first_token_s = now
            ttft = now - q.req.arrival_s
            pool.ttft_values.append(ttft)
            pool.ttft_hist.observe(ttft)
            queued = q.scheduled_s - q.req.arrival_s
            pool.queue_hist.observe(queued)
            pool.prefill_hist.observe(now - q.scheduled_s)
            pool.success += 1
            pool.generation_tokens += 1
            pool.interval_generation_tokens += 1
            if q.req.output_tokens > 1:
                self._push(now + transfer * q.req.prompt_tokens, _DECODE_ARRIVE, 0, q)
            else:
                self._finish(q)
        r.batch = []
        r.busy = False
        self._try_start(pool, r)
        self._kick(pool)

    # decode -------------------------------------------------------------------------------

    def _decode_arrive(self, q: _Req) -> None:
        pool = self._decode
        pool.queue.append(q)
        pool.arrivals += 1
        pool.arrival_prompt_tokens += q.req.prompt_tokens
        pool.prompt_tokens += q.req.prompt_tokens
        pool.interval_prompt_tokens += q.req.prompt_tokens
        self._kick(pool)

    def _decode_start(self, pool: _Pool, r: _Replica) -> None:
        profile = r.profile
        if r.phase is ReplicaPhase.READY:
            while pool.queue and len(r.local) < profile.max_num_seqs:
                q = pool.queue[0]
                # FCFS admission with a KV reservation for the whole sequence; a sequence
                # larger than the whole cache still runs alone rather than blocking forever.
                if r.kv_used + q.kv_need > profile.kv_cache_tokens and r.local:
                    break
                pool.queue.popleft()
                r.local.append(q)
                r.kv_used += q.kv_need
                r.ctx_tokens += q.req.prompt_tokens + 1
        if not r.local:
            return
        r.busy = True
        r.iter_start_s = self._now
        itl = profile.decode_itl(len(r.local), r.ctx_tokens)
        self._push(self._now + itl, _DECODE_END, r.rid)

    def _decode_end(self, pool: _Pool, r: _Replica) -> None:
        now = self._now
        itl = now - r.iter_start_s
        batch = len(r.local)
        pool.itl_values.append((itl, batch))
        pool.itl_hist.observe(itl, batch)
        pool.generation_tokens += batch
        pool.interval_generation_tokens += batch
        still: list[_Req] = []
        for q in r.local:
            q.generated += 1
            r.ctx_tokens += 1
            if q.generated >= q.req.output_tokens - 1:
                r.kv_used -= q.kv_need
                r.ctx_tokens -= q.req.prompt_tokens + 1 + q.generated
                pool.success += 1
                self._finish(q)
            else:
                still.append(q)
        r.local = still
        r.busy = False
        self._try_start(pool, r)
        self._kick(pool)

    def _finish(self, q: _Req) -> None:
        q.finish_s = self._now
        self._finished.append(q)
        self._decode.e2e_hist.observe(self._now - q.req.arrival_s)
