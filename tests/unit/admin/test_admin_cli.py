"""The admin commands' client side: which token a kubeconfig gives, and what is printed.

- a static token and a token file are sent as they are; a user with a client certificate only
  gets a message saying to pass --token;
- `gpufleet fleet`, `jobs`, `whatif` and `drain` against a served API print their tables
  (the same API the integration tests call with real ServiceAccount tokens);
- `gpufleet admin` reads the settings root like `gpufleet operator` (scheduler name, placement,
  admin group; its flags win) and refuses a bad setting in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml
from admin_fakes import (
    UNREACHABLE,
    bind,
    context,
    job_pods,
    live_fleet,
    sandbox_nodes,
    served,
    training_job,
)
from kubernetes import client

from gpufleet import cli
from gpufleet.admin.cli import DEFAULT_PORT, admin_settings, run_client
from gpufleet.admin.client import ClientError, kubeconfig_token
from gpufleet.admin.wiring import build_context
from gpufleet.scheduler.pods import pod_key


def _kubeconfig(tmp_path: Path, user: dict[str, str]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_token_from_the_kubeconfig(tmp_path: Path) -> None:
    assert kubeconfig_token(str(_kubeconfig(tmp_path, {"token": "abc"}))) == "abc"
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert kubeconfig_token(str(_kubeconfig(tmp_path, {"tokenFile": str(token_file)}))) == (
        "from-file"
    )
    (tmp_path / "c.crt").write_text("x")
    (tmp_path / "c.key").write_text("x")
    certificate = {
        "client-certificate": str(tmp_path / "c.crt"),
        "client-key": str(tmp_path / "c.key"),
    }
    with pytest.raises(ClientError, match="no bearer token"):
        kubeconfig_token(str(_kubeconfig(tmp_path, certificate)))


def _args(command: str, server: str, **extra: object) -> argparse.Namespace:
    base = {
        "command": command, "kubeconfig": None, "context": None, "server": server,
        "token": "admin-token", "certificate_authority": None, "insecure_skip_tls_verify": False,
        "output": "table",
    }  # fmt: skip
    return argparse.Namespace(**(base | extra))


def test_commands_print_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = training_job("llama", replicas=1, gpus=8, phase="Running")
    pods = [bind(p, "h100-0", "0,1,2,3,4,5,6,7", "H100-80GB") for p in job_pods(job)]
    printed: list[str] = []
    with served(context(live_fleet(sandbox_nodes(), pods, [job]))) as http:
        server = str(http.base_url)
        assert run_client(_args("fleet", server), printed.append) == 0
        assert run_client(_args("jobs", server, namespace=None, queue=None, phase=None),
                          printed.append) == 0  # fmt: skip
        manifest = tmp_path / "job.yaml"
        manifest.write_text(yaml.safe_dump(training_job("next", gpus=2, gpu_type="L4")))
        assert run_client(_args("whatif", server, filename=manifest, namespace="team-a"),
                          printed.append) == 0  # fmt: skip
        assert run_client(_args("fleet", server, token="forged"), printed.append) == 1
    fleet, jobs, whatif = printed
    h100 = next(line for line in fleet.splitlines() if line.startswith("h100-0 "))
    assert h100.split()[:4] == ["h100-0", "H100-80GB", "Ready", "8/8"]
    assert "allocated/allocatable:" in fleet
    assert jobs.splitlines()[1].split()[:6] == ["team-a", "TrainingJob", "llama", "default",
                                                 "Running", "H100-80GB"]  # fmt: skip
    assert whatif.splitlines()[0] == "TrainingJob team-a/next would run now (policy balanced)"
    assert "2 x L4 on l4-" in whatif
    assert "401 Unauthorized" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "No such file or directory", id="missing"),
        pytest.param("a: [1\n", ":2: not valid YAML", id="not-yaml"),
        pytest.param("a: 1\n---\nb: 2\n", "exactly one TrainingJob or ServingJob", id="two-docs"),
    ],
)
def test_a_bad_manifest_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "job.yaml"
    if content is not None:
        path.write_text(content)
    assert cli.main(["whatif", "-f", str(path), "--token", "t", "--server", UNREACHABLE]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpufleet whatif: error: ") and message in err[0]


def _admin_args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["admin", *argv])


def test_gpufleet_admin_reads_the_settings_root_as_the_operator_does(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    settings_file = {"scheduler": {"name": "team-gpus"}, "admin": {"bind_address": "0.0.0.0"}}
    config.write_text(yaml.safe_dump(settings_file))
    environ = {"GPUFLEET_PLACEMENT__PRESET": "energy"}
    args = _admin_args("--config", str(config), "--port", "9443")
    settings = admin_settings(args, environ=environ)
    assert settings.scheduler.name == "team-gpus"
    assert (settings.admin.bind_address, settings.admin.port) == ("0.0.0.0", 9443)
    # A flag wins over the file; with no port anywhere, the standalone API still serves.
    plain = admin_settings(_admin_args("--config", str(config), "--host", "127.0.0.1"), environ={})
    assert (plain.admin.bind_address, plain.admin.port) == ("127.0.0.1", DEFAULT_PORT)

    api = client.ApiClient(client.Configuration(host=UNREACHABLE))
    ctx = build_context(
        api, settings.admin, placement=settings.placement, scheduler=settings.scheduler
    )
    assert ctx.policy.current().name == "energy"
    # The view counts the pods naming that scheduler as the scheduler's (pending gangs here).
    job = training_job("ours", replicas=2)
    pods = job_pods(job)
    for pod in pods:
        pod["spec"]["schedulerName"] = "team-gpus"
    ctx.live.cache.replace_nodes(sandbox_nodes())
    ctx.live.cache.replace_pods(pods)
    pending = ctx.live.observe().view.pending
    assert [sorted(p.pods) for p in pending] == [sorted(pod_key(p) for p in pods)]
    api.close()


def test_gpufleet_admin_refuses_a_bad_setting_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"scheduler": {"name": ""}}))
    assert cli.main(["admin", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "gpufleet admin: error: setting scheduler.name (GPUFLEET_SCHEDULER__NAME)"
    )
    assert "\n" not in err
