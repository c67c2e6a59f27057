"""Certificates and kubeconfig for the sandbox control plane, made with the openssl CLI.

One CA signs one admin certificate (O=system:masters) that serves as the API server's serving
certificate and every component's client certificate, as kwokctl does; a separate RSA pair signs
service-account tokens. Everything is for 127.0.0.1 only.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

_SAN = (
    "subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
    "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.0.0.1"
)
_EXT = f"""basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
{_SAN}
"""


def _openssl(pki: Path, *args: str) -> None:
    result = subprocess.run(["openssl", *args], cwd=pki, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def ensure_pki(pki: Path) -> None:
    """Create the CA, the admin certificate and the service-account key pair once."""
    pki.mkdir(parents=True, exist_ok=True)
    if (pki / "admin.crt").exists() and (pki / "sa.pub").exists():
        return
    _openssl(
        pki,
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "3650",
        "-subj",
        "/CN=gpufleet-sandbox-ca",
    )
    _openssl(
        pki,
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "admin.key",
        "-out",
        "admin.csr",
        "-subj",
        "/O=system:masters/CN=gpufleet-admin",
    )
    (pki / "ext.cnf").write_text(_EXT)
    _openssl(
        pki,
        "x509",
        "-req",
        "-in",
        "admin.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "admin.crt",
        "-days",
        "3650",
        "-extfile",
        "ext.cnf",
    )
    _openssl(pki, "genrsa", "-out", "sa.key", "2048")
    _openssl(pki, "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")


def issue_client_cert(pki: Path, user: str) -> str:
    """A client certificate signed by the sandbox CA for `user` (in no group: what it may do is
    what RBAC grants it); returns the file stem of `<stem>.crt` and `<stem>.key`."""
    stem = f"user-{user}"
    if not (pki / f"{stem}.crt").exists():
        _openssl(pki, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{stem}.key",
                 "-out", f"{stem}.csr", "-subj", f"/CN={user}")  # fmt: skip
        _openssl(pki, "x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{stem}.crt", "-days", "3650")  # fmt: skip
    return stem


def write_kubeconfig(path: Path, pki: Path, server: str, cert: str = "admin") -> None:
    """A kubeconfig with the admin credentials (or those of the certificate `cert`, from
    `issue_client_cert`) embedded, usable by kubectl and Python clients."""
    import base64

    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: gpufleet-sandbox
  cluster:
    server: {server}
    certificate-authority-data: {b64("ca.crt")}
users:
- name: gpufleet-admin
  user:
    client-certificate-data: {b64(f"{cert}.crt")}
    client-key-data: {b64(f"{cert}.key")}
contexts:
- name: gpufleet-sandbox
  context: {{cluster: gpufleet-sandbox, user: gpufleet-admin}}
current-context: gpufleet-sandbox
"""
    )
    path.chmod(0o600)
