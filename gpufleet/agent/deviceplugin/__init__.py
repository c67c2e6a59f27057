"""A fake NVIDIA GPU device plugin speaking the kubelet's device-plugin API (v1beta1) over gRPC."""
