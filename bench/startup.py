"""The scenario `startup`: cold start, idle memory and size of each way edgegw ships.

Kinds, each measured where it is present: `python` (`python -m edgegw serve` from this tree),
`onefile` (dist/edgegw, scripts/build-binary), `onedir` (dist/onedir/edgegw/edgegw,
EDGEGW_BINARY_KIND=onedir), `image` (localhost/edgegw:<version> under podman, scripts/build-image).
Each run: launch `serve` with one worker and an OpenAI key (default settings otherwise), poll
GET /health every 5 ms until it answers 200 (the cold start), wait a second, read the serving
process's RSS (the idle RSS; for `onefile` the Python child's plus its bootloader's), then
SIGTERM. Runs of the kinds are interleaved, `--runs` of each; medians and ranges. Sizes: the
file, the directory on disk, the image unpacked and gzip-compressed.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request

from bench.harness import ROOT, Result, free_port, rss_bytes, spread, wait_quiet

MiB = 1 << 20
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"localhost/edgegw:{VERSION}"
ONEFILE = ROOT / "dist" / "edgegw"
ONEDIR = ROOT / "dist" / "onedir" / "edgegw"
# ../shared/notes/containers.md: runc, and limits at or below the machine's hard ones.
PODMAN = ["podman", "run", "--rm", "--runtime", "runc", "--ulimit", "nofile=4096:4096",
          "--ulimit", "nproc=1024:1024", "--read-only", "--network=host"]  # fmt: skip
SMOKE = ["--runs", "1", "--kinds", "python", "--max-wait", "0"]


def _image_present() -> bool:
    if shutil.which("podman") is None:
        return False
    return subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode == 0


def _command(kind: str, port: int, name: str) -> list[str]:
    serve = ["serve", "--workers", "1"]
    if kind == "python":
        return [sys.executable, "-m", "edgegw", *serve]
    if kind == "onefile":
        return [str(ONEFILE), *serve]
    if kind == "onedir":
        return [str(ONEDIR / "edgegw"), *serve]
    return [*PODMAN, "--name", name, "-e", f"SERVER_PORT={port}", "-e", "OPENAI_API_KEY=x",
            "-e", "EDGEGW_WORKERS=1", IMAGE, *serve]  # fmt: skip


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _serving_pid(kind: str, proc: subprocess.Popen[bytes], name: str) -> int | None:
    """The root of the serving process tree: the launched one, or the container's PID 1."""
    if kind != "image":
        return proc.pid
    out = subprocess.run(["podman", "inspect", name, "--format", "{{.State.Pid}}"],
                         capture_output=True, check=False).stdout  # fmt: skip
    return int(out) if out.strip().isdigit() else None


def _one(kind: str, run: int) -> tuple[float, float]:
    """(cold start s, idle RSS MiB) of one launch."""
    port = free_port()
    name = f"edgegw-startup-{os.getpid()}-{run}"
    env = {**os.environ, "SERVER_PORT": str(port), "OPENAI_API_KEY": "x", "LOG_LEVEL": "WARNING"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(_command(kind, port, name), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = t0 + 30
        while not _healthy(port):
            if time.perf_counter() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{kind} did not answer /health within 30 s")
            time.sleep(0.005)
        cold = time.perf_counter() - t0
        time.sleep(1.0)
        pid = _serving_pid(kind, proc, name)
        rss = 0.0 if pid is None else rss_bytes(pid) / MiB  # the tree's: rss_bytes sums it
    finally:
        if kind == "image":
            subprocess.run(["podman", "stop", "-t", "10", name], capture_output=True, check=False)
        else:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return cold, rss


def _sizes(kinds: list[str]) -> Result:
    out: Result = {}
    if "onefile" in kinds:
        out["onefile_mib"] = round(ONEFILE.stat().st_size / MiB, 1)
    if "onedir" in kinds:
        total = sum(p.stat().st_size for p in ONEDIR.rglob("*") if p.is_file())
        out["onedir_mib"] = round(total / MiB, 1)
    if "image" in kinds:
        size = subprocess.run(["podman", "image", "inspect", "--format", "{{.Size}}", IMAGE],
                              capture_output=True, check=True).stdout  # fmt: skip
        out["image_mib"] = round(int(size) / MiB, 1)
        saved = subprocess.run(["podman", "save", IMAGE], capture_output=True, check=True).stdout
        out["image_gzip_mib"] = round(len(gzip.compress(saved, 6)) / MiB, 1)
    return out


def run(ns: argparse.Namespace) -> Result:
    present = {
        "python": True,
        "onefile": ONEFILE.is_file(),
        "onedir": (ONEDIR / "edgegw").is_file(),
        "image": _image_present(),
    }
    kinds = [k for k in ns.kinds if present[k]]
    missing = [k for k in ns.kinds if not present[k]]
    if missing:
        print(f"  not built, left out: {', '.join(missing)}", flush=True)
    quiet = wait_quiet(max_wait_s=ns.max_wait)
    cold: dict[str, list[float]] = {k: [] for k in kinds}
    rss: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(ns.runs):
        for kind in kinds:
            c, r = _one(kind, i)
            cold[kind].append(c * 1000)
            rss[kind].append(r)
    out: Result = {"quiet": quiet, "sizes": _sizes(kinds), "kinds": {}}
    for kind in kinds:
        out["kinds"][kind] = {
            "cold_ms": spread(cold[kind], 0),
            "idle_rss_mib": spread(rss[kind], 1),
        }
        c, r = out["kinds"][kind]["cold_ms"], out["kinds"][kind]["idle_rss_mib"]
        print(f"  {kind:8} cold start {c['median']} ms ({c['min']}-{c['max']}), "
              f"idle RSS {r['median']} MiB", flush=True)  # fmt: skip
    print(f"  sizes: {out['sizes']}", flush=True)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=7, help="launches of each kind")
    p.add_argument("--kinds", nargs="+", default=["python", "onefile", "onedir", "image"],
                   choices=["python", "onefile", "onedir", "image"])  # fmt: skip
    p.add_argument("--max-wait", type=float, default=60.0, help="seconds to wait for quiet")
