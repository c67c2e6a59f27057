"""Settings of the admin API: where it listens, TLS, and its limits.

A plain pydantic model so that the process's one settings root can hold it as a group; the
standalone `gpufleet admin` command fills it from its flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

POLICY_CONFIGMAP = "gpufleet-policy"
SYSTEM_NAMESPACE = "gpufleet-system"


class AdminSettings(BaseModel):
    """The admin API's settings; defaults suit the sandbox (loopback, no TLS)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8443, ge=0, le=65535, description="Port to listen on (0: any).")
    tls_cert_file: Path | None = Field(
        default=None, description="PEM certificate chain served over TLS; None serves plain HTTP."
    )
    tls_key_file: Path | None = Field(default=None, description="PEM private key of the cert.")
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
        default=SYSTEM_NAMESPACE, description="Namespace of the policy ConfigMap."
    )
    policy_configmap: str = Field(
        default=POLICY_CONFIGMAP, description="Name of the ConfigMap holding the live policy."
    )
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
