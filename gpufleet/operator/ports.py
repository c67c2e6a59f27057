"""What the operator needs from the rest of the process, as protocols the composition root fills.

The operator shares only the model, the core and the contract with the scheduler and the
autoscaler: the TrainingJob handlers read pods through a `PodSource` (in `gpufleet operator`, the
scheduler's cache, which watches every pod anyway), and the ServingJob handlers run autoscaler
ticks through a `ServingAutoscaler` (the Prometheus-driven one of `gpufleet.autoscaler`) and see
their pods and Deployments through `Labelled` listings of watched objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gpufleet.model.contract.serving import MetricsHealth, ScaleChange, ServingJobRef
from gpufleet.model.servingjob import ServingJobSpec

__all__ = ["Labelled", "PodSource", "ReplicaWriter", "ServingAutoscaler"]

Obj = dict[str, Any]
# (namespace, job name) -> the objects of one kind labelled as that ServingJob's, as a watch
# shows them (its pods from the scheduler's cache, its Deployments from a watch of their own).
Labelled = Callable[[str, str], list[Obj]]


class PodSource(Protocol):
    """Pods as the API server shows them, kept current by a watch."""

    def owned_pods(self, namespace: str, owner: str) -> list[Obj]:
        """The pods labelled as children of the custom resource `owner` in `namespace`."""
        ...

    def on_pod_deleted(self, hook: Callable[[Obj], None]) -> None:
        """Call `hook(pod)` for every pod the watch reports deleted."""
        ...


class ReplicaWriter(Protocol):
    """Sets a pool's replica count (the scale of its Deployment)."""

    def scale(self, pool: str, replicas: int) -> None: ...


class ServingAutoscaler(Protocol):
    """Runs one ServingJob's autoscaler, one tick per pass when its interval has passed."""

    def tick(
        self,
        job: ServingJobRef,
        spec: ServingJobSpec,
        pools: Mapping[str, tuple[int, int]],
        gpu_types: Callable[[], Mapping[str, tuple[str | None, ...]]],
        writer: ReplicaWriter,
    ) -> tuple[list[ScaleChange], MetricsHealth | None]:
        """Scale the pools whose Deployments exist (`pools`: name -> (replicas the pass wants,
        ready replicas)) when a tick is due, writing through `writer`. Returns the changes made
        and the health of the metrics (None when autoscaling is off). `gpu_types()` lists the
        GPU types each pool's running replicas landed on; it is called only when needed."""
        ...

    def peek(self, job: ServingJobRef, spec: ServingJobSpec) -> tuple[bool, MetricsHealth | None]:
        """Whether `tick` would now do more than report the health (a tick due, the job's
        autoscaler to start or to drop), and that health; reads no metrics and writes
        nothing (a pass's check, before it decides to act)."""
        ...

    def forget(self, uid: str) -> None:
        """Drop what is kept for job `uid` (deleted)."""
        ...

    def close(self) -> None: ...
