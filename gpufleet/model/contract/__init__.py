"""The contract between gpufleet's components: every label, annotation and condition they
exchange, with one typed encoder and one decoder each.

- `names`: the label, annotation, condition and resource names;
- `wishes`: a gang's wishes on its pods (size, priority, preemptible, topology, energy, GPU
  types) and the enums the core's `Gang` uses for them;
- `assignment`: what the scheduler hands out (GPUs, MIG instances `profile@start`, GPU type,
  power cap) and the MIG layouts it records on nodes;
- `power`: node power: the power caps a node agent applied, and the idle-node power-down
  marks (`off`, `waking`) the scheduler puts on nodes with their cordon;
- `service`: the GPU-seconds of service a job received (its ended runs', which the operator
  writes on its pods, and its current run's, from its running pods), for the service tier;
- `timestamps`: times as the API server writes them (status fields, stamped annotations);
- `reasons`: why a gang waits (the core's `PendingReason` and the scheduler's own codes) and why
  a pod was disrupted.

The operator, the scheduler, the simulator and the sandbox import these modules instead of
spelling or parsing the strings themselves; the round trips are property-tested.
"""
