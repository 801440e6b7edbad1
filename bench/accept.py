"""`python -m bench accept`: how `--workers 2` spreads connections and work, with one shared
listening socket (what edgegw.supervisor does) or one SO_REUSEPORT socket per worker.

Both layouts start two `edgegw serve --worker-fd FD` processes, worker i pinned to core i; the
load generator floats. For each layout, in a new random order each round:

- **spread of connections**: open ``--conns`` keep-alive connections, ``--batch`` at a time,
  one GET /health each, then count each worker's sockets in /proc/<pid>/fd (minus its count
  before): the share the busier worker took (0.5 is perfect);
- **spread of work**: ``--seconds`` of closed-loop GET /health on ``--connections``
  connections; req/s, and each worker's share of the CPU both used (from /proc).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager

import trio

from bench.harness import (
    ROOT,
    _child_setup,
    cpu_seconds,
    fd_count,
    free_port,
    loadavg,
    raise_nofile,
    wait_port,
)
from edgegw.bench.loadgen import Load, LoadSpec, send_one
from edgegw.http1.limits import LISTEN_BACKLOG

ENV = {"LOG_LEVEL": "WARNING", "OPENAI_API_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "x"}


def _listener(port: int, reuseport: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


@contextmanager
def workers(port: int, reuseport: bool):
    """Two workers on `port`: one socket both inherit, or one SO_REUSEPORT socket each."""
    shared = None if reuseport else _listener(port, False)
    procs = []
    try:
        for cpu in (0, 1):
            sock = _listener(port, True) if reuseport else shared
            assert sock is not None
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "edgegw", "serve", "--worker-fd", str(sock.fileno())],
                    cwd=ROOT,
                    env={**os.environ, **ENV},
                    pass_fds=(sock.fileno(),),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    preexec_fn=_child_setup(cpu),
                )
            )
            if reuseport:
                sock.close()  # the worker holds its own copy
        if shared is not None:
            shared.close()  # as the supervisor would keep it; the workers hold it here
        wait_port(port)
        time.sleep(1.0)
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def _hold(port: int, conns: int, batch: int, pids: list[int]) -> list[int]:
    request = f"GET /health HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode()
    before = [fd_count(p) for p in pids]
    streams: list[trio.SocketStream] = []

    async def one() -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        streams.append(stream)
        await send_one(stream, request)

    try:
        with trio.fail_after(120):
            while len(streams) < conns:
                async with trio.open_nursery() as nursery:
                    for _ in range(min(batch, conns - len(streams))):
                        nursery.start_soon(one)
            await trio.sleep(0.5)
            return [fd_count(p) - b for p, b in zip(pids, before, strict=True)]
    finally:
        for stream in streams:
            await stream.aclose()


def _get_load(port: int, connections: int, seconds: float) -> Load:
    """A closed loop of GET /health (the connection layer's cheapest exchange)."""
    spec = LoadSpec(
        address="127.0.0.1", port=port,
        request=f"GET /health HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode(),
        stream=False, connections=connections, rate=None, duration_s=seconds, warmup_s=0.5,
        max_requests=10_000_000, timeout_s=30.0,
    )  # fmt: skip
    run = Load(spec)
    trio.run(run.run)
    return run


def _cell(layout: str, ns: argparse.Namespace) -> dict:
    port = free_port()
    with ExitStack() as stack:
        pids = stack.enter_context(workers(port, layout == "reuseport"))
        held = trio.run(_hold, port, ns.conns, ns.batch, pids)
        time.sleep(0.5)
        cpu0 = [cpu_seconds(p) for p in pids]
        r = _get_load(port, ns.connections, ns.seconds)
        cpu = [cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
    return {
        "conns_per_worker": held,
        "busier_conn_share": round(max(held) / max(1, sum(held)), 3),
        "rps": round(r.measured.requests / r.elapsed_s) if r.elapsed_s else 0,
        "errors": r.measured.error_count,
        "cpu_s_per_worker": [round(c, 2) for c in cpu],
        "busier_cpu_share": round(max(cpu) / sum(cpu), 3) if sum(cpu) else float("nan"),
        "loadavg": loadavg()[0],
    }


def cmd_accept(ns: argparse.Namespace) -> dict:
    raise_nofile()
    rows: dict[str, list[dict]] = {"shared": [], "reuseport": []}
    for rnd in range(ns.rounds):
        order = list(rows)
        random.shuffle(order)
        for layout in order:
            c = _cell(layout, ns)
            rows[layout].append(c)
            print(
                f"  round {rnd + 1} {layout:9s} (load {c['loadavg']:.2f}): connections "
                f"{c['conns_per_worker']} (busier {c['busier_conn_share']:.2f}); "
                f"{c['rps']} req/s, CPU s {c['cpu_s_per_worker']} (busier "
                f"{c['busier_cpu_share']:.2f}), errors {c['errors']}",
                flush=True,
            )
    out: dict = {"rounds": rows}
    for layout, cells in rows.items():
        out[layout] = {
            k: statistics.median(c[k] for c in cells)
            for k in ("busier_conn_share", "rps", "busier_cpu_share")
        }
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conns", type=int, default=400, help="idle connections for the spread")
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--connections", type=int, default=64, help="closed-loop load")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--rounds", type=int, default=3)
