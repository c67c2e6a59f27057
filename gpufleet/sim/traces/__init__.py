"""Trace loaders: each turns a public trace into `TraceJob`s, stating its assumptions."""

from gpufleet.sim.traces.common import TraceJob, default_data_dir

__all__ = ["TraceJob", "default_data_dir"]
