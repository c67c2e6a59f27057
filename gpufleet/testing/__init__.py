"""Helpers for gpufleet's tests and benchmarks, never imported by gpufleet itself (an
import-linter contract forbids it): a real `gpufleet operator` child process, API helpers for
tests, and the cluster invariants every scheduling test checks."""
