"""Node-side programs: the fake GPU device plugin and the power-cap node agent (`powercap`).

Agents run on the nodes, next to the kubelet; they depend only on `gpufleet.model`.
"""
