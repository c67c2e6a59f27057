"""The composition root: `gpufleet operator` reads the settings once and wires the components.

`command` parses the flags and loads `gpufleet.settings`; `process` builds the operator, the
scheduler and the autoscaler from them and runs them in one process. Nothing below this package
reads the environment: every component gets its values from here.
"""
