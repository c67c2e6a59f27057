"""Where the sandbox's binaries live, and building them when they are missing.

Binaries are built from Go modules by `build-binaries.sh` into a cache outside the repository,
one folder per component and version, so every checkout and CI run on a machine shares them.
The components are the control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok), which `sandbox up` needs, and helm, which the chart's tests drive;
`gpufleet sandbox build` builds them all. The kubelet is built only when asked for (by the
benchmark that runs a real kubelet with the fake device plugin).
"""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

K8S_VERSION = "1.36.3"
ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
HELM_VERSION = "4.3.2"

# Build units of build-binaries.sh.
CONTROL_PLANE = ("etcd", "kwok", "kubernetes")
EVERY_COMPONENT = (*CONTROL_PLANE, "helm")
ON_REQUEST = ("kubelet",)


def cache_dir() -> Path:
    """The build cache: $GPUFLEET_CACHE, else $XDG_CACHE_HOME/gpufleet, else ~/.cache/gpufleet."""
    if env := os.environ.get("GPUFLEET_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpufleet"


@dataclass(frozen=True)
class Binaries:
    """Paths of every binary the sandbox and its tests run, plus kwok's stage definitions."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path
    helm: Path
    kubelet: Path

    @classmethod
    def in_cache(cls, root: Path) -> Binaries:
        k8s = root / f"kubernetes-v{K8S_VERSION}"
        kwok = root / f"kwok-v{KWOK_VERSION}"
        return cls(
            etcd=root / f"etcd-v{ETCD_VERSION}" / "etcd",
            kube_apiserver=k8s / "kube-apiserver",
            kube_controller_manager=k8s / "kube-controller-manager",
            kube_scheduler=k8s / "kube-scheduler",
            kwok=kwok / "kwok",
            kwok_stages=kwok / "kustomize" / "stage",
            helm=root / f"helm-v{HELM_VERSION}" / "helm",
            kubelet=root / f"kubelet-v{K8S_VERSION}" / "kubelet",
        )

    def _paths(self, component: str) -> tuple[Path, ...]:
        match component:
            case "etcd":
                return (self.etcd,)
            case "kwok":
                return (self.kwok, self.kwok_stages)
            case "kubernetes":
                return (self.kube_apiserver, self.kube_controller_manager, self.kube_scheduler)
            case "helm":
                return (self.helm,)
            case "kubelet":
                return (self.kubelet,)
        known = ", ".join((*EVERY_COMPONENT, *ON_REQUEST))
        raise ValueError(f"unknown component {component!r}; known: {known}")

    def missing(self, components: tuple[str, ...] = EVERY_COMPONENT) -> list[Path]:
        """Binaries of `components` not yet built."""
        return [p for c in components for p in self._paths(c) if not p.exists()]

    def missing_components(self, components: tuple[str, ...]) -> tuple[str, ...]:
        """The components (of `components`) with a binary not yet built."""
        return tuple(c for c in components if any(not p.exists() for p in self._paths(c)))


class BuildError(RuntimeError):
    """The Go build of the control plane failed; the message says what to check."""


def ensure_binaries(
    progress: Callable[[str], None] = print, components: tuple[str, ...] = CONTROL_PLANE
) -> Binaries:
    """Build whatever of `components` is missing (minutes when cold, nothing when cached) and
    return the paths."""
    root = cache_dir() / "bin"
    binaries = Binaries.in_cache(root)
    if not binaries.missing_components(components):
        return binaries
    root.mkdir(parents=True, exist_ok=True)
    # One build at a time per cache: two test runs that each found helm missing built it into
    # the same temporary folder, and the second `mv` failed ("cannot stat helm-v4.3.2.tmp").
    with (root / ".build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"another process is building into {root}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(binaries, root, components, progress)


def _build(
    binaries: Binaries, root: Path, components: tuple[str, ...], progress: Callable[[str], None]
) -> Binaries:
    """Build what of `components` is still missing (the caller holds the cache's lock)."""
    todo = binaries.missing_components(components)
    if not todo:
        return binaries
    if shutil.which("go") is None:
        raise BuildError(
            "the sandbox builds etcd, kube-apiserver, kwok and helm from Go modules, but `go` is "
            "not on PATH; install Go >= 1.26 and retry"
        )
    script = resources.files("gpufleet.sandbox").joinpath("build-binaries.sh")
    env = {
        **os.environ,
        "GPUFLEET_K8S_VERSION": K8S_VERSION,
        "GPUFLEET_ETCD_VERSION": ETCD_VERSION,
        "GPUFLEET_KWOK_VERSION": KWOK_VERSION,
        "GPUFLEET_HELM_VERSION": HELM_VERSION,
    }
    log = root / f"build-{'-'.join(todo)}.log"
    progress(f"building {', '.join(todo)} into {root} (cold build: 5-30 min; log: {log})")
    with (
        log.open("w") as out,
        subprocess.Popen(
            ["bash", str(script), str(root), *todo],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        ) as proc,
    ):
        assert proc.stdout is not None
        started = last_news = time.monotonic()
        while True:
            # Compiling kube-apiserver prints nothing for minutes: say every 30 s that it goes on.
            ready, _, _ = select.select([proc.stdout], [], [], 5.0)
            now = time.monotonic()
            if not ready:
                if now - last_news >= 30:
                    progress(f"still building ({now - started:.0f}s so far)")
                    last_news = now
                continue
            line = proc.stdout.readline()
            if not line:
                break
            out.write(line)
            if line.startswith("[build]"):
                progress(line.removeprefix("[build] ").rstrip())
                last_news = now
        code = proc.wait()
    if code != 0 or binaries.missing(components):
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BuildError(f"building the sandbox binaries failed (exit {code}); see {log}:\n{tail}")
    return binaries
