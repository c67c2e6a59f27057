"""Node-side programs: the fake GPU device plugin (and later the power-cap node agent).

Agents run on the nodes, next to the kubelet; they depend only on `gpufleet.model`.
"""
