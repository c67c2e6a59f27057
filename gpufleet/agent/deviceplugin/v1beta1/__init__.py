"""The kubelet's device-plugin API v1beta1: the vendored proto and the stubs generated from it."""
