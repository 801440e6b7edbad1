"""`python -m bench memory`: resident memory of edgegw (and of the bare Hypercorn-Trio app),
summed over the process tree from /proc.

In this order (the allocator keeps what 2,000 connections took after they close, so the
connection test comes last):

- idle: after start, before any request;
- under load: peak during a 128-connection closed-loop run (sampled every 0.1 s);
- soak (edgegw): a fixed closed-loop load (32 connections) for exactly ``--soak-seconds``
  (default 180), RSS every 10 s; growth is the least-squares slope over the samples of the
  last 2 minutes, in MiB/min;
- per idle keep-alive connection: after a warm-up at the same concurrency (so the upstream pool
  is already full), open 2,000 keep-alive connections, 50 at a time, one request each, hold
  them idle; (RSS with them - RSS before) / 2,000, with the server's open descriptors as a
  check that they are all still open, and the marginal figure between 1,000 and 2,000.

The open-file limit is raised to its hard limit here and, through ``preexec_fn``, in the servers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import trio

from bench.harness import (
    CHAT,
    CORE_A,
    CORE_B,
    PATH,
    MiB,
    RssSampler,
    bare,
    fd_count,
    free_port,
    gateway,
    load,
    loadavg,
    mock_args,
    post,
    process,
    raise_nofile,
    rss_bytes,
    wait_quiet,
)
from edgegw._core import UpstreamProtocolError
from edgegw.bench.loadgen import send_one


def _slope_mib_per_min(samples: list[tuple[float, int]], from_s: float) -> float:
    pts = [(t, r / MiB) for t, r in samples if t >= from_s]
    if len(pts) < 2:
        return float("nan")
    mt = statistics.fmean(t for t, _ in pts)
    mr = statistics.fmean(r for _, r in pts)
    num = sum((t - mt) * (r - mr) for t, r in pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    return num / den * 60 if den else float("nan")


async def hold_idle(
    port: int, request: bytes, n: int, batch: int, measure, hold_s: float = 2.0
) -> dict:
    """Open ``n`` keep-alive connections, ``batch`` at a time, send one request on each and read
    the answer, then keep them all open and idle; call ``measure(open_count)`` at n/2 and at n
    (after ``hold_s``), close them all. Returns what ``measure`` returned, keyed by count."""
    streams: list[trio.SocketStream] = []
    errors = 0
    out: dict = {}

    async def one() -> None:
        nonlocal errors
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            streams.append(stream)
            status, reusable = await send_one(stream, request)
            if status != 200 or not reusable:
                errors += 1
        except (OSError, trio.BrokenResourceError, UpstreamProtocolError):
            errors += 1

    try:
        with trio.fail_after(120):
            for target in (n // 2, n):
                while len(streams) < target:
                    async with trio.open_nursery() as nursery:
                        for _ in range(min(batch, target - len(streams))):
                            nursery.start_soon(one)
                await trio.sleep(hold_s)
                out[target] = measure(len(streams))
    finally:
        for stream in streams:
            await stream.aclose()
    out["errors"] = errors
    return out


def _idle_and_load(name: str, pid: int, port: int, ns: argparse.Namespace) -> dict:
    out: dict = {}
    time.sleep(2)
    out["rss_idle_mib"] = rss_bytes(pid) / MiB
    out["fds_idle"] = fd_count(pid)
    with RssSampler(pid, 0.1) as rss:
        r = load(port, CHAT, PATH, 128, ns.load_seconds, 10_000_000)
    out["rss_peak_128_mib"] = rss.peak / MiB
    out["load_128_rps"] = r.rps
    out["load_128_errors"] = r.errors
    time.sleep(1)
    out["rss_after_load_mib"] = rss_bytes(pid) / MiB
    print(
        f"  {name}: idle {out['rss_idle_mib']:.1f} MiB; peak under 128 connections "
        f"{out['rss_peak_128_mib']:.1f} MiB ({r.rps:.0f} req/s, {r.errors} errors); after "
        f"{out['rss_after_load_mib']:.1f} MiB"
    )
    return out


def _per_connection(name: str, pid: int, port: int, ns: argparse.Namespace) -> dict:
    out: dict = {}
    load(port, CHAT, PATH, ns.batch, 2, 100_000)  # the upstream pool at this concurrency
    time.sleep(1)
    base, base_fds = rss_bytes(pid), fd_count(pid)
    out["rss_before_conns_mib"] = base / MiB

    def measure(open_count: int) -> dict:
        return {"open": open_count, "rss": rss_bytes(pid), "fds": fd_count(pid)}

    held = trio.run(lambda: hold_idle(port, post(port, PATH, CHAT), ns.conns, ns.batch, measure))
    half, full = held[ns.conns // 2], held[ns.conns]
    out["idle_conns"] = ns.conns
    out["idle_conn_errors"] = held["errors"]
    out["server_fds_added"] = full["fds"] - base_fds
    out["rss_with_conns_mib"] = full["rss"] / MiB
    out["kib_per_idle_conn"] = (full["rss"] - base) / ns.conns / 1024
    out["kib_per_idle_conn_marginal"] = (
        (full["rss"] - half["rss"]) / (ns.conns - ns.conns // 2) / 1024
    )
    time.sleep(1)
    out["rss_after_close_mib"] = rss_bytes(pid) / MiB
    print(
        f"  {name}: {ns.conns} idle keep-alive connections (+{out['server_fds_added']} server "
        f"fds, {held['errors']} errors): {out['kib_per_idle_conn']:.1f} KiB each "
        f"({out['kib_per_idle_conn_marginal']:.1f} marginal); RSS {base / MiB:.1f} -> "
        f"{out['rss_with_conns_mib']:.1f} MiB, {out['rss_after_close_mib']:.1f} after closing"
    )
    return out


def _soak(name: str, pid: int, port: int, ns: argparse.Namespace) -> dict:
    la = loadavg()
    with RssSampler(pid, 10.0) as rss:
        r = load(port, CHAT, PATH, ns.soak_connections, ns.soak_seconds, 100_000_000)
    samples = [(round(t, 1), round(b / MiB, 2)) for t, b in rss.samples]
    out = {
        "seconds": ns.soak_seconds,
        "connections": ns.soak_connections,
        "requests": r.requests,
        "rps": r.rps,
        "errors": r.errors,
        "loadavg_before": la,
        "samples_mib": samples,
        "growth_mib_per_min_last_2min": _slope_mib_per_min(rss.samples, ns.soak_seconds - 120),
        "rss_at_60s_mib": next((b for t, b in samples if t >= 60), float("nan")),
        "rss_end_mib": samples[-1][1],
        "rss_peak_mib": max(b for _, b in samples),
    }
    print(
        f"  {name} soak {ns.soak_seconds:.0f} s at {ns.soak_connections} connections: {r.requests} requests "
        f"({r.rps:.0f}/s, {r.errors} errors); RSS {samples[0][1]:.1f} -> {samples[-1][1]:.1f} MiB; "
        f"growth over the last 2 min {out['growth_mib_per_min_last_2min']:+.3f} MiB/min"
    )
    return out


def cmd_memory(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_A})
    nofile = raise_nofile()
    if nofile < ns.conns + 200:
        raise SystemExit(f"open-file limit {nofile} is too low for {ns.conns} connections")
    out: dict = {"nofile": nofile, "quiet": wait_quiet()}
    mock_port, gw_port, bare_port = free_port(), free_port(), free_port()
    with process(mock_args(mock_port), CORE_A, port=mock_port):
        with gateway(gw_port, mock_port, CORE_B) as gw:
            out["edgegw"] = _idle_and_load("edgegw", gw.pid, gw_port, ns)
            out["edgegw"]["soak"] = _soak("edgegw", gw.pid, gw_port, ns)
            out["edgegw"].update(_per_connection("edgegw", gw.pid, gw_port, ns))
        out["quiet_bare"] = wait_quiet()
        with bare(bare_port, CORE_B) as b:
            out["bare_hypercorn"] = _idle_and_load("bare_hypercorn", b.pid, bare_port, ns)
            if ns.soak_bare:
                out["bare_hypercorn"]["soak"] = _soak("bare_hypercorn", b.pid, bare_port, ns)
            out["bare_hypercorn"].update(_per_connection("bare_hypercorn", b.pid, bare_port, ns))
    return out
