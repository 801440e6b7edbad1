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
charges it for that too. With `--go` the mock and the closed loop are bench/gopeer's (Go):
they take a fifth of core 0's time the Python pair takes, so the server is saturated by the
same load in every cell and round (the Python pair on core 0 is the bottleneck of its own
closed loop: a cell's server CPU per request then moves with that core's luck).

Besides the difference of the medians, each round's difference (on minus off, the two
cells of one round measured within a minute of each other) is reported: its median and
range are the figure quoted.

`--paired` (Go): sampled and unsampled phases alternate in one gateway process (`paired`).
With `--go` and `--paired` the collector is the Go mock's `/v1/traces` (read whole, 200, the
connection kept alive, as an OpenTelemetry collector does); the Python sink (HTTP/1.0: a
connection a batch) parsed each batch on core 0 beside the load generator.

    python -m bench.tracing [--rounds 5] [--seconds 6] [--rate 400] [--go] [--base DIR]
    python -m bench.tracing --paired [--rounds 6] [--pairs 4] [--seconds 4]
    python -m bench.tracing --interleaved [--rounds 4] [--pairs 60] [--slot-s 1]

`--interleaved` (Go) measures the phases as alternating --slot-s slots of one load
generator process (`gopeer load --slots`), so a gateway's pairs are measured seconds apart
with no restart between them: per pair the difference of the server's CPU per request over
the two slots; the figure quoted is the mean of all pairs with a bootstrap 95 % interval
(pairs resampled), next to the median. The gateway samples by the client's flag and no
root trace (OTEL_TRACES_SAMPLER=parentbased_traceidratio, _ARG=0): one phase's requests
carry a sampled `traceparent` (recorded and exported), the other's the same bytes under a
name tracing does not read (`x-trace-ctx`, as long), so that phase runs what tracing off
runs for the same request plus the sampling decision (no context to parse or pass on, as
`--paired`'s unsampled phase had; the header is parsed in both).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench import gopeer
from bench.harness import CHAT, CORE_A, CORE_B, free_port, load, loadavg, mock_args, process
from edgegw.bench.llm import Meter


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
        # One hash seed for every gateway: dict and set layouts, part of what made two
        # processes of the same code differ by +-10 % here, no longer differ between cells.
        "PYTHONHASHSEED": "0",
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


def go_load(
    binary: Path,
    port: int,
    pid: int,
    body: Path,
    connections: int,
    seconds: float,
    headers: tuple[str, ...] = (),
    warmup_s: float = 2.0,
) -> tuple[float, int, float]:
    """bench/gopeer's closed loop (on core 0) against the gateway: (the server's CPU seconds
    over the measured phase, answers, req/s)."""
    meter = Meter.of_pid(pid, "edgegw")
    args = ["load", "--port", str(port), "--path", "/v1/chat/completions",
            "--body-file", str(body), "--connections", str(connections),
            "--seconds", str(seconds), "--warmup-s", str(warmup_s)]  # fmt: skip
    for h in headers:
        args += ["--header", h]
    cpu = {"run": 0.0, "done": 0.0}

    def on_phase(phase: str) -> None:
        cpu[phase] = meter.cpu_s()

    result = gopeer.run(binary, args, on_phase, lambda: os.sched_setaffinity(0, {CORE_A}))
    assert result["errors"] == 0, result["errors_by_kind"]
    return cpu["done"] - cpu["run"], result["ok"], result["rps"]


def _go_mock(binary: Path, port: int) -> contextlib.AbstractContextManager[object]:
    """bench/gopeer's mock on core 0: 200-token answers, and the collector (/v1/traces)."""
    return process(
        ["mock", "--port", str(port), "--tokens", "200"], CORE_A, port=port, exe=str(binary)
    )


def paired(ns: argparse.Namespace, binary: Path, body: Path) -> None:
    """`--paired`: one gateway with tracing on, driven in alternating phases by clients whose
    `traceparent` says sampled (flags 01: every request recorded and exported) or not (00:
    nothing recorded; the context is parsed and passed on in both), fresh gateways
    `--rounds` times. Both phases run in one process, so its luck (memory layout, hash seed:
    +-10 % between processes of the same code here) is the same for both."""
    mock_port = free_port()
    sink_port = mock_port  # the Go mock's /v1/traces
    parent = "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-"
    phases = {"sampled": (parent + "01",), "not sampled": (parent + "00",)}
    cpu: dict[str, list[float]] = {name: [] for name in phases}
    diffs: list[float] = []
    print(f"load average before: {loadavg()}")
    with _go_mock(binary, mock_port):
        for _ in range(ns.rounds):
            port = free_port()
            with _gateway(port, mock_port, sink_port, True, None, "WARNING", {}) as proc:
                for _ in range(ns.pairs):
                    got = {}
                    for name in random.sample(list(phases), 2):
                        cpu_s, answers, _ = go_load(
                            binary, port, proc.pid, body, ns.connections, ns.seconds,
                            phases[name], warmup_s=1.0,
                        )  # fmt: skip
                        got[name] = cpu_s / answers * 1e6
                        cpu[name].append(got[name])
                    diffs.append(got["sampled"] - got["not sampled"])
    print(f"load average after: {loadavg()}")
    print(f"one process, alternating phases, {ns.connections} connections (Go closed loop):")
    for name, xs in cpu.items():
        print(f"  {name:12s} server CPU {statistics.median(xs):6.0f} µs/req "
              f"(phases: {', '.join(f'{x:.0f}' for x in xs)})")  # fmt: skip
    base = statistics.median(cpu["not sampled"])
    d = statistics.median(diffs)
    q = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [d, d, d]
    print(
        f"  recording and exporting a trace adds {d:+.0f} µs/req ({100 * d / base:+.1f} %): "
        f"median of {len(diffs)} pairs, quartiles {q[0]:+.0f} .. {q[2]:+.0f}, "
        f"range {min(diffs):+.0f} .. {max(diffs):+.0f}"
    )


# `--interleaved`: only a client's sampled trace is recorded (no root trace is sampled).
ROOTS_OFF = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}


def interleaved(ns: argparse.Namespace, binary: Path, body: Path) -> None:
    """`--interleaved`: `--rounds` fresh gateways, each measured over `--pairs` pairs of
    slots (sampled, no trace context; in random order within each pair)."""
    mock_port = free_port()
    parent = "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-"
    per_req: dict[str, list[float]] = {"a": [], "b": []}  # a: sampled, b: no traceparent
    diffs: list[float] = []
    system = {"a": [0.0, 0], "b": [0.0, 0]}  # kernel CPU seconds, answers
    print(f"load average before: {loadavg()}")
    with _go_mock(binary, mock_port):
        for g in range(ns.rounds):
            order = "".join(random.choice(("ab", "ba")) for _ in range(ns.pairs))
            port = free_port()
            with _gateway(port, mock_port, mock_port, True, None, "WARNING", ROOTS_OFF) as proc:
                meter = Meter.of_pid(proc.pid, "edgegw")
                marks: list[tuple[str, float, float]] = []

                def mark(
                    phase: str, meter: Meter = meter, marks: list[tuple[str, float, float]] = marks
                ) -> None:
                    marks.append((phase, meter.cpu_s(), _system_s(proc.pid)))

                args = ["load", "--port", str(port), "--path", "/v1/chat/completions",
                        "--body-file", str(body), "--connections", str(ns.connections),
                        "--warmup-s", "2", "--slots", order, "--slot-s", str(ns.slot_s),
                        "--header", parent + "01",
                        "--alt-header", "x-trace-ctx" + parent[len("traceparent"):] + "01"]  # fmt: skip
                result = gopeer.run(
                    binary, args, mark,
                    lambda: os.sched_setaffinity(0, {CORE_A}),
                    timeout_s=ns.pairs * 2 * ns.slot_s + 60,
                )  # fmt: skip
                assert result["errors"] == 0, result["errors_by_kind"]
            at = [(cpu, sys_s) for phase, cpu, sys_s in marks if phase in ("mark", "end")]
            slot_cpu = [(at[2 * i + 1][0] - at[2 * i][0]) / n * 1e6 for i, n in
                        enumerate(result["slots"])]  # fmt: skip
            for i, (kind, x) in enumerate(zip(order, slot_cpu, strict=True)):
                per_req[kind].append(x)
                system[kind][0] += at[2 * i + 1][1] - at[2 * i][1]
                system[kind][1] += result["slots"][i]
            diffs += [
                (slot_cpu[i] - slot_cpu[i + 1]) * (1 if order[i] == "a" else -1)
                for i in range(0, len(order), 2)
            ]
            print(f"  gateway {g + 1}: {statistics.median(per_req['b'][-ns.pairs:]):.0f} µs/req "
                  f"untraced, pairs' mean {statistics.fmean(diffs[-ns.pairs:]):+.1f} µs")  # fmt: skip
    print(f"load average after: {loadavg()}")
    base = statistics.fmean(per_req["b"])
    mean = statistics.fmean(diffs)
    rng = random.Random(0)
    boot = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    lo, hi = boot[49], boot[1949]
    q = statistics.quantiles(diffs, n=4)
    print(f"interleaved slots of {ns.slot_s:g} s, {ns.connections} connections (Go closed loop), "
          f"{len(diffs)} pairs in {ns.rounds} gateways:")  # fmt: skip
    print(f"  no trace context {base:.0f} µs/req (mean of slots), sampled "
          f"{statistics.fmean(per_req['a']):.0f}")  # fmt: skip
    print(
        f"  recording and exporting a trace adds {mean:+.1f} µs/req ({100 * mean / base:+.1f} %), "
        f"95 % interval {lo:+.1f} .. {hi:+.1f} ({100 * lo / base:+.1f} .. {100 * hi / base:+.1f} %); "
        f"median of pairs {statistics.median(diffs):+.1f}, quartiles {q[0]:+.0f} .. {q[2]:+.0f}"
    )
    sys_a, sys_b = (system[k][0] / system[k][1] * 1e6 for k in "ab")
    print(f"  of which in the kernel (stat's stime): {sys_a - sys_b:+.1f} µs/req "
          f"({sys_b:.0f} µs/req without)")  # fmt: skip


def _system_s(pid: int) -> float:
    """The process's kernel CPU seconds (/proc stat's stime: clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[12]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rate", type=float, help="also an open loop of this many req/s")
    parser.add_argument("--base", help="a checkout of the code before tracing")
    parser.add_argument("--go", action="store_true", help="bench/gopeer's mock and closed loop")
    parser.add_argument("--paired", action="store_true", help="sampled vs not in one process")
    parser.add_argument("--pairs", type=int, default=4, help="with --paired: pairs a process")
    parser.add_argument("--interleaved", action="store_true", help="--paired, a slot a phase")
    parser.add_argument("--slot-s", type=float, default=1.0, help="with --interleaved")
    ns = parser.parse_args()
    binary = gopeer.build() if ns.go or ns.paired or ns.interleaved else None
    body = Path(tempfile.mkdtemp(prefix="edgegw-tracing-")) / "chat.json"
    body.write_bytes(CHAT)
    if ns.interleaved:
        assert binary is not None
        os.sched_setaffinity(0, {CORE_A})
        interleaved(ns, binary, body)
        return
    if ns.paired:
        assert binary is not None
        os.sched_setaffinity(0, {CORE_A})
        paired(ns, binary, body)
        return
    if ns.go and ns.rate:
        parser.error("--rate is the Python generator's open loop: not with --go")
    os.sched_setaffinity(0, {CORE_A})
    mock_port = free_port()
    # The collector: the Go mock's /v1/traces with --go (kept-alive, as an OpenTelemetry
    # collector), else a Python sink in a process of its own.
    sink_port = mock_port if ns.go else free_port()
    sink_code = f"from bench.tracing import serve_sink; serve_sink({sink_port})"
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
    mock = ["mock", "--port", str(mock_port), "--tokens", "200"] if ns.go else mock_args(mock_port)
    with (
        contextlib.nullcontext() if ns.go else process(["-c", sink_code], CORE_A, port=sink_port),
        process(mock, CORE_A, port=mock_port, exe=str(binary) if binary else None),
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
                    if binary is not None:
                        cpu_s, answers, per_s = go_load(
                            binary, port, proc.pid, body, ns.connections, ns.seconds
                        )
                    else:
                        load(port, CHAT, "/v1/chat/completions", ns.connections, 2, 100_000)
                        r = load(
                            port, CHAT, "/v1/chat/completions", ns.connections, ns.seconds,
                            1_000_000, pid=proc.pid, rate=ns.rate if kind == "rate" else None,
                        )  # fmt: skip
                        assert r.errors == 0, (name, r.statuses, r.error_kinds)
                        cpu_s, answers, per_s = r.server_cpu_s, r.requests, r.rps
                cpu[name, kind].append(cpu_s / answers * 1e6)
                rps[name, kind].append(per_s)
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
    for name in ("tracing on", "on, 10 % sampled", "off, access log"):
        pairs = [x - y for x, y in zip(cpu[name], cpu["tracing off"], strict=True)]
        shares = [100 * (x - y) / y for x, y in zip(cpu[name], cpu["tracing off"], strict=True)]
        print(
            f"  {name} - off, per round: median {statistics.median(pairs):+.0f} µs/req "
            f"({statistics.median(shares):+.1f} %), range {min(pairs):+.0f} .. {max(pairs):+.0f}"
        )
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
