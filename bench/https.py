"""`python -m bench.https`: HTTPS throughput, edgegw.http1's TLS against Hypercorn's, in one run.

Two gateways proxying the mock over HTTPS with the same certificate: `hypercorn` is how HTTPS
was served before edgegw.http1 took TLS over (SERVER_HTTP2_ENABLED=true: Hypercorn's TLS; the
client offers only http/1.1, so both answer HTTP/1.1), `edgegw` is the default now. Layout as
bench/adapter.py: the gateways pinned to core 1, the mock and the client on core 0;
interleaved rounds in random order; medians. The client is a closed loop of keep-alive TLS
connections (trio.SSLStream) written here, since edgegw.bench.loadgen speaks plain TCP; it
costs the same for both targets, so the server's CPU time per answered request (from /proc)
is the figure to compare, req/s beside it. A cell with any failed request fails the run.

    python -m bench.https [--rounds 3] [--seconds 6] [--connections 16]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import ssl
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import trio
import trustme

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

TARGETS = ("hypercorn", "edgegw")


async def _client(
    port: int, ctx: ssl.SSLContext, deadline: float, done: list[int], failed: list[str]
) -> None:
    request = (
        f"POST {PATH} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(CHAT)}\r\n\r\n"
    ).encode() + CHAT
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    async with trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1", https_compatible=True) as s:
        buf = b""
        while trio.current_time() < deadline:
            await s.send_all(request)
            while (end := buf.find(b"\r\n\r\n")) < 0:
                chunk = await s.receive_some(65536)
                if not chunk:
                    failed.append("closed")
                    return
                buf += chunk
            head = buf[:end].lower()
            if not head.startswith(b"http/1.1 200 "):
                failed.append(head[:40].decode(errors="replace"))
                return
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            while len(buf) < end + 4 + length:
                buf += await s.receive_some(65536)
            buf = buf[end + 4 + length :]
            done[0] += 1


def closed_loop(
    port: int, pid: int, ctx: ssl.SSLContext, connections: int, seconds: float
) -> dict[str, Any]:
    done, failed = [0], []  # type: ignore[var-annotated]

    async def run() -> float:
        started = trio.current_time()
        with trio.fail_after(seconds + 30):
            async with trio.open_nursery() as nursery:
                for _ in range(connections):
                    nursery.start_soon(_client, port, ctx, started + seconds, done, failed)
        return trio.current_time() - started

    before = cpu_seconds(pid)
    elapsed = trio.run(run)
    used = cpu_seconds(pid) - before
    assert not failed and done[0], (port, failed[:3])
    return {"requests": done[0], "rps": done[0] / elapsed, "cpu_us_per_req": used / done[0] * 1e6}


def gateway_env(mock_port: int, target: str, cert: Path, key: Path) -> dict[str, str]:
    env = {
        "OPENAI_API_URL": f"http://127.0.0.1:{mock_port}/v1",
        "OPENAI_API_KEY": "bench-key",
        "LOG_LEVEL": "WARNING",
        "EDGEGW_WORKERS": "1",
        "SERVER_TLS_CERT_PATH": str(cert),
        "SERVER_TLS_KEY_PATH": str(key),
    }
    if target == "hypercorn":
        env["SERVER_HTTP2_ENABLED"] = "true"
    return env


def measure(ns: argparse.Namespace) -> dict[str, Any]:
    os.sched_setaffinity(0, {CORE_A})
    quiet = wait_quiet()
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    ctx.set_alpn_protocols(["http/1.1"])
    ports = {name: free_port() for name in TARGETS}
    mock_port = free_port()
    pids: dict[str, int] = {}
    with ExitStack() as stack:
        where = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        cert, key = where / "cert.pem", where / "key.pem"
        cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        key.write_bytes(leaf.private_key_pem.bytes())
        stack.enter_context(process(mock_args(mock_port), CORE_A, port=mock_port))
        for name in TARGETS:
            gw = stack.enter_context(
                process(
                    ["-m", "edgegw", "serve", "--port", str(ports[name])],
                    CORE_B,
                    gateway_env(mock_port, name, cert, key),
                    port=ports[name],
                )
            )
            pids[name] = gw.pid
        for name in TARGETS:  # warm-up
            closed_loop(ports[name], pids[name], ctx, ns.connections, 2)
        cells: dict[str, list[dict[str, Any]]] = {name: [] for name in TARGETS}
        for round_ in range(ns.rounds):
            order = list(TARGETS)
            random.shuffle(order)
            for name in order:
                with Others(list(pids.values())) as others:
                    cell = closed_loop(ports[name], pids[name], ctx, ns.connections, ns.seconds)
                cell["others_cores"] = others.cores
                cells[name].append(cell)
                print(
                    f"round {round_ + 1} {name:10s} {cell['rps']:7.0f} req/s "
                    f"{cell['cpu_us_per_req']:6.0f} µs CPU/req (others {others.cores:.2f} cores)",
                    flush=True,
                )
    out: dict[str, Any] = {"quiet": quiet, "cells": cells}
    for name in TARGETS:
        for k in ("rps", "cpu_us_per_req"):
            values = [c[k] for c in cells[name]]
            out[f"{name}_{k}"] = statistics.median(values)
            out[f"{name}_{k}_range"] = [min(values), max(values)]
    out["edgegw_vs_hypercorn_rps"] = out["edgegw_rps"] / out["hypercorn_rps"]
    out["hypercorn_vs_edgegw_cpu"] = out["hypercorn_cpu_us_per_req"] / out["edgegw_cpu_us_per_req"]
    print()
    for name in TARGETS:
        print(
            f"{name:10s} median {out[f'{name}_rps']:7.0f} req/s "
            f"(range {out[f'{name}_rps_range'][0]:.0f}-{out[f'{name}_rps_range'][1]:.0f}), "
            f"{out[f'{name}_cpu_us_per_req']:6.0f} µs CPU/req "
            f"(range {out[f'{name}_cpu_us_per_req_range'][0]:.0f}-"
            f"{out[f'{name}_cpu_us_per_req_range'][1]:.0f})"
        )
    print(
        f"HTTPS: edgegw.http1 / Hypercorn = {out['edgegw_vs_hypercorn_rps']:.2f}x req/s, "
        f"{out['hypercorn_vs_edgegw_cpu']:.2f}x less CPU per request"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.https")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6, help="per cell")
    parser.add_argument("--connections", type=int, default=16)
    ns = parser.parse_args()
    from bench.__main__ import machine

    results: dict[str, Any] = {
        "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "args": vars(ns),
    }
    results["https"] = measure(ns)
    results["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"https-{results['when'].replace(':', '')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
