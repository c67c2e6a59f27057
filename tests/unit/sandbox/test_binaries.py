"""Locating and building the sandbox binaries."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest

from gpufleet.sandbox import binaries


def test_cache_dir_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path / "c"))
    assert binaries.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("GPUFLEET_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert binaries.cache_dir() == tmp_path / "xdg" / "gpufleet"


def test_binaries_are_keyed_by_version(tmp_path: Path) -> None:
    found = binaries.Binaries.in_cache(tmp_path)
    assert found.kube_apiserver == tmp_path / f"kubernetes-v{binaries.K8S_VERSION}/kube-apiserver"
    assert found.etcd.parent.name == f"etcd-v{binaries.ETCD_VERSION}"
    assert found.helm == tmp_path / f"helm-v{binaries.HELM_VERSION}/helm"
    assert len(found.missing()) == 7  # the kubelet is built only when asked for
    assert found.missing(("helm",)) == [found.helm]
    assert found.missing(binaries.ON_REQUEST) == [found.kubelet]
    assert found.kubelet == tmp_path / f"kubelet-v{binaries.K8S_VERSION}/kubelet"


def test_only_missing_components_are_built(tmp_path: Path) -> None:
    found = binaries.Binaries.in_cache(tmp_path)
    for path in found.missing(binaries.CONTROL_PLANE):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    assert found.missing_components(binaries.CONTROL_PLANE) == ()
    assert found.missing_components(binaries.EVERY_COMPONENT) == ("helm",)
    with pytest.raises(ValueError, match="unknown component 'kind'"):
        found.missing(("kind",))


def test_missing_go_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(binaries.BuildError, match="`go` is not on PATH"):
        binaries.ensure_binaries(progress=lambda _: None)


def test_failed_build_reports_the_log_tail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A version that does not exist makes the real build script fail at its first `go` step.
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    monkeypatch.setattr(binaries, "ETCD_VERSION", "0.0.0-missing")
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(binaries.BuildError, match="building the sandbox binaries failed"):
        binaries.ensure_binaries(progress=lambda _: None)


def test_a_second_build_waits_for_the_first_and_builds_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Another process holds the cache's lock while it builds helm. This one waits, then finds
    # helm built and returns it: without `go` on PATH, starting a build of its own would fail.
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    root = tmp_path / "bin"
    root.mkdir()
    said: list[str] = []
    found: list[binaries.Binaries] = []
    errors: list[BaseException] = []

    def second() -> None:
        try:
            found.append(binaries.ensure_binaries(said.append, ("helm",)))
        except BaseException as exc:
            errors.append(exc)

    with (root / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and said == [
            f"another process is building into {root}; waiting for it"
        ]
        helm = binaries.Binaries.in_cache(root).helm
        helm.parent.mkdir(parents=True)
        helm.touch()
    waiter.join(10)
    assert errors == [] and [b.helm for b in found] == [helm]
