"""Build the Go benchmark peer (bench/gopeer/: a mock upstream, a reverse-proxy floor and two
load generators; standard library only, so the build needs no network).

``build()`` compiles it once per source version into a directory of the system's temporary
directory named after a hash of the sources, and returns the binary's path; later calls with
the same sources return the cached binary. Nothing in the gateway needs Go, and its tests
skip without it; `python -m bench` (and CI's smoke run of it) does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def run(
    binary: Path,
    args: list[str],
    on_phase: Callable[[str], None],
    preexec: Callable[[], None] | None = None,
    timeout_s: float = 120,
) -> dict[str, Any]:
    """Run one generator (`gopeer load|streams ...`): `on_phase("run")` / `on_phase("done")`
    as it prints the start and the end of its measured phase; its JSON result. A failure
    raises with the end of its standard error."""
    result: dict[str, Any] | None = None
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [str(binary), *args], stdout=subprocess.PIPE, stderr=err, text=True,
            preexec_fn=preexec,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("phase "):
                on_phase(line.split()[1])
            elif line.startswith("{"):
                result = json.loads(line)
        proc.wait(timeout=timeout_s)
        if proc.returncode or result is None:
            err.seek(0)
            raise RuntimeError(f"gopeer {args[0]} failed: {err.read().decode()[-2000:]}")
    return result


if __name__ == "__main__":
    print(build())
