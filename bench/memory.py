"""The scenario `memory`: edgegw's resident memory, summed over its process tree from /proc.

edgegw (one worker, core 1) in front of the Go mock (core 0; non-streaming answers at once,
streams paced like a model: 200 tokens at 30/s, the first after 250 ms, jitter 0.2). In this
order, since the allocator keeps what 2,000 connections took after they close:

- idle: after start, before any request;
- under load: the peak during a 128-connection closed loop (Go generator), sampled every 0.1 s;
- soak: ``--soak-streams`` paced streams kept in flight by the Go open-loop generator for
  ``--soak-seconds``, RSS and open descriptors every ``--sample-s``: the RSS of the first and
  the last tenth of the samples (flat means no growth), the least-squares slope over the
  second half, the streams completed and the errors;
- per idle keep-alive connection: after a warm-up at the batch's concurrency (so the upstream
  pool is full), open ``--conns`` keep-alive connections, ``--batch`` at a time, one request
  each, hold them idle: (RSS with them - RSS before) / count, the server's added descriptors as
  a check that all are open, and the marginal figure over the second half.
"""

from __future__ import annotations

import argparse
import os
import time

import trio

from bench import gopeer
from bench.harness import (
    CHAT,
    CORE_A,
    CORE_B,
    PATH,
    MiB,
    Result,
    RssSampler,
    body_file,
    edgegw,
    fd_count,
    free_port,
    generate,
    go_mock,
    median,
    raise_nofile,
    rss_bytes,
    scratch_dir,
    streaming,
    wait_quiet,
)
from edgegw._core import UpstreamProtocolError
from edgegw.bench.loadgen import send_one


def _post(port: int) -> bytes:
    return (
        f"POST {PATH} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(CHAT)}\r\n\r\n"
    ).encode() + CHAT


async def _hold_idle(port: int, n: int, batch: int, pid: int) -> Result:
    """Open ``n`` keep-alive connections, ``batch`` at a time, one request answered on each,
    then hold them idle; the server's RSS and descriptors at n/2 and at n open."""
    streams: list[trio.SocketStream] = []
    errors = 0
    at: dict[int, tuple[int, int]] = {}
    request = _post(port)

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
                await trio.sleep(1.0)
                at[target] = (rss_bytes(pid), fd_count(pid))
    finally:
        for stream in streams:
            await stream.aclose()
    return {"at": at, "errors": errors}


def _slope_mib_per_min(samples: list[tuple[float, float]]) -> float | None:
    if len(samples) < 2:
        return None
    mt = sum(t for t, _ in samples) / len(samples)
    mr = sum(r for _, r in samples) / len(samples)
    den = sum((t - mt) ** 2 for t, _ in samples)
    num = sum((t - mt) * (r - mr) for t, r in samples)
    return round(num / den * 60, 3) if den else None


def run(ns: argparse.Namespace) -> Result:
    os.sched_setaffinity(0, {CORE_A})
    nofile = raise_nofile()
    if nofile < ns.conns + 200:
        raise SystemExit(f"open-file limit {nofile} is too low for {ns.conns} connections")
    binary = gopeer.build()
    work = scratch_dir()
    stream_s = ns.first_token_ms / 1000 + ns.tokens / ns.token_rate
    out: Result = {"quiet": wait_quiet(max_wait_s=ns.max_wait)}
    mock_port, port = free_port(), free_port()
    pacing = ["--tokens", str(ns.tokens), "--token-rate", str(ns.token_rate), "--first-token-ms",
              str(ns.first_token_ms), "--jitter", str(ns.jitter), "--stamp"]  # fmt: skip
    with go_mock(binary, mock_port, *pacing), edgegw(port, mock_port, CORE_B) as gw:
        pid = gw.pid
        time.sleep(1)
        out["rss_idle_mib"] = round(rss_bytes(pid) / MiB, 1)
        out["fds_idle"] = fd_count(pid)

        chat = body_file(work, "chat", CHAT)
        with RssSampler(pid, 0.1) as rss:
            r = generate(binary, ["load", "--port", str(port), "--body-file", chat,
                                  "--connections", "128", "--seconds", str(ns.load_seconds),
                                  "--warmup-s", "0"], pid)  # fmt: skip
        out["load_128"] = {"rps": r["rps"], "errors": r["errors"],
                           "rss_peak_mib": round(rss.peak / MiB, 1)}  # fmt: skip
        print(f"  idle {out['rss_idle_mib']} MiB; peak under 128 connections "
              f"{out['load_128']['rss_peak_mib']} MiB ({r['rps']:.0f} req/s)", flush=True)  # fmt: skip

        body = body_file(work, "stream", streaming(CHAT, ns.tokens))
        with RssSampler(pid, ns.sample_s) as rss:
            s = generate(binary, ["streams", "--port", str(port), "--body-file", body,
                                  "--streams", str(ns.soak_streams), "--seconds",
                                  str(ns.soak_seconds), "--warmup-s", f"{stream_s:.3f}",
                                  "--stream-s", f"{stream_s:.3f}"], pid)  # fmt: skip
        mib = [(t, b / MiB) for t, b in rss.samples]
        tenth = max(1, len(mib) // 10)
        out["soak"] = {
            "streams": ns.soak_streams,
            "seconds": ns.soak_seconds,
            "completed": s["requests"]["ok"],
            "errors": s["requests"]["errors"],
            "in_flight_mean": s["in_flight"]["mean"],
            "rss_first_tenth_mib": median(r for _, r in mib[:tenth]),
            "rss_last_tenth_mib": median(r for _, r in mib[-tenth:]),
            "rss_max_mib": round(max(r for _, r in mib), 1),
            "growth_mib_per_min_second_half": _slope_mib_per_min(mib[len(mib) // 2 :]),
            "fds_max": fd_count(pid),
        }
        print(f"  soak: {out['soak']}", flush=True)

        warm = ["load", "--port", str(port), "--body-file", chat, "--connections",
                str(ns.batch), "--seconds", "1", "--warmup-s", "0"]  # fmt: skip
        generate(binary, warm)  # the upstream pool at this concurrency
        time.sleep(1)
        base, base_fds = rss_bytes(pid), fd_count(pid)
        held = trio.run(_hold_idle, port, ns.conns, ns.batch, pid)
        (half, _), (full, full_fds) = held["at"][ns.conns // 2], held["at"][ns.conns]
        out.update(
            idle_conns=ns.conns,
            idle_conn_errors=held["errors"],
            server_fds_added=full_fds - base_fds,
            kib_per_idle_conn=round((full - base) / ns.conns / 1024, 2),
            kib_per_idle_conn_marginal=round((full - half) / (ns.conns - ns.conns // 2) / 1024, 2),
        )
        print(f"  {ns.conns} idle keep-alive connections: {out['kib_per_idle_conn']} KiB each "
              f"({out['kib_per_idle_conn_marginal']} marginal), {held['errors']} errors")  # fmt: skip
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conns", type=int, default=2000, help="idle keep-alive connections")
    p.add_argument("--batch", type=int, default=50, help="connections opened at once")
    p.add_argument("--load-seconds", type=float, default=8)
    p.add_argument("--soak-streams", type=int, default=1000)
    p.add_argument("--soak-seconds", type=float, default=600)
    p.add_argument("--sample-s", type=float, default=10)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--token-rate", type=float, default=30.0)
    p.add_argument("--first-token-ms", type=float, default=250.0)
    p.add_argument("--jitter", type=float, default=0.2)
    p.add_argument("--max-wait", type=float, default=120, help="seconds to wait for quiet")


SMOKE = ["--conns", "40", "--batch", "10", "--load-seconds", "0.3", "--soak-streams", "8",
         "--soak-seconds", "0.5", "--sample-s", "0.1", "--tokens", "4", "--token-rate", "200",
         "--first-token-ms", "10", "--max-wait", "0"]  # fmt: skip
