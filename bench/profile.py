"""`python -m bench profile`: where edgegw's time goes on the hot path.

The gateway (one worker, core 1) serves a 32-connection closed loop of non-streaming chat
requests (mock and load generator on core 0) and, in a second run, of streaming ones; py-spy
(``PY_SPY``, default /tmp/venv/bin/py-spy, pinned to core 0) samples it at 200 Hz with native
frames, raw (collapsed) output. Each sample is attributed to one owner by walking its stack
from the leaf up:

- ``rust``: a frame in edgegw's extension (``_core``);
- otherwise the innermost frame that is edgegw's or Hypercorn's decides: ``upstream client``
  (edgegw/upstream.py), ``edgegw`` (its other modules), ``hypercorn`` (Hypercorn, with the
  h11, Trio and stdlib code it calls);
- ``trio scheduler / I/O``: neither on the stack (Trio's run loop, epoll, task switching);
- ``idle``: the thread is blocked in epoll_wait.

py-spy stops the process for each sample, which slows it down somewhat; the shares, not the
rate under the profiler, are the result.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import time
from pathlib import Path

from bench.harness import (
    CHAT,
    CORE_A,
    CORE_B,
    PATH,
    RESULTS,
    cpu_seconds,
    free_port,
    gateway,
    load,
    mock_args,
    process,
    streaming,
    wait_quiet,
)

PY_SPY = os.environ.get("PY_SPY", "/tmp/venv/bin/py-spy")
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<where>[^()]*)\)$")


def _frames(stack: str) -> list[tuple[str, str]]:
    out = []
    for f in stack.split(";"):
        m = _FRAME.match(f)
        out.append((m["func"], m["where"]) if m else (f, ""))
    return out


def _is_rust(func: str, where: str) -> bool:
    return where.endswith("_core.abi3.so") or func.startswith(("edgegw_core::", "pyo3::"))


def _task_frames(frames: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The frames below Trio's run loop (a task's code, or the loop's own work)."""
    for i in range(len(frames) - 1, -1, -1):
        if frames[i][0] == "unrolled_run":
            return frames[i + 1 :]
    return frames


def _owner(frames: list[tuple[str, str]]) -> str:
    if any(f == "epoll_wait" for f, _ in frames[-3:]) and not any(
        w.startswith(("edgegw/", "hypercorn/")) for _, w in _task_frames(frames)
    ):
        return "idle (epoll_wait)"
    task = _task_frames(frames)
    for func, where in reversed(task):
        if _is_rust(func, where):
            return "rust (edgegw._core)"
        if where.startswith("edgegw/upstream.py"):
            return "upstream client (edgegw/upstream.py)"
        if where.startswith("edgegw/"):
            return "edgegw (own code)"
        if where.startswith("hypercorn/"):
            return "hypercorn (+ h11/trio/stdlib it calls)"
    return "trio run loop (scheduling, epoll, no task)"


def summarise(raw: Path, top: int = 25) -> dict:
    owners: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    files: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = _frames(stack)
        owner = _owner(frames)
        owners[owner] += n
        total += n
        if owner.startswith("idle"):
            continue
        py = [(f, w) for f, w in frames if ".py:" in w]
        if py:
            f, w = py[-1]
            leaf[f"{f} ({w.rsplit(':', 1)[0]})"] += n
            files[w.split("/", 1)[0] if "/" in w else w.rsplit(":", 1)[0]] += n
        seen = set()
        for f, w in _task_frames(frames):
            if w.startswith("edgegw/") or _is_rust(f, w):
                key = f"{f} ({w.rsplit(':', 1)[0]})"
                if key not in seen:
                    seen.add(key)
                    inclusive[key] += n
    busy = total - sum(v for k, v in owners.items() if k.startswith("idle"))
    return {
        "samples": total,
        "busy_samples": busy,
        "owners_share_of_busy": {
            k: round(v / busy, 4) for k, v in owners.most_common() if not k.startswith("idle")
        },
        "idle_share_of_all": round(
            sum(v for k, v in owners.items() if k.startswith("idle")) / max(1, total), 4
        ),
        "top_leaf_python_functions": [(k, round(v / busy, 4)) for k, v in leaf.most_common(top)],
        "leaf_by_package": [(k, round(v / busy, 4)) for k, v in files.most_common(15)],
        "edgegw_inclusive": [(k, round(v / busy, 4)) for k, v in inclusive.most_common(top)],
    }


def _profile_run(ns, name: str, gw_pid: int, gw_port: int, body: bytes, stream: bool) -> dict:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    raw = RESULTS / f"profile-{name}-{stamp}.txt"
    RESULTS.mkdir(parents=True, exist_ok=True)
    cmd = [PY_SPY, "record", "-r", str(ns.rate), "-f", "raw", "-o", str(raw), "--pid", str(gw_pid)]
    cmd += ["--duration", str(int(ns.seconds)), "--nonblocking" if ns.nonblocking else "--native"]
    before = cpu_seconds(gw_pid)
    spy = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.sched_setaffinity(0, {CORE_A}),
    )
    try:
        seconds = ns.seconds + 2
        if stream:
            r = load(
                gw_port, streaming(body), PATH, ns.connections, seconds, 1_000_000, stream=True
            )
            rate = {"streams_per_s": r.ok / r.elapsed_s, "errors": r.errors}
        else:
            r = load(gw_port, body, PATH, ns.connections, seconds, 10_000_000)
            rate = {"rps": r.rps, "errors": r.errors}
        _, err = spy.communicate(timeout=60)
    finally:
        if spy.poll() is None:
            spy.kill()
            spy.wait()
    if spy.returncode != 0 or not raw.exists():
        raise RuntimeError(
            f"py-spy failed ({spy.returncode}): {err.decode(errors='replace')[-2000:]}"
        )
    out = {
        "raw": str(raw.relative_to(RESULTS.parent.parent)),
        **rate,
        "gw_cpu_s": cpu_seconds(gw_pid) - before,
    }
    out.update(summarise(raw))
    return out


def cmd_profile(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_A})
    out: dict = {"quiet": wait_quiet(), "rate_hz": ns.rate, "connections": ns.connections}
    mock_port, gw_port = free_port(), free_port()
    with (
        process(mock_args(mock_port), CORE_A, port=mock_port),
        gateway(gw_port, mock_port, CORE_B) as gw,
    ):
        load(gw_port, CHAT, PATH, ns.connections, 2, 100_000)
        out["non_streaming"] = _profile_run(ns, "json", gw.pid, gw_port, CHAT, stream=False)
        print_profile("non-streaming", out["non_streaming"])
        out["streaming"] = _profile_run(ns, "sse", gw.pid, gw_port, CHAT, stream=True)
        print_profile("streaming (16 chunks)", out["streaming"])
    return out


def print_profile(title: str, p: dict) -> None:
    print(f"\nprofile, {title}: {p['busy_samples']} busy samples of {p['samples']} ({p['raw']})")
    for k, v in p["owners_share_of_busy"].items():
        print(f"  {v * 100:5.1f} %  {k}")
    print("  top leaf Python functions:")
    for k, v in p["top_leaf_python_functions"][:12]:
        print(f"    {v * 100:5.1f} %  {k}")
    print("  edgegw functions, inclusive:")
    for k, v in p["edgegw_inclusive"][:12]:
        print(f"    {v * 100:5.1f} %  {k}")
