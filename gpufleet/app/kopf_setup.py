"""kopf's configuration in a `gpufleet operator` process: storage, posting, credentials."""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes import client

from gpufleet.scheduler.apiwriter import bearer_token


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Progress and diff-base in annotations: the CRD's status schema is gpufleet's own.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="gpufleet.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="gpufleet.io", key="last-handled-configuration"
    )
    settings.persistence.finalizer = "gpufleet.io/finalizer"
    # Handlers post their own Events on transitions; kopf's routine INFO logs stay logs.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5]


def register_login(api: client.ApiClient) -> Any:
    """kopf's credentials, taken from the same kubeconfig as the scheduler's client."""
    cfg = api.configuration

    @kopf.on.login()
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
            token=bearer_token(cfg),
        )

    return login
