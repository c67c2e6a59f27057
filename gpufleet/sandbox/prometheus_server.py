"""A real Prometheus server for the sandbox and the integration tests, started and stopped by PID.

`PrometheusServer(state_dir, targets)` writes a scrape config with one static config per target
(its labels become target labels, so they are on every series scraped from it: the sandbox's
stand-in for the pod service-discovery relabelling of a cluster), starts Debian's `prometheus`
binary found on PATH listening on a free 127.0.0.1 port with a fresh TSDB inside `state_dir`,
and waits for `/-/ready`. `reload(targets)` rewrites the config and asks the server to reload it
over `/-/reload` (`--web.enable-lifecycle`). The process runs in its own session and is stopped
by its PID only, and only while its command line still names this server's config file.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import httpx
import yaml

from gpufleet.lifecycle import StartStop
from gpufleet.sandbox import processes

__all__ = ["PrometheusNotFound", "PrometheusServer", "Target"]

# (host:port, target labels)
Target = tuple[str, Mapping[str, str]]

JOB_NAME = "gpufleet-serving"
_START_ATTEMPTS = 3  # a free port can be taken by someone else before Prometheus binds it


class PrometheusNotFound(RuntimeError):
    """No `prometheus` binary on PATH."""


class PrometheusServer(StartStop):
    """One Prometheus process scraping `targets` every `scrape_interval_s` seconds."""

    def __init__(
        self,
        state_dir: Path,
        targets: Sequence[Target] = (),
        *,
        scrape_interval_s: float = 1.0,
        binary: str = "prometheus",
        start_timeout_s: float = 30.0,
    ) -> None:
        if scrape_interval_s <= 0:
            raise ValueError("scrape_interval_s must be positive")
        self.state_dir = Path(state_dir)
        self.scrape_interval_s = scrape_interval_s
        self.binary = binary
        self.start_timeout_s = start_timeout_s
        self.config_path = self.state_dir / "prometheus.yml"
        self.log_path = self.state_dir / "prometheus.log"
        self.targets: list[Target] = list(targets)
        self.port: int | None = None
        self.pid: int | None = None

    @property
    def url(self) -> str:
        """Base URL of the HTTP API, e.g. `http://127.0.0.1:9090`."""
        if self.port is None:
            raise RuntimeError("Prometheus is not running; call start() first")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Write the config, start the server and wait until it reports ready."""
        if self.pid is not None:
            return
        path = shutil.which(self.binary)
        if path is None:
            raise PrometheusNotFound(
                f"no `{self.binary}` binary on PATH; install Debian's prometheus package: "
                "apt-get install prometheus"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # A fresh TSDB: series of an earlier run under the same labels would otherwise look
        # like fresh samples to the autoscaler until they age out.
        shutil.rmtree(self.state_dir / "tsdb", ignore_errors=True)
        self._write_config()
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.port = processes.free_port()
            self.pid = processes.spawn(self._argv(path, self.port), self.log_path)
            try:
                processes.wait_until(
                    lambda: self._ready() or self._exited(),
                    "prometheus",
                    self.start_timeout_s,
                    self.log_path,
                )
            except TimeoutError:
                self.stop()
                raise
            if not self._exited():
                return
            tail = self._log_tail()
            self.pid = self.port = None
            if "address already in use" not in tail or attempt == _START_ATTEMPTS:
                raise RuntimeError(f"prometheus exited at start; last lines of its log:\n{tail}")

    def reload(self, targets: Sequence[Target]) -> None:
        """Scrape `targets` from now on: rewrite the config and reload it in the running server.

        If Prometheus refuses the new config it keeps running the old one, and so does this
        object: the old config file is restored and `RuntimeError` says why.
        """
        previous = self.targets
        self.targets = list(targets)
        self._write_config()
        response = httpx.post(f"{self.url}/-/reload", timeout=10.0)
        if response.status_code != 200:
            self.targets = previous
            self._write_config()
            raise RuntimeError(f"prometheus refused the new config: {response.text.strip()}")

    def active_targets(self) -> list[dict[str, object]]:
        """The server's active targets (`/api/v1/targets`), as Prometheus reports them."""
        response = httpx.get(f"{self.url}/api/v1/targets", params={"state": "active"}, timeout=5)
        response.raise_for_status()
        active: list[dict[str, object]] = response.json()["data"]["activeTargets"]
        return active

    def wait_scraped(self, addresses: Iterable[str] | None = None, timeout_s: float = 30.0) -> None:
        """Wait until the targets at `addresses` (default: all configured) have been scraped
        successfully at least once.

        Prometheus applies a new target set within a few seconds (discovery updates are
        batched), and a target's first scrape comes up to one interval later.
        """
        want = {a for a, _ in self.targets} if addresses is None else set(addresses)

        def done() -> bool:
            up = {
                str(t["scrapeUrl"]).split("/")[2]
                for t in self.active_targets()
                if t.get("health") == "up"
            }
            return want <= up

        processes.wait_until(done, f"prometheus scraping {sorted(want)}", timeout_s, self.log_path)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL), only if the PID is still ours."""
        if self.pid is not None:
            processes.stop(self.pid, str(self.config_path))
        self.pid = None
        self.port = None

    # --- internals -------------------------------------------------------------------------

    def _argv(self, path: str, port: int) -> list[str]:
        return [
            path,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.state_dir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
        ]

    def config(self) -> dict[str, object]:
        """The scrape configuration for the current targets."""
        interval = _duration(self.scrape_interval_s)
        return {
            "global": {"scrape_interval": interval, "scrape_timeout": interval},
            "scrape_configs": [
                {
                    "job_name": JOB_NAME,
                    "scrape_interval": interval,
                    "scrape_timeout": interval,
                    "static_configs": [
                        {"targets": [address], "labels": dict(labels)}
                        for address, labels in self.targets
                    ],
                }
            ],
        }

    def _write_config(self) -> None:
        # Write-then-rename: a reload never reads a half-written file.
        tmp = self.config_path.with_suffix(".yml.tmp")
        tmp.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        tmp.replace(self.config_path)

    def _ready(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200
        return False

    def _exited(self) -> bool:
        return self.pid is None or not processes.is_ours(self.pid, str(self.config_path))

    def _log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _duration(seconds: float) -> str:
    """A Prometheus duration: whole milliseconds (`1s`, `500ms`)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
