"""What tracing costs a proxied request: server CPU µs per request with tracing off, on
(spans exported to a collector on loopback), on with 10 % of traces sampled, off with the access log (LOG_LEVEL=INFO) and
against other code (`--base DIR`: a checkout of an earlier commit, run with this venv and
its Rust core), tracing off and on. Throughput layout of bench/README.md: the gateway alone on core 1, the mock, the
collector (a process of its own) and the load generator on core 0; rounds interleaved in
random order, medians.

Two loads: a closed loop of 32 connections (the server saturated), and with `--rate R` an
open loop of R requests a second for every configuration, below what any of them carries,
so that each is measured at the same load: a server that is not saturated handles fewer
requests per wake-up, so a closed loop that one configuration drives slower than another
charges it for that too.

    python -m bench.tracing [--rounds 5] [--seconds 6] [--rate 400] [--base /tmp/edgegw-base]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.harness import CHAT, CORE_A, CORE_B, free_port, load, loadavg, mock_args, process


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes every batch and keeps nothing."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _gateway(
    port: int,
    mock_port: int,
    sink_port: int,
    tracing: bool,
    base: str | None,
    level: str,
    extra: dict[str, str],
):
    env = {
        "OPENAI_API_URL": f"http://127.0.0.1:{mock_port}/v1",
        "OPENAI_API_KEY": "bench-key",
        "LOG_LEVEL": level,  # INFO: one access line per request (to /dev/null here)
        "EDGEGW_WORKERS": "1",
        "TELEMETRY_ENABLED": "true",
        "TELEMETRY_METRICS_PORT": "0",
        "TELEMETRY_TRACING_ENABLED": "true" if tracing else "false",
        "TELEMETRY_TRACING_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
        **extra,
    }
    if base is None:
        args = ["-m", "edgegw", "serve", "--port", str(port)]
    else:  # the code before tracing, first on sys.path
        args = [
            "-c",
            f"import sys; sys.path.insert(0, {base!r}); from edgegw.__main__ import main; "
            f"sys.exit(main(['serve', '--port', '{port}']))",
        ]
    return process(args, CORE_B, env, port)


def serve_sink(port: int) -> None:
    """The collector, in a process of its own (a thread beside the load generator would
    take the GIL from it)."""
    ThreadingHTTPServer(("127.0.0.1", port), _Sink).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rate", type=float, help="also an open loop of this many req/s")
    parser.add_argument("--base", help="a checkout of the code before tracing")
    ns = parser.parse_args()
    os.sched_setaffinity(0, {CORE_A})
    sink_port = free_port()
    sink_code = f"from bench.tracing import serve_sink; serve_sink({sink_port})"
    mock_port = free_port()
    ratio = {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}
    cells: dict[str, tuple[bool, str | None, str, dict[str, str]]] = {
        "tracing off": (False, None, "WARNING", {}),
        "tracing on": (True, None, "WARNING", {}),
        "on, 10 % sampled": (True, None, "WARNING", ratio),
        "off, access log": (False, None, "INFO", {}),
    }
    if ns.base:
        cells["base, off"] = (False, ns.base, "WARNING", {})
        cells["base, on"] = (True, ns.base, "WARNING", {})
    loads = ["closed"] + (["rate"] if ns.rate else [])
    cpu = {(name, kind): [] for name in cells for kind in loads}
    rps = {(name, kind): [] for name in cells for kind in loads}
    print(f"load average before: {loadavg()}")
    with (
        process(["-c", sink_code], CORE_A, port=sink_port),
        process(mock_args(mock_port), CORE_A, port=mock_port),
    ):
        for _ in range(ns.rounds):
            # Fresh processes every round: one process keeps its own luck (memory layout,
            # hash seed) through a run, worth +-10 % here, more than the effects measured.
            order = [(name, kind) for name in cells for kind in loads]
            random.shuffle(order)
            for name, kind in order:
                tracing, base, level, extra = cells[name]
                port = free_port()
                with _gateway(port, mock_port, sink_port, tracing, base, level, extra) as proc:
                    load(port, CHAT, "/v1/chat/completions", ns.connections, 2, 100_000)
                    r = load(
                        port, CHAT, "/v1/chat/completions", ns.connections, ns.seconds,
                        1_000_000, pid=proc.pid, rate=ns.rate if kind == "rate" else None,
                    )  # fmt: skip
                assert r.errors == 0, (name, r.statuses, r.error_kinds)
                cpu[name, kind].append(r.server_cpu_s / r.requests * 1e6)
                rps[name, kind].append(r.rps)
    print(f"load average after: {loadavg()}")
    for kind in loads:
        title = "closed loop" if kind == "closed" else f"open loop, {ns.rate:g} req/s"
        print(f"{title}, {ns.connections} connections:")
        _report({n: cpu[n, kind] for n in cells}, {n: rps[n, kind] for n in cells}, ns.base)


def _report(cpu: dict[str, list[float]], rps: dict[str, list[float]], base: str | None) -> None:
    for name in cpu:
        print(
            f"  {name:17s} server CPU {statistics.median(cpu[name]):6.0f} µs/req "
            f"(rounds: {', '.join(f'{x:.0f}' for x in cpu[name])}), "
            f"{statistics.median(rps[name]):6.0f} req/s"
        )
    off, on = statistics.median(cpu["tracing off"]), statistics.median(cpu["tracing on"])
    print(f"  tracing on adds {on - off:.0f} µs/req, {100 * (on - off) / off:.1f} % of the request")
    sampled = statistics.median(cpu["on, 10 % sampled"])
    print(f"  10 % sampled adds {sampled - off:.0f} µs/req ({100 * (sampled - off) / off:.1f} %)")
    logged = statistics.median(cpu["off, access log"])
    print(f"  the access log adds {logged - off:.0f} µs/req ({100 * (logged - off) / off:.1f} %)")
    if base:
        base_off, base_on = statistics.median(cpu["base, off"]), statistics.median(cpu["base, on"])
        print(
            f"  base: tracing on adds {base_on - base_off:.0f} µs/req "
            f"({100 * (base_on - base_off) / base_off:.1f} %); tracing off vs base: "
            f"{off - base_off:+.0f} µs/req ({100 * (off - base_off) / base_off:+.1f} %)"
        )


if __name__ == "__main__":
    main()
