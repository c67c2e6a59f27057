"""The power-cap node agent (`gpufleet node-agent`): applies the power caps the scheduler wrote
on the pods of its node to their GPUs, through NVML or, on fake GPUs, by recording them.
"""
