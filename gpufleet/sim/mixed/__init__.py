"""Mixed simulator: Philly training and Azure LLM serving on one fleet, through the same core.

- `workload`: the seeded training jobs and serving traffic;
- `engine`: the tick loop (`MixedSimulation`) deciding with `gpufleet.core.lending`;
- `variants`: gpufleet and the baselines (static partition, HPA on free GPUs, no borrowing).
"""
