"""`python -m bench streaming`: SSE relay through edgegw vs the mock direct.

(a) Unpaced mock (token rate 0), 256 concurrent streams of 50 content chunks (53 SSE events
    with the role chunk, the finish chunk and [DONE]), closed loop: SSE events per second
    received through the gateway, direct, and from the bare Hypercorn-Trio app streaming the
    same shape canned (the server stack's ceiling). Gateway on core 1, mock and load
    generator on core 0.
(b) Paced mock (``--token-rate``, default 20 then 50 tokens/s: 50 and 20 ms between content
    chunks): the gap between consecutive content events per stream, gateway minus direct
    (p50/p99), at 1 and at 256 concurrent streams, and a buffering check: a stream whose k-th
    content event arrives more than two intervals ahead of ``(k - 1) * interval`` after its
    first, or a share of gaps under a quarter interval above the direct figure, means the relay
    bunched events. At 50 tokens/s, 256 streams are 12,800 events/s: more than the mock and the
    load generator can produce and consume on their one core (the direct run itself falls
    behind), so the first rate, 20 tokens/s (5,120 events/s), is the one for the added gap;
    the second shows the relay at its limit.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
from itertools import pairwise

from bench.harness import (
    CHAT,
    CHAT_DIRECT,
    CORE_A,
    CORE_B,
    PATH,
    CoreMeter,
    Run,
    cell,
    free_port,
    gateway,
    load,
    mock_args,
    process,
    streaming,
    wait_quiet,
)

TOKENS = 50


def _median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


class Pacing:
    """What the streams' content events show (the load generator's ``on_stream`` hook): the
    fewest per stream and, given the mock's ``interval_s``, the gaps between consecutive ones
    (kept exactly: the added gap is a fraction of a millisecond on a 50 ms pace) and the
    streams whose k-th content event came more than two intervals ahead of
    ``(k - 1) * interval_s`` after their first (a relay that buffers, then flushes a burst)."""

    def __init__(self, interval_s: float | None = None) -> None:
        self.interval_s = interval_s
        self.fewest: int | None = None
        self.gaps_s: list[float] = []
        self.ahead_of_schedule = 0

    def __call__(self, times: list[float]) -> None:
        self.fewest = len(times) if self.fewest is None else min(self.fewest, len(times))
        if self.interval_s is None or len(times) < 2:
            return
        self.gaps_s.extend(b - a for a, b in pairwise(times))
        step, first = self.interval_s, times[0]
        if any(t - first < (k - 2) * step for k, t in enumerate(times)):
            self.ahead_of_schedule += 1

    def gap_ms(self, q: float) -> float:
        if not self.gaps_s:
            return float("nan")
        ordered = sorted(self.gaps_s)
        return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))] * 1000


def _streams(port: int, body: bytes, conns: int, seconds: float, max_streams: int, **kw) -> Run:
    body = streaming(body).replace(b'"max_tokens":16', b'"max_tokens":%d' % TOKENS)
    return load(port, body, PATH, conns, seconds, max_streams, stream=True, **kw)


def cmd_streaming(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_A})
    out: dict = {"tokens": TOKENS, "connections": ns.connections}
    out["quiet_unpaced"] = wait_quiet()
    out["unpaced"] = _unpaced(ns)
    out["paced"] = {}
    for rate in ns.token_rate:
        out[f"quiet_paced_{rate:g}"] = wait_quiet()
        out["paced"][f"r{rate:g}"] = _paced(ns, rate)
    u, p = out["unpaced"], out["paced"][f"r{ns.token_rate[0]:g}"]
    big = f"c{ns.connections}"
    out["summary"] = {
        "gw_events_per_s": u["edgegw"]["events_per_s"],
        "direct_events_per_s": u["mock_direct"]["events_per_s"],
        "bare_events_per_s": u["bare_hypercorn"]["events_per_s"],
        "gw_vs_bare_events": u["edgegw"]["events_per_s"] / u["bare_hypercorn"]["events_per_s"],
        "gw_cpu_us_per_event": u["edgegw"]["cpu_us_per_event"],
        "bare_cpu_us_per_event": u["bare_hypercorn"]["cpu_us_per_event"],
        "paced_token_rate": ns.token_rate[0],
        **{f"{c}_added_gap_p50_ms": p[c]["added_gap_p50_ms"] for c in ("c1", big)},
        **{f"{c}_added_gap_p99_ms": p[c]["added_gap_p99_ms"] for c in ("c1", big)},
        **{
            f"r{rate:g}_{c}_buffering_ok": out["paced"][f"r{rate:g}"][c]["buffering_ok"]
            for rate in ns.token_rate
            for c in ("c1", big)
        },
    }
    return out


def _unpaced(ns: argparse.Namespace) -> dict:
    mock_port, gw_port, bare_port = free_port(), free_port(), free_port()
    rows: dict[str, dict[str, list[float]]] = {}
    bare_args = ["-m", "bench.bare_app", "--port", str(bare_port), "--tokens", str(TOKENS)]
    with (
        process(mock_args(mock_port, TOKENS), CORE_A, port=mock_port) as mock,
        gateway(gw_port, mock_port, CORE_B) as gw,
        process(bare_args, CORE_B, port=bare_port) as bare_proc,
    ):
        targets = {
            "mock_direct": (mock_port, CHAT_DIRECT, mock.pid),
            "bare_hypercorn": (bare_port, CHAT, bare_proc.pid),
            "edgegw": (gw_port, CHAT, gw.pid),
        }
        every = [mock.pid, gw.pid, bare_proc.pid]
        for port, body, _ in targets.values():
            _streams(port, body, ns.connections, 2, 100_000)
        for rnd in range(ns.rounds):
            order = list(targets.items())
            random.shuffle(order)
            for name, (port, body, pid) in order:
                cells, others, tries = cell(
                    lambda port=port, body=body, pid=pid: _unpaced_cell(ns, port, body, pid), every
                )
                cells["others_cores"], cells["attempts"] = others, tries
                for k, v in cells.items():
                    rows.setdefault(name, {}).setdefault(k, []).append(v)
            print(
                f"  unpaced round {rnd + 1}: "
                + ", ".join(
                    f"{n} {rows[n]['events_per_s'][-1]:.0f} events/s ({rows[n]['errors'][-1]:.0f} err)"
                    for n in targets
                )
            )
    out: dict = {"rounds": rows}
    for name, r in rows.items():
        out[name] = {k: _median(v) for k, v in r.items() if k != "error_kinds"}
        out[name]["events_per_s_runs"] = r["events_per_s"]
        out[name]["errors_total"] = sum(r["errors"])
    return out


def _unpaced_cell(ns: argparse.Namespace, port: int, body: bytes, pid: int) -> dict:
    shape = Pacing()
    with CoreMeter() as meter:
        r = _streams(
            port, body, ns.connections, ns.seconds, 1_000_000, skip_s=ns.skip, pid=pid,
            on_stream=shape,
        )  # fmt: skip
    events = r.stats.events
    cells: dict = {
        "events_per_s": r.events_per_s,
        "streams_per_s": r.ok / r.elapsed_s if r.elapsed_s else 0.0,
        "streams": r.ok,
        "events": events,
        "errors": r.errors,
        "content_events_min": shape.fewest or 0,
        "ttft_p50_ms": r.ttft_ms(50),
        "ttft_p99_ms": r.ttft_ms(99),
        "stream_p50_ms": r.percentile_ms(50),
        "cpu_us_per_event": r.server_cpu_s / max(1, events) * 1e6,
        "loadgen_cpu_us_per_event": r.client_cpu_s / max(1, events) * 1e6,
        "server_busy": r.server_cpu_s / r.elapsed_s if r.elapsed_s else float("nan"),
        "core1_busy": meter.busy.get(f"cpu{CORE_B}", float("nan")),
    }
    if r.errors:
        cells["error_kinds"] = r.error_kinds
    return cells


def _paced_cell(port, body, conns, seconds, max_streams, interval, gw_pid) -> dict:
    pacing = Pacing(interval)
    with CoreMeter() as meter:
        r = _streams(port, body, conns, seconds, max_streams, pid=gw_pid, on_stream=pacing)
    gaps = pacing.gaps_s
    return {
        "gap_p50_ms": pacing.gap_ms(50),
        "gap_p99_ms": pacing.gap_ms(99),
        "gap_max_ms": max(gaps, default=0.0) * 1000,
        "short_gap_share": sum(g < interval / 4 for g in gaps) / max(1, len(gaps)),
        "ahead_of_schedule": pacing.ahead_of_schedule,
        "streams": r.ok,
        "errors": r.errors,
        "ttft_p50_ms": r.ttft_ms(50),
        "gw_busy": r.server_cpu_s / r.elapsed_s if r.elapsed_s else float("nan"),
        "core0_busy": meter.busy.get(f"cpu{CORE_A}", float("nan")),
        "core1_busy": meter.busy.get(f"cpu{CORE_B}", float("nan")),
    }


def _paced(ns: argparse.Namespace, rate: float) -> dict:
    interval = 1.0 / rate
    mock_port, gw_port = free_port(), free_port()
    out: dict = {"token_rate": rate, "interval_ms": interval * 1000}
    with (
        process(mock_args(mock_port, TOKENS, rate), CORE_A, port=mock_port) as mock,
        gateway(gw_port, mock_port, CORE_B) as gw,
    ):
        every = [mock.pid, gw.pid]
        targets = {"mock_direct": (mock_port, CHAT_DIRECT), "edgegw": (gw_port, CHAT)}
        for port, body in targets.values():
            _streams(port, body, 16, 1.5, 64)
        for conns, seconds, max_streams in (
            (1, 30, ns.c1_streams),
            (ns.connections, ns.paced_seconds, 1_000_000),
        ):
            rows: dict[str, dict[str, list[float]]] = {}
            for rnd in range(ns.rounds):
                order = list(targets.items())
                random.shuffle(order)
                for name, (port, body) in order:
                    cells, others, tries = cell(
                        lambda port=port, body=body, conns=conns, seconds=seconds, ms=max_streams: (
                            _paced_cell(port, body, conns, seconds, ms, interval, gw.pid)
                        ),
                        every,
                    )
                    cells["others_cores"], cells["attempts"] = others, tries
                    for k, v in cells.items():
                        rows.setdefault(name, {}).setdefault(k, []).append(v)
                print(
                    f"  paced {rate:g}/s c={conns} round {rnd + 1}: "
                    + ", ".join(
                        f"{n} gap p50 {rows[n]['gap_p50_ms'][-1]:.2f} p99 {rows[n]['gap_p99_ms'][-1]:.2f} ms, "
                        f"short {rows[n]['short_gap_share'][-1] * 100:.1f} %, ahead {rows[n]['ahead_of_schedule'][-1]:.0f}"
                        for n in targets
                    )
                )
            res: dict = {"rounds": rows}
            for name, r in rows.items():
                res[name] = {k: _median(v) for k, v in r.items()}
            d, g = rows["mock_direct"], rows["edgegw"]
            for k in ("gap_p50_ms", "gap_p99_ms"):
                res[f"added_{k}"] = _median([a - b for a, b in zip(g[k], d[k], strict=True)])
            res["buffering_ok"] = bool(
                sum(g["ahead_of_schedule"]) <= sum(d["ahead_of_schedule"])
                and res["edgegw"]["short_gap_share"] <= res["mock_direct"]["short_gap_share"] + 0.01
            )
            out[f"c{conns}"] = res
    return out


def print_streaming(out: dict) -> None:
    u = out["unpaced"]
    print(
        f"\nunpaced, {out['connections']} streams x {out['tokens']} chunks (53 SSE events each), medians:"
    )
    for name in ("mock_direct", "bare_hypercorn", "edgegw"):
        m = u[name]
        print(
            f"  {name:15s} {m['events_per_s']:8.0f} events/s (runs {', '.join(f'{x:.0f}' for x in m['events_per_s_runs'])}), "
            f"{m['streams_per_s']:.0f} streams/s, server CPU {m['cpu_us_per_event']:.1f} µs/event "
            f"(busy {m['server_busy'] * 100:.0f} %), errors {m['errors_total']:.0f}"
        )
    for p in out["paced"].values():
        for key in (k for k in p if k.startswith("c")):
            c = p[key]
            print(
                f"paced {p['interval_ms']:.0f} ms, {key}: gap p50 direct "
                f"{c['mock_direct']['gap_p50_ms']:.2f} / gw {c['edgegw']['gap_p50_ms']:.2f} ms "
                f"(added {c['added_gap_p50_ms']:+.3f}); p99 direct {c['mock_direct']['gap_p99_ms']:.2f}"
                f" / gw {c['edgegw']['gap_p99_ms']:.2f} ms (added {c['added_gap_p99_ms']:+.3f}); "
                f"gw core busy {c['edgegw']['gw_busy'] * 100:.0f} %, mock+loadgen core "
                f"{c['mock_direct']['core0_busy'] * 100:.0f} % (direct); buffering ok: {c['buffering_ok']}"
            )
