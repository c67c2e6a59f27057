"""A self-signed serving certificate for the admin API, made with the openssl CLI.

For the sandbox and development: in a cluster the chart mounts the certificate from a Secret.
The certificate is its own CA (clients trust it with `--certificate-authority` pointing at it)
and names localhost and 127.0.0.1.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

CERT = "admin.crt"
KEY = "admin.key"


def ensure_self_signed(
    directory: Path, hosts: tuple[str, ...] = ("localhost",)
) -> tuple[Path, Path]:
    """(certificate, key) in `directory`, made once."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / CERT, directory / KEY
    if cert.exists() and key.exists():
        return cert, key
    names = ",".join([*(f"DNS:{h}" for h in hosts), "IP:127.0.0.1"])
    result = subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "825",
            "-subj", "/CN=gpufleet-admin",
            "-addext", f"subjectAltName={names}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
            "-addext", "extendedKeyUsage=serverAuth",
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"openssl could not make the admin API's certificate: {result.stderr}")
    key.chmod(0o600)
    return cert, key
