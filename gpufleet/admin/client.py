"""A client of the admin API for the `gpufleet fleet/jobs/whatif/drain` commands.

It authenticates with the bearer token of the kubeconfig's current user (a static token, a
token file, or what an exec or auth-provider plugin returns, as the kubernetes client resolves
them), so the API's TokenReview sees the same identity kubectl uses, and RBAC decides the same
way. A user that authenticates with a client certificate has no token to send; `--token`
gives one (for example `kubectl create token <serviceaccount>`).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config


class ClientError(RuntimeError):
    """The API refused a request or could not be reached; the message says why."""


def kubeconfig_token(kubeconfig: str | None, context: str | None = None) -> str:
    """The bearer token of the kubeconfig's user (the default kubeconfig when None)."""
    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    except (config.ConfigException, OSError) as exc:
        raise ClientError(f"cannot read the kubeconfig: {exc}") from exc
    if configuration.refresh_api_key_hook is not None:  # token files and plugins fill it now
        configuration.refresh_api_key_hook(configuration)
    # The client files a static token under "authorization", a token file under "BearerToken".
    keys = configuration.api_key or {}
    header = keys.get("authorization") or keys.get("BearerToken") or ""
    token = str(header).removeprefix("Bearer ").strip()
    if not token:
        raise ClientError(
            "the kubeconfig's user has no bearer token (it authenticates with a client "
            'certificate?); pass --token, e.g. --token "$(kubectl create token <account>)"'
        )
    return token


class AdminClient:
    """Calls of the admin API's routes, with problems turned into `ClientError`s."""

    def __init__(
        self,
        server: str,
        token: str,
        ca_file: Path | None = None,
        insecure: bool = False,
        timeout: float = 120.0,
    ) -> None:
        verify: ssl.SSLContext | bool
        if insecure:
            verify = False
        elif ca_file is not None:
            verify = ssl.create_default_context(cafile=str(ca_file))
        else:
            verify = True
        self._http = httpx.Client(
            base_url=server.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            verify=verify,
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(
                f"cannot reach the admin API at {self._http.base_url}: {exc}"
            ) from exc
        if response.status_code >= 400:
            try:
                problem = response.json()
                detail = problem.get("detail") or problem.get("title")
            except ValueError:
                detail = response.text[:200]
            raise ClientError(f"{response.status_code} {response.reason_phrase}: {detail}")
        return response.json()

    def _pages(self, path: str, key: str, params: dict[str, Any]) -> Iterator[Any]:
        token: str | None = None
        while True:
            page = self._call("GET", path, params=params | ({"continue": token} if token else {}))
            yield page
            token = page["metadata"].get("continue")
            if not token:
                return

    def fleet(self) -> dict[str, Any]:
        """The fleet with every node (all pages)."""
        pages = list(self._pages("/api/v1/fleet", "nodes", {"limit": 1000}))
        first = dict(pages[0])
        first["nodes"] = [n for p in pages for n in p["nodes"]]
        return first

    def jobs(self, **filters: str | None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {k: v for k, v in filters.items() if v is not None}
        params["limit"] = 1000
        return [j for p in self._pages("/api/v1/jobs", "items", params) for j in p["items"]]

    def queues(self) -> list[dict[str, Any]]:
        """Every queue (all pages)."""
        pages = self._pages("/api/v1/queues", "items", {"limit": 1000})
        return [q for p in pages for q in p["items"]]

    def whatif(self, manifest: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/api/v1/whatif", json=manifest)
        return result

    def drain(self, node: str, dry_run: bool) -> dict[str, Any]:
        params = {"dryRun": "true"} if dry_run else {}
        result: dict[str, Any] = self._call("POST", f"/api/v1/nodes/{node}/drain", params=params)
        return result
