"""The wheel, and the container image's recipe (there is no Docker engine here to build it).

Aspects under test:
- the wheel is built with the Dockerfile's own command, from exactly the files the Dockerfile
  and .dockerignore let in;
- installed with its declared dependencies into a clean virtual environment (no system
  site-packages), it runs `gpufleet --version` and `gpufleet operator --help` as UID 65532 from
  `/` with an unwritable HOME, as the image runs them (non-root, read-only root filesystem);
- the wheel carries its package data: the GPU catalogue, the MIG layouts, the sandbox fleet and
  build script, and it generates the same CRDs as the committed ones;
- the Dockerfile is multi-stage, runs as a numeric non-root user, has `gpufleet` as entrypoint
  and carries the OCI labels.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
NONROOT = 65532
# A Python outside /root (which other users cannot enter), the same 3.11 as the image's base.
SYSTEM_PYTHON = "/usr/bin/python3"


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without PYTHONPATH (which would import the checkout, not the wheel)."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env.update(extra)
    return env


def _build_context(dest: Path) -> Path:
    """The files `docker build` would send: .dockerignore allows these and nothing else."""
    allowed = [
        line[1:].rstrip("/")
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    assert allowed == ["pyproject.toml", "README.md", "gpufleet"]
    dest.mkdir()
    for name in allowed:
        src = REPO_ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed() -> Iterator[Path]:
    """A virtual environment with the wheel and its dependencies; yields its bin directory."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-wheel-"))
    try:
        root.chmod(0o755)  # the non-root user must reach the environment
        context = _build_context(root / "src")
        wheels = root / "wheels"
        wheel_cmd = re.search(r"python -m pip wheel [^\n\\&]*", DOCKERFILE)
        assert wheel_cmd is not None, "the Dockerfile builds no wheel"
        argv = wheel_cmd.group(0).split()
        assert argv[-3:] == ["--wheel-dir", "/wheels", "."]
        argv = [sys.executable, *argv[1:-2], str(wheels), "."]
        subprocess.run(argv, cwd=context, env=_clean_env(), check=True, capture_output=True)
        [wheel] = wheels.glob("gpufleet-*.whl")
        # uv installs the same wheel and dependency set as the image's pip, from its shared
        # cache in seconds instead of minutes.
        venv = root / "venv"
        uv = [sys.executable, "-m", "uv"]
        env = _clean_env()
        subprocess.run(
            [*uv, "venv", "-q", "--python", SYSTEM_PYTHON, str(venv)], env=env, check=True
        )
        python = str(venv / "bin" / "python")
        subprocess.run(
            [*uv, "pip", "install", "-q", "--python", python, str(wheel)], env=env, check=True
        )
        subprocess.run([*uv, "pip", "check", "--python", python], env=env, check=True)
        yield venv / "bin"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _as_nonroot(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run like the image does: UID/GID 65532, working directory `/`, HOME not writable."""
    return subprocess.run(
        ["setpriv", f"--reuid={NONROOT}", f"--regid={NONROOT}", "--clear-groups", *argv],
        cwd="/",
        env=_clean_env(HOME="/nonexistent", PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_version_and_operator_help_run_from_the_wheel_as_nonroot(installed: Path) -> None:
    version = _as_nonroot(str(installed / "gpufleet"), "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "gpufleet 0.1.0"
    helped = _as_nonroot(str(installed / "gpufleet"), "operator", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--kubeconfig" in helped.stdout
    assert helped.stderr == ""


def test_the_wheel_carries_its_package_data(installed: Path) -> None:
    probe = """
import json, gpufleet
from gpufleet.model.gpus import load_catalog
from gpufleet.model.crdgen import crd_documents, render_yaml
from gpufleet.model.migparted import load_default_configs
from gpufleet.agent.deviceplugin.v1beta1 import api_pb2
from gpufleet.sandbox.control_plane import default_fleet_path
from importlib import resources
print(json.dumps({
    "module": gpufleet.__file__,
    "types": len(list(load_catalog())),
    "layouts": len(load_default_configs()["mig-configs"]),
    "fleet": default_fleet_path().is_file(),
    "script": resources.files("gpufleet.sandbox").joinpath("build-binaries.sh").is_file(),
    "proto": resources.files("gpufleet.agent.deviceplugin.v1beta1").joinpath("api.proto").is_file(),
    "services": sorted(api_pb2.DESCRIPTOR.services_by_name),
    "crds": {d["metadata"]["name"]: render_yaml(d) for d in crd_documents()},
}))
"""
    result = _as_nonroot(str(installed / "python"), "-c", probe)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["module"].startswith(str(installed.parent)), "imported the checkout"
    assert found["types"] >= 8
    assert found["layouts"] >= 4
    assert found["fleet"] and found["script"]
    assert found["proto"] and found["services"] == ["DevicePlugin", "Registration"]
    committed = {
        p.name.removesuffix(".yaml"): p.read_text() for p in (REPO_ROOT / "crds").glob("*.yaml")
    }
    assert found["crds"] == committed


def test_dockerfile_runs_gpufleet_as_a_numeric_nonroot_user() -> None:
    stages = re.findall(r"^FROM (\S+)", DOCKERFILE, flags=re.M)
    assert len(stages) == 2 and stages[0] == stages[1] == "${PYTHON_IMAGE}"
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim", DOCKERFILE, flags=re.M)
    assert "COPY --from=build /opt/gpufleet /opt/gpufleet" in DOCKERFILE
    [user] = re.findall(r"^USER (\S+)", DOCKERFILE, flags=re.M)
    uid, gid = (int(x) for x in user.split(":"))
    assert uid == gid == NONROOT
    assert re.search(r'^ENTRYPOINT \["gpufleet"\]$', DOCKERFILE, flags=re.M)
    labels = set(re.findall(r"org\.opencontainers\.image\.([a-z.]+)=", DOCKERFILE))
    assert {"title", "description", "version", "revision", "created", "licenses"} <= labels
