"""Names the components agree on: scheduler name, labels, annotations, condition types.

The values written under these names are encoded and decoded by the sibling modules of this
package (`wishes`, `assignment`, `reasons`); no component formats or parses them by hand.

Pods carry their gang's requirements as annotations so the scheduler needs nothing but pods and
nodes to decide (any workload can use it, not only TrainingJobs), and every GPU or MIG instance
the scheduler hands out is written onto the pod in the same request that binds it, so a restarted
scheduler reads its past decisions back from the cluster.
"""

from __future__ import annotations

from typing import Final

SCHEDULER_NAME: Final = "gpufleet"

# Gang membership and requirements, written by the operator on every pod of a gang.
GANG_LABEL: Final = "gpufleet.io/gang"  # gang name, unique within the namespace
GANG_SIZE: Final = "gpufleet.io/gang-size"  # pods the gang needs before it may be bound
GPU_TYPES: Final = "gpufleet.io/gpu-types"  # "H100-80GB=1.0,A100-80GB=0.55" (throughput optional)
PRIORITY: Final = "gpufleet.io/priority"
PREEMPTIBLE: Final = "gpufleet.io/preemptible"
TOPOLOGY: Final = "gpufleet.io/topology"  # wishes.Topology value: any, same-node, nvlink-domain
ENERGY: Final = "gpufleet.io/energy"  # wishes.EnergyPreference value
# Largest slowdown in percent the job accepts from a power cap (TrainingJob maxSlowdownPercent).
MAX_SLOWDOWN: Final = "gpufleet.io/max-slowdown-percent"
# How much slower in percent the gang trains spread over more nodes than it needs (TrainingJob
# spreadSlowdownPercent), for the scheduler's comparison of placements.
SPREAD_SLOWDOWN: Final = "gpufleet.io/spread-slowdown-percent"
QUEUE: Final = "gpufleet.io/queue"  # the GPUQueue the gang is charged to (the job's spec.queue)
RANK_LABEL: Final = "gpufleet.io/rank"  # replica index; placements are matched to pods by rank
# How the gang saves progress (`moves` module): "interval=600" or "signal=30" (grace seconds).
CHECKPOINT: Final = "gpufleet.io/checkpoint"
# When the gang was last moved (RFC 3339 times, comma-separated, oldest first), written by the
# operator from the job's status so the per-hour move limit outlives a scheduler restart.
MOVE_TIMES: Final = "gpufleet.io/move-times"
# GPU-seconds of service the job's ended runs received (`service` module), written by the
# operator from the job's status so the service tier outlives restarts and preemptions.
ATTAINED: Final = "gpufleet.io/attained-gpu-seconds"
# How many of the job's ended runs the service tier ended (the tier's limit on re-evictions).
TIER_EVICTIONS: Final = "gpufleet.io/tier-evictions"
# When the gang's job was submitted (RFC 3339; a TrainingJob's creationTimestamp), written by the
# operator on every TrainingJob worker pod it creates, so a gang whose pods are recreated after
# an eviction keeps its place in line with the requeue timestamp `creation` (`submitted` module;
# not on a ServingJob's replicas, which it says why). Any controller may write it on its pods;
# without it a gang is in line since its earliest pod's creation.
SUBMITTED_AT: Final = "gpufleet.io/submitted-at"

# Elastic jobs' scaling (`scaling` module). The job (or its owner) reports its throughput on
# the TrainingJob as "replicas=throughput" pairs, in its own unit: "4=1520.5"; the operator
# writes the curve it refines from those reports on every worker pod: "1,1.9,2.6,3.1".
THROUGHPUT: Final = "gpufleet.io/throughput"
SCALING: Final = "gpufleet.io/scaling"

# What the scheduler decided, written through the Binding's annotations.
ASSIGNED_GPUS: Final = "gpufleet.io/gpus"  # "0,1,2,3": whole-GPU indices on the node
ASSIGNED_MIG: Final = "gpufleet.io/mig-instance"  # "3g.40gb@4": profile and start slice
ASSIGNED_TYPE: Final = "gpufleet.io/gpu-type"
POWER_CAP: Final = "gpufleet.io/power-cap-watts"  # applied by a node agent

# Energy on nodes (`power` module): the caps a node agent applied, and idle-node power-down.
APPLIED_POWER_CAPS: Final = "gpufleet.io/power-caps-applied"  # JSON {"0": 280}: GPU -> watts
POWER_STATE_LABEL: Final = "gpufleet.io/power-state"  # power.PowerState value: off, waking
POWER_STATE_SINCE: Final = "gpufleet.io/power-state-since"  # RFC 3339 time the state began

# MIG: the NVIDIA MIG-manager label contract, plus the exact layout gpufleet asked for.
MIG_CONFIG_LABEL: Final = "nvidia.com/mig.config"
MIG_STATE_LABEL: Final = "nvidia.com/mig.config.state"  # assignment.MigState value
MIG_LAYOUT_ANNOTATION: Final = "gpufleet.io/mig-layout"  # JSON {"config": .., "gpus": {..}}
MIG_CONFIGMAP_NAMESPACE: Final = "gpufleet-system"
MIG_CONFIGMAP_NAME: Final = "default-mig-parted-config"
MIG_CONFIGMAP_KEY: Final = "config.yaml"

# GPU Feature Discovery labels a GPU node carries.
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
NVLINK_DOMAIN_LABEL: Final = "gpufleet.io/nvlink-domain-size"

WHOLE_GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"

# Pod condition the scheduler sets while a gang waits; its message is the core's reason.
POD_SCHEDULED: Final = "PodScheduled"
UNSCHEDULABLE: Final = "Unschedulable"
# Pod condition the scheduler sets on preemption victims before deleting them.
DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTED_REASON: Final = "PreemptionByGpufleet"
# A preemption for a gang of the victim's own queue and priority that has received less service
# (the core's service tier); `reasons.is_preemption` knows both.
SERVICE_PREEMPTED_REASON: Final = "ServicePreemptionByGpufleet"
# Why gpufleet evicted or deleted a pod, on the pod itself: the Eviction API rewrites the
# DisruptionTarget condition's reason to its own, so the condition alone cannot tell.
DISRUPTED_BY: Final = "gpufleet.io/disrupted-by"
# Pods the scheduler deletes to restart their gang on a faster placement (`moves` module): the
# disruption reason, and when the move began (which the operator counts once).
MOVED_REASON: Final = "MoveByGpufleet"
MOVED_AT: Final = "gpufleet.io/moved-at"

# Which custom resource (and pool) a child belongs to; the metrics of a pool are selected by
# the same labels.
TRAININGJOB_LABEL: Final = "gpufleet.io/trainingjob"
SERVINGJOB_LABEL: Final = "gpufleet.io/servingjob"
POOL_LABEL: Final = "gpufleet.io/pool"
# Standby serving replicas (`standby` module), written by the operator on a pool's pods.
STANDBY: Final = "gpufleet.io/standby"  # "asleep": the server is to sleep (vLLM sleep level 1)
WOKEN_AT: Final = "gpufleet.io/woken-at"  # RFC 3339 time the operator last woke the replica
# Pod condition and readiness gate of a pool with standbys: False while the replica is asleep
# or waking, so the pool's Service (its EndpointSlices) does not route to it.
AWAKE_CONDITION: Final = "gpufleet.io/awake"
# Kubernetes' hint to a ReplicaSet's scale-down: pods of lower cost are removed first.
POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
# Lending an asleep standby's GPUs (`lending` module). On the borrowing pod, written through
# its Binding: the standby pods (namespace/name, comma-separated) whose GPUs it runs on. On the
# standby, by the scheduler before it binds a borrower: the borrowing gang; by the operator when
# it wants the standby back: the RFC 3339 time it asked.
BORROWS: Final = "gpufleet.io/borrows"
LENT_TO: Final = "gpufleet.io/lent-to"
RECALL: Final = "gpufleet.io/recall"
