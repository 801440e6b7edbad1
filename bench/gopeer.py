"""Build the Go benchmark peer (bench/gopeer/: a mock upstream, a reverse-proxy floor and two
load generators; standard library only, so the build needs no network).

``build()`` compiles it once per source version into a directory of the system's temporary
directory named after a hash of the sources, and returns the binary's path; later calls with
the same sources return the cached binary. Nothing in the gateway or its tests needs Go.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "gopeer"
DEFAULT_GO = "/usr/local/go/bin/go"


def go_binary() -> str | None:
    """The `go` command: $GO, then PATH, then /usr/local/go/bin/go; None when there is none."""
    for candidate in (os.environ.get("GO"), shutil.which("go"), DEFAULT_GO):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCE.iterdir()):
        if path.suffix == ".go" or path.name == "go.mod":
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build() -> Path:
    """The built peer, compiled now if this source version has not been built yet."""
    out = Path(tempfile.gettempdir()) / f"edgegw-gopeer-{source_hash()}" / "gopeer"
    if out.is_file():
        return out
    go = go_binary()
    if go is None:
        raise RuntimeError("Go is not installed (set GO to the go command): bench/gopeer needs it")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f"gopeer.{os.getpid()}.part")
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=mod",
           "CGO_ENABLED": "0"}  # fmt: skip
    subprocess.run(
        ["nice", go, "-C", str(SOURCE), "build", "-trimpath", "-o", str(partial), "."],
        env=env,
        check=True,
        timeout=600,
    )
    partial.replace(out)  # atomic: a concurrent build leaves one whole binary
    return out


if __name__ == "__main__":
    print(build())
