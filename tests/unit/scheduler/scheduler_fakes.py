"""In-memory stand-ins for the API writers, to test the loop without an API server, and the
loop built over them with the real greedy core."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.model.gpus import load_catalog
from gpufleet.model.mig import MigLayout
from gpufleet.scheduler.binder import BindRequest, JobGone
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.loop import Scheduler
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.mig_request import config_name

GREEDY = Policy(solver=SolverSettings(engine=Engine.GREEDY))


class Clock:
    """A clock the test moves by hand (`clock.t += 5`)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeBinder:
    """Records writes; `fail` names pods whose binding the 'API server' refuses, `refuse`
    pods whose eviction it refuses (pod key -> error), `budgets` are its
    PodDisruptionBudgets."""

    def __init__(self) -> None:
        self.bound: dict[str, BindRequest] = {}
        self.deleted: list[tuple[str, str, bool]] = []
        self.evicted: list[tuple[str, str]] = []
        self.evict_messages: dict[str, str] = {}  # pod key -> the message of its eviction
        self.moved: list[tuple[str, dict[str, str]]] = []  # (pod key, marker) deleted to move
        self.move_messages: list[str] = []  # the message of each move's deletion
        self.marked: dict[str, str] = {}
        self.mark_calls = 0
        self.fail: set[str] = set()
        self.refuse: dict[str, str] = {}
        self.budgets: list[dict[str, Any]] = []
        self.hold = False
        self.held: list[tuple[list[BindRequest], Future[dict[str, str | None]]]] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []  # (pod key, merge patch)
        self.refuse_patch: dict[str, str] = {}  # pod key -> the API's refusal
        self.preempted: list[tuple[str, str]] = []  # (pod key, cause) deleted as a preemption
        self.templates: dict[str, dict[str, Any]] = {}  # job "namespace/name" -> pod template
        self.gone: set[str] = set()  # jobs "namespace/name" gone or being deleted
        # RuntimeClass name -> the object (None: reading any fails); the names read, in turn
        self.runtime_classes: dict[str, dict[str, Any]] | None = {}
        self.runtime_class_reads: list[str] = []
        # (job reference, count) recorded for the service tier's evictions, in turn
        self.tier_records: list[tuple[dict[str, str], int]] = []

    def bind_async(self, requests: Iterable[BindRequest]) -> Future[dict[str, str | None]]:
        """Done at once, unless `hold` is set: then the test completes `held` itself."""
        future: Future[dict[str, str | None]] = Future()
        if self.hold:
            self.held.append((list(requests), future))
        else:
            future.set_result(self.bind(requests))
        return future

    def release(self) -> None:
        """Let the held bindings through."""
        for requests, future in self.held:
            future.set_result(self.bind(requests))
        self.held.clear()

    def bind(self, requests: Iterable[BindRequest]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for r in requests:
            if r.pod_key in self.fail:
                out[r.pod_key] = "409 Conflict"
            else:
                self.bound[r.pod_key] = r
                out[r.pod_key] = None
        return out

    def delete_pods(
        self, keys: Iterable[str], reason: str, message: str, force: bool = False
    ) -> list[str]:
        self.deleted.extend((k, reason, force) for k in keys)
        return []

    def delete_marked(
        self, keys: Iterable[str], marker: Mapping[str, str], reason: str, message: str
    ) -> list[str]:
        self.moved.extend((k, dict(marker)) for k in keys)
        self.move_messages.append(message)
        return []

    def evict_pods(self, keys: Iterable[str], reason: str, message: str) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for k in keys:
            out[k] = self.refuse.get(k)
            if out[k] is None:
                self.evicted.append((k, reason))
                self.evict_messages[k] = message
        return out

    def patch_pod(self, key: str, body: Mapping[str, Any]) -> str | None:
        error = self.refuse_patch.get(key)
        if error is None:
            self.patched.append((key, dict(body)))
        return error

    def preempt_pods(self, keys: Iterable[str], reason: str, message: str) -> list[str]:
        self.preempted.extend((k, reason) for k in keys)
        return []

    def job_template(self, job: Mapping[str, str]) -> dict[str, Any] | None:
        key = f"{job['namespace']}/{job['name']}"
        if key in self.gone:
            raise JobGone(f"TrainingJob {key} is being deleted")
        return self.templates.get(key)

    def record_tier_eviction(self, job: Mapping[str, str], count: int) -> None:
        self.tier_records.append((dict(job), count))

    def runtime_class(self, name: str) -> dict[str, Any] | None:
        self.runtime_class_reads.append(name)
        if self.runtime_classes is None:
            raise RuntimeError("the API server is unreachable")
        return self.runtime_classes.get(name)

    def list_budgets(self, namespaces: Iterable[str]) -> list[dict[str, Any]]:
        wanted = set(namespaces)
        return [b for b in self.budgets if b["metadata"]["namespace"] in wanted]

    def mark_pending(self, messages: Mapping[str, str]) -> None:
        self.mark_calls += 1
        self.marked.update(messages)


class FakeMig:
    def __init__(self) -> None:
        self.requests: list[tuple[str, list[MigLayout | None]]] = []

    def request(self, node: str, layouts: Sequence[MigLayout | None], in_use: Any) -> str:
        self.requests.append((node, list(layouts)))
        return config_name(node, layouts)


def load(cache: SchedulerCache, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
    cache.replace_nodes(nodes)
    cache.replace_pods(pods)


def scheduler(
    cache: SchedulerCache, binder: FakeBinder, mig: FakeMig | None = None, **options: Any
) -> Scheduler:
    """The loop over `cache` and the fakes, deciding with the real core's greedy engine;
    `options` are `Scheduler`'s keyword arguments (clock, decide, may_act) and
    `SchedulerSettings` fields (delays, grace periods). Pending reasons are written at once
    unless a delay is given."""
    fields = {k: options.pop(k) for k in list(options) if k in SchedulerSettings.model_fields}
    settings = SchedulerSettings(**{"explain_delay_s": 0.0, "busy_explain_delay_s": 0.0, **fields})
    return Scheduler(
        cache,
        binder,  # type: ignore[arg-type]
        mig or FakeMig(),  # type: ignore[arg-type]
        load_catalog(),
        GREEDY,
        settings,
        **options,
    )
