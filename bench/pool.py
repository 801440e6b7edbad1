"""`python -m bench pool`: edgegw's upstream pool under many concurrent streams to one host.

The paced mock (``--tokens`` at ``--token-rate``, first token after ``--first-token-ms``) runs
pinned to core 0; the pool runs in this process on core 1, with no gateway in front: each of
``--streams`` tasks arrives within ``--spread`` seconds, sends one streaming chat request
through ``UpstreamPool.send`` and reads the stream to its end. Two waves back to back per
cell, so the second shows what the first left behind for reuse. Per wave: connections opened,
requests that reused a kept-alive connection, requests that queued at the cap, the most
connections open at once (sampled every 10 ms), time to first body byte (TTFB) and to the end,
errors. Cells (one per ``--caps`` value; 0 means no cap) in a new random order each round.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import trio

from bench.harness import CORE_A, CORE_B, free_port, loadavg, process, raise_nofile
from edgegw.errors import GatewayError
from edgegw.upstream import Origin, UpstreamPool

BODY = b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}],"stream":true}'
HEADERS = [(b"content-type", b"application/json"), (b"accept", b"text/event-stream")]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q / 100 * len(values)))]


async def _wave(pool: UpstreamPool, origin: Origin, streams: int, spread_s: float) -> dict:
    ttfb: list[float] = []
    total: list[float] = []
    errors: dict[str, int] = {}
    peak = 0
    before = (pool.connections_opened, pool.reused, pool.queued)
    start = trio.current_time()

    async def one(i: int) -> None:
        due = start + spread_s * i / streams
        await trio.sleep_until(due)
        try:
            resp = await pool.send(origin, b"POST", b"/v1/chat/completions", HEADERS, BODY)
            try:
                first = await resp.receive_chunk()
                ttfb.append(trio.current_time() - due)
                while first:
                    first = await resp.receive_chunk()
                total.append(trio.current_time() - due)
            finally:
                await resp.aclose()
        except GatewayError as e:
            errors[e.code] = errors.get(e.code, 0) + 1

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, pool.open_connections)
            await trio.sleep(0.01)

    async with trio.open_nursery() as outer:
        outer.start_soon(sample)
        async with trio.open_nursery() as nursery:
            for i in range(streams):
                nursery.start_soon(one, i)
        outer.cancel_scope.cancel()
    opened, reused, queued = (
        now - then
        for now, then in zip(
            (pool.connections_opened, pool.reused, pool.queued), before, strict=True
        )
    )
    return {
        "opened": opened,
        "reused": reused,
        "queued": queued,
        "peak_open": peak,
        "open_after": pool.open_connections,
        "idle_after": pool.idle_count(),
        "ttfb_p50_ms": round(_pct(ttfb, 50) * 1000, 2),
        "ttfb_p99_ms": round(_pct(ttfb, 99) * 1000, 2),
        "ttfb_max_ms": round(max(ttfb, default=float("nan")) * 1000, 2),
        "total_p50_s": round(_pct(total, 50), 3),
        "total_max_s": round(max(total, default=float("nan")), 3),
        "ok": len(total),
        "errors": errors,
    }


async def _cell(origin: Origin, cap: int, ns: argparse.Namespace) -> dict:
    pool = UpstreamPool(max_per_host=cap or 1_000_000, idle_per_host=ns.idle_per_host)
    try:
        with trio.fail_after(ns.timeout):
            waves = [await _wave(pool, origin, ns.streams, ns.spread) for _ in range(2)]
    finally:
        await pool.aclose()
    return {"cap": cap, "waves": waves, "loadavg": loadavg()[0]}


def cmd_pool(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_B})
    raise_nofile()
    mock_port = free_port()
    args = [
        "-m", "edgegw.mock", "--port", str(mock_port), "--tokens", str(ns.tokens),
        "--token-rate", str(ns.token_rate), "--first-token-ms", str(ns.first_token_ms),
    ]  # fmt: skip
    origin = Origin.from_url(f"http://127.0.0.1:{mock_port}/v1")
    rows: dict[int, list[dict]] = {cap: [] for cap in ns.caps}
    with process(args, CORE_A, port=mock_port):
        t0 = time.monotonic()
        for rnd in range(ns.rounds):
            order = list(ns.caps)
            random.shuffle(order)
            for cap in order:
                r = trio.run(_cell, origin, cap, ns)
                rows[cap].append(r)
                w1, w2 = r["waves"]
                print(
                    f"  round {rnd + 1} cap {cap or 'none'} (load {r['loadavg']:.2f}): "
                    f"wave 1 opened {w1['opened']} peak {w1['peak_open']} queued {w1['queued']} "
                    f"TTFB p50/p99 {w1['ttfb_p50_ms']}/{w1['ttfb_p99_ms']} ms, errors {w1['errors']}; "
                    f"wave 2 opened {w2['opened']} reused {w2['reused']} queued {w2['queued']} "
                    f"TTFB p50/p99 {w2['ttfb_p50_ms']}/{w2['ttfb_p99_ms']} ms, errors {w2['errors']}",
                    flush=True,
                )
    out: dict = {"elapsed_s": round(time.monotonic() - t0, 1), "cells": {}}
    for cap, cells in rows.items():
        summary: dict = {}
        for w in (0, 1):
            for key in ("opened", "reused", "queued", "peak_open", "ttfb_p50_ms", "ttfb_p99_ms"):
                summary[f"wave{w + 1}_{key}"] = statistics.median(c["waves"][w][key] for c in cells)
        out["cells"][str(cap)] = {"median": summary, "rounds": cells}
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--streams", type=int, default=2000, help="concurrent streams per wave")
    p.add_argument("--spread", type=float, default=1.0, help="arrivals over this many seconds")
    p.add_argument("--caps", type=int, nargs="+", default=[0, 1024, 256], help="0: no cap")
    p.add_argument("--idle-per-host", type=int, default=64)
    p.add_argument("--tokens", type=int, default=10)
    p.add_argument("--token-rate", type=float, default=5.0)
    p.add_argument("--first-token-ms", type=float, default=250.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="bound per cell, seconds")
