"""Generate the device-plugin API's Python stubs from the vendored proto, or check them for drift.

The stubs are committed (so the wheel and CI need no code generator); `make protos` regenerates
them and `make lint` fails when they no longer match the proto. The generator is grpcio-tools,
pinned to one minor version in the test extra because its output names the version it came from.

    python -m gpufleet.agent.deviceplugin.protogen           # rewrite the stubs
    python -m gpufleet.agent.deviceplugin.protogen --check   # exit 1 when they drift
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent / "v1beta1"
_SOURCE_ROOT = _PACKAGE_DIR.parents[3]  # the folder holding the `gpufleet` package
PROTO = _PACKAGE_DIR / "api.proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")
# Every line of the vendored file up to and including this one is gpufleet's header.
_HEADER_END = "// " + "-" * 96 + "\n"


def upstream_body(proto_text: str) -> str:
    """The proto exactly as the kubelet module ships it: the text below gpufleet's header."""
    _, sep, body = proto_text.partition(_HEADER_END)
    if not sep:
        raise ValueError(f"{PROTO.name}: the vendoring header's closing line is missing")
    return body


def recorded_digest(proto_text: str) -> str:
    """The SHA-256 of the upstream file that the header records."""
    for line in proto_text.splitlines():
        if line.startswith("// SHA-256 of the upstream file: "):
            return line.rsplit(" ", 1)[1]
    raise ValueError(f"{PROTO.name}: the header records no SHA-256 of the upstream file")


def body_digest(proto_text: str) -> str:
    return hashlib.sha256(upstream_body(proto_text).encode()).hexdigest()


def vendoring_problem(proto_text: str) -> str | None:
    """Why the vendored proto is not the upstream file its header names, or None."""
    try:
        if body_digest(proto_text) != recorded_digest(proto_text):
            return "changed below the vendoring header; re-vendor it from the kubelet module"
    except ValueError as exc:
        return str(exc)
    return None


def generate(out_root: Path) -> list[Path]:
    """Run protoc on the vendored proto, writing the stubs under `out_root` (package layout)."""
    relative = PROTO.relative_to(_SOURCE_ROOT)
    # A process of its own: grpc_tools' compiler crashes a process that has loaded OR-Tools
    # (both bring their own protobuf library), as the test suite and the core do.
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",  # a development dependency: only needed to regenerate
        f"-I{_SOURCE_ROOT}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        str(relative),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"protoc failed on {relative}: {result.stderr.strip()}")
    return [out_root / relative.parent / name for name in GENERATED]


def drifted() -> list[str]:
    """Names of committed stubs that differ from a fresh generation (empty when up to date)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        return [
            path.name
            for path in fresh
            if not (_PACKAGE_DIR / path.name).exists()
            or (_PACKAGE_DIR / path.name).read_bytes() != path.read_bytes()
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the stubs drift")
    args = parser.parse_args(argv)
    problem = vendoring_problem(PROTO.read_text())
    if problem is not None:
        print(f"{PROTO}: {problem}", file=sys.stderr)
        return 1
    if args.check:
        stale = drifted()
        if stale:
            print(
                f"device-plugin stubs drift from {PROTO.name}: {', '.join(stale)}; "
                "run `make protos`",
                file=sys.stderr,
            )
            return 1
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in generate(Path(tmp)):
            (_PACKAGE_DIR / path.name).write_bytes(path.read_bytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
