"""The live autoscaler: reads pool metrics from Prometheus and actuates the pure policy's decisions.

The policy itself is pure and lives in `gpufleet.core.autoscaling`; this package holds the
adapters and the loop around it (`prometheus`: the metrics reader).
"""
