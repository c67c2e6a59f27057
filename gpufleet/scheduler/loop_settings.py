"""Settings of the live scheduler: the periods and limits of its loop.

Nested as the `scheduler` group of gpufleet's settings root (`gpufleet.settings`); the defaults
are the live scheduler's. Unit tests of the loop write reasons at once (`explain_delay_s=0`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.model.contract import names

__all__ = ["SchedulerSettings"]


class SchedulerSettings(BaseModel):
    """The scheduling loop's periods and limits. Immutable; validated on construction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        names.SCHEDULER_NAME,
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        description="schedulerName of the pods the operator creates and the scheduler places "
        "(a DNS subdomain name).",
    )
    node_failure_grace_s: float = Field(
        30.0, ge=0, description="Seconds a node may be NotReady before its gangs restart."
    )
    unhealthy_zone_threshold: float = Field(
        0.55,
        gt=0,
        le=1,
        description="Fraction of a zone's nodes (topology.kubernetes.io/zone; unlabelled nodes "
        "form one zone) NotReady, more than two, at which gang restarts off failed nodes slow "
        "down there (Kubernetes' --unhealthy-zone-threshold). With every node of every zone "
        "NotReady (a control-plane outage, most likely) no gang restarts until one is Ready.",
    )
    partial_disruption_heal_interval_s: float = Field(
        100.0,
        gt=0,
        description="In a zone past unhealthy_zone_threshold with more than large_zone_nodes "
        "nodes, the gangs of one failed node restart per this many seconds (Kubernetes' "
        "secondary eviction rate, 0.01 nodes a second).",
    )
    large_zone_nodes: int = Field(
        50,
        ge=0,
        description="A zone past unhealthy_zone_threshold with at most this many nodes restarts "
        "no gangs (Kubernetes' --large-cluster-size-threshold).",
    )
    partial_grace_s: float = Field(
        30.0,
        ge=0,
        description="Seconds a partly bound gang may wait for its rest before it restarts whole.",
    )
    budget_retry_s: float = Field(
        10.0,
        ge=0,
        description="Seconds victims a PodDisruptionBudget protected are not offered as "
        "preemptible.",
    )
    explain_delay_s: float = Field(
        1.0, ge=0, description="Seconds a pending reason must hold before it is written to pods."
    )
    busy_explain_delay_s: float = Field(
        5.0, ge=0, description="Extra seconds while bindings are in flight."
    )
    move_restart_s: float = Field(
        60.0,
        ge=0,
        description="Seconds a moved gang takes to stop, be placed again and resume, beside its "
        "checkpoint grace period: the price of a move in the core's move rule.",
    )
    move_reserve_s: float = Field(
        120.0,
        gt=0,
        description="Seconds the new placement of a moved gang stays reserved for it after its "
        "old pods are gone (for the operator to recreate them); past it the gang is placed "
        "like any other.",
    )
    move_unfit_recheck_s: float = Field(
        300.0,
        gt=0,
        description="Seconds a gang whose move was not started, because its recreated pods "
        "could not run on the new nodes (its job's template and RuntimeClass, read at the "
        "move), is moved only to nodes those pods could use; then they are read again at its "
        "next move. Sooner when its pods change.",
    )
    cap_identical_above: int = Field(
        64,
        ge=1,
        description="Past this many offered gangs, offer only as many identical gangs as fit.",
    )
    resync_s: float = Field(
        2.0, gt=0, description="Longest time between two cycles when nothing changes."
    )
    debounce_s: float = Field(
        0.02, ge=0, description="Wait after a change so one cycle sees a burst of events."
    )
    bind_connections: int = Field(
        32, ge=1, description="Connections the binder keeps to the API server."
    )
    estimate_configmap: str = Field(
        "gpufleet-workload-estimate",
        pattern=r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)?$",
        description="ConfigMap, in the Lease's namespace, where the scheduler keeps the request "
        "shapes it has seen (its workload estimate for FGD fragmentation); the next process "
        "to lead starts from them. Empty: not kept (each start begins with no estimate).",
    )
    estimate_save_s: float = Field(
        60.0,
        gt=0,
        description="Longest time between two writes of that ConfigMap while the estimate changes.",
    )
    mig_config_map_namespace: str = Field(
        names.MIG_CONFIGMAP_NAMESPACE,
        min_length=1,
        description="Namespace of the MIG manager's ConfigMap default-mig-parted-config, which "
        "the scheduler reads and extends with the layouts it asks nodes for (the GPU "
        "Operator's namespace, e.g. gpu-operator).",
    )
