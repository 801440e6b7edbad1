"""`python -m bench.adapter`: which connection layer serves plain HTTP/1.1, by measurement.

In one run, interleaved rounds in random order, medians: the bare app (bench/bare_app.py's
`make_app`, no upstream) under Hypercorn-Trio and under edgegw's own layer (edgegw.http1),
and edgegw proxying the mock under each (`EDGEGW_SERVER=hypercorn` / `edgegw`). Layout as
`python -m bench throughput` (bench/README.md): the four servers sit pinned to core 1 (only
the one being measured is busy), the mock and the load generator share core 0; closed loop
at 32 keep-alive connections; next to req/s, the server's CPU time per answered request
from /proc (steadier than req/s on a shared machine), and the CPU the rest of the machine
used meanwhile. Everything on 127.0.0.1, every cell bounded in time and count.

    python -m bench.adapter [--rounds 3] [--seconds 6] [--connections 32]
    python -m bench.adapter serve-bare --layer edgegw|hypercorn --port N   (a server child)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import trio

from bench.harness import (
    CHAT,
    CORE_A,
    CORE_B,
    PATH,
    RESULTS,
    ROOT,
    Others,
    cpu_seconds,
    free_port,
    mock_args,
    process,
    wait_quiet,
)
from edgegw.bench.loadgen import Load, LoadSpec

TARGETS = ("bare_hypercorn", "bare_edgegw", "gw_hypercorn", "gw_edgegw")
REQUEST_TIMEOUT_S = 30.0


def closed_loop(port: int, pid: int, connections: int, seconds: float) -> dict[str, Any]:
    """One cell: edgegw.bench.loadgen's closed loop (the instrument of `edgegw bench` and
    bench/), the server's CPU read from /proc around it."""
    request = (
        f"POST {PATH} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(CHAT)}\r\n\r\n"
    ).encode() + CHAT
    spec = LoadSpec(
        address="127.0.0.1",
        port=port,
        request=request,
        stream=False,
        connections=connections,
        rate=None,
        duration_s=seconds,
        warmup_s=0.0,
        max_requests=5_000_000,
        timeout_s=REQUEST_TIMEOUT_S,
    )
    run = Load(spec)
    before = cpu_seconds(pid)
    trio.run(run.run)
    used = cpu_seconds(pid) - before
    stats = run.measured
    assert stats.error_count == 0 and stats.requests, (port, stats.statuses, stats.errors)
    return {
        "requests": stats.requests,
        "rps": stats.requests / run.elapsed_s,
        "cpu_us_per_req": used / stats.requests * 1e6,
        "p50_ms": stats.latency.percentile_us(50) / 1000,
        "p99_ms": stats.latency.percentile_us(99) / 1000,
    }


def serve_bare(layer: str, port: int, tokens: int) -> None:
    from bench.bare_app import make_app

    app = make_app(tokens)
    if layer == "hypercorn":
        from hypercorn.config import Config
        from hypercorn.trio import serve

        config = Config()  # as bench/bare_app.py
        config.bind = [f"127.0.0.1:{port}"]
        config.accesslog = None
        config.read_timeout = None
        config.keep_alive_timeout = 75
        trio.run(serve, app, config)
    else:
        from edgegw.http1.limits import ConnectionLimits
        from edgegw.http1.server import open_listener, serve_http1

        trio.run(serve_http1, app, open_listener(f"127.0.0.1:{port}"), ConnectionLimits())


def gateway_env(mock_port: int, layer: str) -> dict[str, str]:
    return {
        "OPENAI_API_URL": f"http://127.0.0.1:{mock_port}/v1",
        "OPENAI_API_KEY": "bench-key",
        "LOG_LEVEL": "WARNING",
        "EDGEGW_WORKERS": "1",
        "EDGEGW_SERVER": layer,
    }


def measure(ns: argparse.Namespace) -> dict[str, Any]:
    os.sched_setaffinity(0, {CORE_A})
    quiet = wait_quiet()
    ports = {name: free_port() for name in TARGETS}
    mock_port = free_port()
    pids: dict[str, int] = {}
    with ExitStack() as stack:
        stack.enter_context(process(mock_args(mock_port), CORE_A, port=mock_port))
        for layer in ("hypercorn", "edgegw"):
            bare = stack.enter_context(
                process(
                    ["-m", "bench.adapter", "serve-bare", "--layer", layer]
                    + ["--port", str(ports[f"bare_{layer}"])],
                    CORE_B,
                    port=ports[f"bare_{layer}"],
                )
            )
            gw = stack.enter_context(
                process(
                    ["-m", "edgegw", "serve", "--port", str(ports[f"gw_{layer}"])],
                    CORE_B,
                    gateway_env(mock_port, layer),
                    port=ports[f"gw_{layer}"],
                )
            )
            pids[f"bare_{layer}"], pids[f"gw_{layer}"] = bare.pid, gw.pid
        for name in TARGETS:  # warm-up
            closed_loop(ports[name], pids[name], ns.connections, 2)
        cells: dict[str, list[dict[str, Any]]] = {name: [] for name in TARGETS}
        for round_ in range(ns.rounds):
            order = list(TARGETS)
            random.shuffle(order)
            for name in order:
                with Others(list(pids.values())) as others:
                    cell = closed_loop(ports[name], pids[name], ns.connections, ns.seconds)
                cell["others_cores"] = others.cores
                cells[name].append(cell)
                print(
                    f"round {round_ + 1} {name:15s} {cell['rps']:7.0f} req/s "
                    f"{cell['cpu_us_per_req']:6.0f} µs CPU/req  p99 {cell['p99_ms']:.1f} ms  "
                    f"(others {others.cores:.2f} cores)",
                    flush=True,
                )
    out: dict[str, Any] = {"quiet": quiet, "cells": cells}
    for name in TARGETS:
        for key in ("rps", "cpu_us_per_req", "p50_ms", "p99_ms"):
            out[f"{name}_{key}"] = statistics.median(c[key] for c in cells[name])
    for kind in ("bare", "gw"):
        out[f"{kind}_edgegw_vs_hypercorn_rps"] = (
            out[f"{kind}_edgegw_rps"] / out[f"{kind}_hypercorn_rps"]
        )
        out[f"{kind}_hypercorn_vs_edgegw_cpu"] = (
            out[f"{kind}_hypercorn_cpu_us_per_req"] / out[f"{kind}_edgegw_cpu_us_per_req"]
        )
    print()
    print(f"{'median of ' + str(ns.rounds):16s} {'req/s':>8s} {'CPU µs/req':>11s} {'p99 ms':>7s}")
    for name in TARGETS:
        print(
            f"{name:16s} {out[f'{name}_rps']:8.0f} {out[f'{name}_cpu_us_per_req']:11.0f} "
            f"{out[f'{name}_p99_ms']:7.1f}"
        )
    print(
        f"bare app: edgegw.http1 / Hypercorn-Trio = {out['bare_edgegw_vs_hypercorn_rps']:.2f}x "
        f"req/s, {out['bare_hypercorn_vs_edgegw_cpu']:.2f}x less CPU per request"
    )
    print(
        f"gateway:  edgegw.http1 / Hypercorn-Trio = {out['gw_edgegw_vs_hypercorn_rps']:.2f}x "
        f"req/s, {out['gw_hypercorn_vs_edgegw_cpu']:.2f}x less CPU per request"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.adapter")
    sub = parser.add_subparsers(dest="cmd")
    child = sub.add_parser("serve-bare", help="serve the bare app (a child of the benchmark)")
    child.add_argument("--layer", choices=("edgegw", "hypercorn"), required=True)
    child.add_argument("--port", type=int, required=True)
    child.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6, help="per cell")
    parser.add_argument("--connections", type=int, default=32)
    ns = parser.parse_args()
    if ns.cmd == "serve-bare":
        serve_bare(ns.layer, ns.port, ns.tokens)
        return
    from bench.__main__ import machine

    results: dict[str, Any] = {
        "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "args": {k: v for k, v in vars(ns).items() if k != "cmd"},
    }
    results["adapter"] = measure(ns)
    results["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"adapter-{results['when'].replace(':', '')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
