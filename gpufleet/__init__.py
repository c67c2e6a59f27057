"""gpufleet: a Kubernetes-native scheduler and autoscaler for shared GPU clusters."""
