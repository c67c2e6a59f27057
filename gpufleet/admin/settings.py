"""Settings of the admin API: where it listens, TLS, and its limits.

The `admin` group of the settings root (`gpufleet.settings`), which `gpufleet operator` reads;
the standalone `gpufleet admin` command fills it from its own flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

POLICY_CONFIGMAP = "gpufleet-policy"
SYSTEM_NAMESPACE = "gpufleet-system"


class AdminSettings(BaseModel):
    """The admin API (REST, dashboard): served by `gpufleet operator` when `port` is set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bind_address: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="Address the admin API and dashboard listen on (0.0.0.0 in a cluster).",
    )
    port: int = Field(
        default=0, ge=0, le=65535, description="Port of the admin API and dashboard; 0 serves none."
    )
    tls_cert_file: Path | None = Field(
        default=None, description="PEM certificate chain to serve TLS with (unset: plain HTTP)."
    )
    tls_key_file: Path | None = Field(
        default=None, description="PEM private key of the TLS certificate."
    )
    token_cache_ttl_s: float = Field(
        default=10.0,
        ge=0,
        le=300,
        description="Seconds a TokenReview or SubjectAccessReview answer is reused.",
    )
    rate_limit_per_s: float = Field(
        default=20.0, gt=0, description="Requests per second each user may make on average."
    )
    rate_limit_burst: int = Field(
        default=40, ge=1, description="Requests a user may make at once before being slowed."
    )
    max_body_bytes: int = Field(
        default=1 << 20, ge=1024, description="Largest request body accepted (413 beyond)."
    )
    namespace: str = Field(
        default=SYSTEM_NAMESPACE, min_length=1, description="Namespace of the policy ConfigMap."
    )
    policy_configmap: str = Field(
        default=POLICY_CONFIGMAP,
        min_length=1,
        description="Name of the ConfigMap holding the live placement policy (PUT /policy).",
    )
    pod_name: str | None = Field(
        default=None,
        description="This process's pod (set from the downward API by the chart): the replica "
        "serving the admin API labels it so that the admin Service routes to it alone.",
    )
    pod_namespace: str | None = Field(default=None, description="Namespace of that pod.")
    drain_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a MIG layout change with drain=true waits for the node's GPU pods.",
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file are set together or not at all")
        return self
