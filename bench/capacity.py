"""The scenarios `throughput`, `streams` and `capacity`: one rig of servers (every target in
front of the Go mock, driven by the Go generators of bench/gopeer/) and its cells. `throughput`
runs the fast cells, `streams` the paced-stream search and cost, `capacity` both and prints
every ratio of the capacity issue. A Go reverse proxy is the floor of a Go gateway; with
``--inference-gateway PATH`` (a binary built from its source by hand, at a named tag) and
``--nginx [PATH]`` the real Go gateway and nginx run beside edgegw in the same cells.

Layout: the server under test alone on core 1 (the others idle there), the Go mocks and the
Go generator on core 0. The workers cells run edgegw unpinned (``--workers 2``, and the one
worker process re-pinned to both cores for its cell) while the mocks and the generator stay
on core 0: there the server shares core 0 with the instrument, which the output says.

Targets: ``mock_direct``; ``go_proxy`` (httputil.ReverseProxy, the floor of a Go gateway);
``inference_gateway`` (the binary given, ``GOMAXPROCS=1``, its OpenAI provider on the mock,
telemetry and auth off as by default); ``nginx_proxy`` (one worker, ``proxy_pass`` with
upstream keep-alive and ``proxy_buffering off``, access log off); ``bare_server`` (bench/bare_app.py on edgegw.http1: a canned answer for the fast cells, passing
the paced mock's streams through with ``--upstream`` for the capacity search); ``edgegw`` (one worker,
core 1); ``edgegw_w1_unpinned`` (the same process on both cores) and ``edgegw_w2_unpinned``
(``--workers 2``). edgegw runs with ``EDGEGW_MAX_IN_FLIGHT`` and ``UPSTREAM_POOL_MAX_PER_HOST``
raised to 100,000, so that its admission bounds (1,024 each by default) do not cap the search.

Cells, per round every target in a new random order, medians over ``--rounds``:

- ``rps64``: req/s at 64 keep-alive connections, non-streaming, 16 tokens (the fast mock);
  with the server's CPU µs per request (its process tree, /proc schedstat);
- ``added_p50_c1``: p50 at one request in flight minus the mock direct's in the same round,
  everything on core 0 for the cell (cross-core wake-ups dominate one request in flight);
- ``streams16``: streams/s at 16 connections, 48 tokens: 51 SSE events a stream (role chunk,
  48 content chunks, finish chunk, [DONE]; edgegw's count is reported beside it);
- ``rps64_slow50``: req/s at 64 connections with a 50 ms upstream (``mock-slow-first-byte-50``),
  quoted as a share of direct (the canned bare app has no upstream: not in this cell);
- ``capacity``: concurrent paced streams (``--tokens`` at ``--token-rate`` with ``--jitter``,
  first token after ``--first-token-ms``), the step search of edgegw.bench.llm (``Search``)
  with each step run by ``gopeer streams``: warm-up one stream length, ``--step-seconds``
  measured while arrivals keep C in flight; pass: no error and added gap p99 <= 5 ms. One
  step per target per round, targets in random order, within ``--budget`` seconds;
- ``cost``: each of ``--cost-targets`` at each of ``--cost-streams`` paced streams, once per
  round: server CPU µs per relayed event (over the measured phase, every event the generator
  received in it), RSS per stream in flight (RSS over the measured phase minus RSS before the
  step), added gap, TTFT and errors.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import time
from contextlib import ExitStack
from pathlib import Path

from bench import capacity_report, gopeer
from bench.harness import (
    BOTH,
    CHAT,
    CHAT_DIRECT,
    CORE_A,
    CORE_B,
    PATH,
    MiB,
    Result,
    edgegw_env,
    free_port,
    generate,
    loadavg,
    per_request_us,
    pin,
    process,
    raise_nofile,
    rss_bytes,
    scratch_dir,
    streaming,
    wait_quiet,
)
from edgegw.bench import llm

SLOW_MODEL = "mock-slow-first-byte-50"
EVENTS_TOKENS = 48  # 51 SSE events: role, 48 content chunks, finish, [DONE]
FAST = ("mock_direct", "go_proxy", "bare_server", "edgegw")
WORKERS = ("edgegw_w1_unpinned", "edgegw_w2_unpinned")
CELLS = {
    "rps64": FAST + WORKERS,
    "added_p50_c1": FAST,
    "streams16": FAST,
    "rps64_slow50": ("mock_direct", "go_proxy", "edgegw"),
}
CAPACITY = FAST + WORKERS
# With --inference-gateway / --nginx / --pump (edgegw relaying streams with the Python pump).
PEERS = ("inference_gateway", "nginx_proxy", "edgegw_pump")
# The bodies without the `openai/` prefix: for the mock itself and the plain proxies.
DIRECT = ("mock_direct", "go_proxy", "nginx_proxy")

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {work}/nginx-body;
    proxy_temp_path {work}/nginx-proxy;
    upstream up {{ server 127.0.0.1:{upstream}; keepalive 512; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        keepalive_requests 1000000;
        location / {{
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 60s;
        }}
    }}
}}
"""


def peers(ns: argparse.Namespace) -> tuple[str, ...]:
    """The peers this run was given."""
    given = {"inference_gateway": ns.inference_gateway, "nginx_proxy": ns.nginx,
             "edgegw_pump": ns.pump}  # fmt: skip
    return tuple(t for t in PEERS if given[t])


def inference_gateway_env(upstream: int, port: int) -> dict[str, str]:
    """inference-gateway on one core in front of the mock as its OpenAI provider, on loopback,
    everything else as it ships (telemetry, auth, MCP, guardrails off)."""
    return {
        "GOMAXPROCS": "1",
        "ENVIRONMENT": "production",
        "SERVER_HOST": "127.0.0.1",
        "SERVER_PORT": str(port),
        "OPENAI_API_URL": f"http://127.0.0.1:{upstream}/v1",
        "OPENAI_API_KEY": "sk-bench",
    }


def nginx_binary(given: str) -> str:
    found = shutil.which(given, path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    if found is None:
        raise SystemExit(f"--nginx: {given} not found (Debian: nginx)")
    return found


def cells(ns: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """CELLS with the peers of this run in each."""
    return {cell: (*ts, *peers(ns)) for cell, ts in CELLS.items()}


PAUSE_S = 0.5  # between cells
STEP_PAUSE_S = 2.0  # between steps: the cut streams of the last one are cleaned up
PHASES = {
    "throughput": ["fast"],
    "streams": ["cost", "capacity"],
    "capacity": ["fast", "cost", "capacity"],
}


class Rig:
    """The servers of one run: per target its fast and paced instances, bodies and cores."""

    def __init__(self, ns: argparse.Namespace, stack: ExitStack, binary: Path) -> None:
        self.ns, self.binary = ns, binary
        self.work = scratch_dir()
        self.stream_s = ns.first_token_ms / 1000 + ns.tokens / ns.token_rate
        self.port: dict[tuple[str, str], int] = {}
        self.pid: dict[tuple[str, str], int] = {}
        self.cpus: dict[str, set[int]] = {}
        go = str(binary)
        # A fast instance of every target for the fast cells, a paced one for the streams.
        self.kinds = [k for k, ph in (("fast", {"fast"}), ("paced", {"cost", "capacity"}))
                      if ph & set(ns.phases)]  # fmt: skip
        fast_mock, paced_mock = free_port(), free_port()
        paced = ["--token-rate", str(ns.token_rate), "--first-token-ms", str(ns.first_token_ms),
                 "--jitter", str(ns.jitter), "--stamp"]  # fmt: skip

        def start(
            name: str, kind: str, args: list[str], cpu: int, exe: str | None,
            env: dict[str, str] | None = None, port: int | None = None,
        ) -> None:  # fmt: skip
            port = port or int(args[args.index("--port") + 1])
            proc = stack.enter_context(process(args, cpu, env, port, exe=exe, ready_s=60))
            self.port[name, kind], self.pid[name, kind] = port, proc.pid

        if "fast" in self.kinds:
            start("mock_direct", "fast", ["mock", "--port", str(fast_mock), "--tokens", "200"],
                  CORE_A, go)  # fmt: skip
        if "paced" in self.kinds:
            start("mock_direct", "paced",
                  ["mock", "--port", str(paced_mock), "--tokens", str(ns.tokens), *paced], CORE_A, go)  # fmt: skip
        for kind, up in (("fast", fast_mock), ("paced", paced_mock)):
            if kind not in self.kinds:
                continue
            p = free_port()
            start("go_proxy", kind,
                  ["proxy", "--port", str(p), "--upstream", f"http://127.0.0.1:{up}"], CORE_B, go)  # fmt: skip
            p = free_port()
            extra = ["--tokens", str(EVENTS_TOKENS)] if kind == "fast" else [
                "--upstream", f"http://127.0.0.1:{up}/v1"]  # fmt: skip
            start("bare_server", kind, ["-m", "bench.bare_app", "--port", str(p), *extra],
                  CORE_B, None)  # fmt: skip
            if ns.inference_gateway:
                p = free_port()
                start("inference_gateway", kind, [], CORE_B, ns.inference_gateway,
                      inference_gateway_env(up, p), port=p)  # fmt: skip
            if ns.nginx:
                p = free_port()
                conf = self.work / f"nginx-{kind}.conf"
                conf.write_text(NGINX_CONF.format(work=self.work, upstream=up, port=p))
                start("nginx_proxy", kind, ["-c", str(conf), "-p", str(self.work)], CORE_B,
                      nginx_binary(ns.nginx), port=p)  # fmt: skip
            # `python -m edgegw` on this interpreter, or the build given with --edgegw.
            serve = ["serve"] if ns.edgegw else ["-m", "edgegw", "serve"]
            for name, workers in (("edgegw", 1), ("edgegw_w2_unpinned", 2)):
                p = free_port()
                start(name, kind, [*serve, "--port", str(p)], CORE_B, ns.edgegw,
                      edgegw_env(up, workers))  # fmt: skip
            if ns.pump:
                p = free_port()
                start("edgegw_pump", kind, [*serve, "--port", str(p)], CORE_B,
                      ns.edgegw, edgegw_env(up, 1, {"EDGEGW_STREAM_RELAY": "trio"}))  # fmt: skip
        for kind in self.kinds:  # the one worker again, re-pinned for its cells
            self.port["edgegw_w1_unpinned", kind] = self.port["edgegw", kind]
            self.pid["edgegw_w1_unpinned", kind] = self.pid["edgegw", kind]
        self.targets = FAST + WORKERS + peers(ns)
        self.cells = cells(ns)
        for name in self.targets:
            self.cpus[name] = {CORE_A} if name == "mock_direct" else {CORE_B}
        for name in WORKERS:
            self.cpus[name] = BOTH
        time.sleep(2)  # workers of --workers 2 come up after the port opens
        self.layout()

    def layout(self, cell_target: str | None = None, cpus: set[int] | None = None) -> None:
        """Every server on its cores; ``cell_target`` on ``cpus`` (default: its own)."""
        for (name, _kind), pid in self.pid.items():
            if name == "edgegw_w1_unpinned":
                continue
            pin(pid, self.cpus[name])
        if cell_target is not None:
            for kind in self.kinds:
                pin(self.pid[cell_target, kind], cpus or self.cpus[cell_target])

    def body_file(self, name: str, cell: str) -> str:
        body = CHAT_DIRECT if name in DIRECT else CHAT
        if cell == "rps64_slow50":
            body = body.replace(b"gpt-4o-mini", SLOW_MODEL.encode())
        elif cell == "streams16":
            body = streaming(body.replace(b'"max_tokens":16', b'"max_tokens":%d' % EVENTS_TOKENS))
        elif cell in ("capacity", "cost"):
            body = streaming(body.replace(b'"max_tokens":16', b'"max_tokens":%d' % self.ns.tokens))
        path = self.work / f"{name}-{cell}.json"
        if not path.exists():
            path.write_bytes(body)
        return str(path)

    def generate(self, args: list[str], name: str, kind: str, rss: bool = False) -> Result:
        """Run one generator (pinned to core 0); the server's CPU over its measured phase and,
        with ``rss``, RSS per stream in flight."""
        pid = self.pid[name, kind]
        result = generate(self.binary, args, pid, rss)
        if "rss_mean_mib" in result:
            flight = result["in_flight"]["mean"]
            added = (result["rss_mean_mib"] - result["rss_before_mib"]) * MiB
            result["rss_per_stream_kib"] = round(added / flight / 1024, 1) if flight else None
        return result

    # -- cells ---------------------------------------------------------------------------

    def load_cell(self, cell: str, name: str) -> Result:
        conns = {"rps64": 64, "added_p50_c1": 1, "streams16": 16, "rps64_slow50": 64}[cell]
        seconds = min(self.ns.seconds, 3.0) if cell == "added_p50_c1" else self.ns.seconds
        args = ["load", "--port", str(self.port[name, "fast"]), "--path", PATH,
                "--body-file", self.body_file(name, cell), "--connections", str(conns),
                "--seconds", str(seconds), "--warmup-s", str(min(1.0, seconds))]  # fmt: skip
        if cell == "streams16":
            args.append("--stream")
        if cell == "added_p50_c1":  # the latency layout: everything on core 0
            self.layout(name, {CORE_A})
        else:
            self.layout(name)
        try:
            r = self.generate(args, name, "fast")
        finally:
            self.layout()
        r["server_cpu_us_per_request"] = per_request_us(r)
        r["loadavg"] = loadavg()
        return r

    def stream_step(
        self, name: str, streams: int, cell: str = "capacity", warm_up: bool = False
    ) -> Result:
        """One step of ``streams`` paced streams; ``warm_up``: a short one, not measured."""
        ns = self.ns
        self.layout(name)
        gap_ms = 1000 / ns.token_rate
        short = (min(0.5, ns.step_seconds), min(1.0, ns.step_seconds))
        warmup_s, seconds = short if warm_up else (self.stream_s, ns.step_seconds)
        args = ["streams", "--port", str(self.port[name, "paced"]), "--path", PATH,
                "--body-file", self.body_file(name, cell), "--streams", str(streams),
                "--seconds", str(seconds), "--warmup-s", f"{warmup_s:.3f}",
                "--stream-s", f"{self.stream_s:.3f}", "--nominal-gap-ms", f"{gap_ms:.3f}"]  # fmt: skip
        r = self.generate(args, name, "paced", rss=True)
        time.sleep(ns.step_pause_s)
        errors = r["requests"]["errors"]
        p99 = (r["added_gap_ms"] or {}).get("p99")
        why = None
        if errors:
            why = f"{errors} errors {r['errors_by_kind']}"
        elif not r["requests"]["ok"]:
            why = "no stream completed"
        elif p99 is None:
            why = "no gap measured"
        elif p99 > ns.gap_p99_ms:
            why = f"added gap p99 {p99:.2f} ms > {ns.gap_p99_ms:g} ms"
        events = r["events_run"]
        r.update(
            streams=streams,
            passed=why is None,
            why=why,
            cpu_us_per_event=round(r["server_cpu_s"] / events * 1e6, 2) if events else None,
            loadavg=loadavg(),
        )
        return r


def _fast_phase(rig: Rig, ns: argparse.Namespace) -> Result:
    cells_of = rig.cells
    rows: dict[str, dict[str, list[Result]]] = {
        c: {t: [] for t in ts} for c, ts in cells_of.items()
    }
    for t in rig.targets:  # warm-up: connections, pools, code paths
        rig.load_cell("rps64", t)
    for rnd in range(ns.rounds):
        cells = list(cells_of)
        random.shuffle(cells)
        for cell in cells:
            order = list(cells_of[cell])
            random.shuffle(order)
            for t in order:
                rows[cell][t].append(rig.load_cell(cell, t))
                time.sleep(ns.pause_s)
        print(
            f"  round {rnd + 1}/{ns.rounds} (load {loadavg()[0]:.2f}): "
            + "; ".join(
                f"{c} " + ", ".join(f"{t} {rows[c][t][-1]['rps']:.0f}" for t in cells_of[c])
                for c in cells_of
            ),
            flush=True,
        )
    return rows


def _capacity_phase(rig: Rig, ns: argparse.Namespace) -> Result:
    spec = llm.LlmSpec(start_streams=ns.start, max_streams=ns.max_streams,
                       step_s=ns.step_seconds, budget_s=ns.budget, gap_p99_ms=ns.gap_p99_ms)  # fmt: skip
    searches = {t: llm.Search(spec) for t in rig.targets if t in ns.targets}
    step_s = rig.stream_s + ns.step_seconds + ns.step_pause_s + 1
    t0, rnd = time.monotonic(), 0
    while True:
        live = [t for t, s in searches.items() if s.next is not None]
        if not live or time.monotonic() - t0 + step_s * len(live) > ns.budget:
            break
        rnd += 1
        random.shuffle(live)
        for t in live:
            streams = searches[t].next
            assert streams is not None
            searches[t].record(rig.stream_step(t, streams))
            s = searches[t].steps[-1]
            print(
                f"  capacity round {rnd}: {t} {streams} streams "
                f"{'pass' if s['passed'] else 'FAIL (' + s['why'] + ')'}; in flight "
                f"{s['in_flight']['mean']:.0f}, added gap p99 "
                f"{(s['added_gap_ms'] or {}).get('p99')} ms (load {loadavg()[0]:.2f})",
                flush=True,
            )
    return {t: s.result() for t, s in searches.items()}


def _cost_phase(rig: Rig, ns: argparse.Namespace) -> dict[str, dict[str, list[Result]]]:
    """Each cost target at each number of streams, once a round, the targets in a new order
    each round: {target: {streams: [step, ...]}}."""
    targets = [t for t in ns.cost_targets if t in rig.targets]
    steps: dict[str, dict[str, list[Result]]] = {
        t: {str(c): [] for c in ns.cost_streams} for t in targets
    }
    for rnd in range(ns.rounds):
        for streams in ns.cost_streams:
            random.shuffle(targets)
            for t in targets:
                s = rig.stream_step(t, streams, "cost")
                steps[t][str(streams)].append(s)
                print(
                    f"  cost round {rnd + 1}: {t} at {streams} streams: "
                    f"{s['cpu_us_per_event']} µs CPU/event, {s.get('rss_per_stream_kib')} "
                    f"KiB/stream, in flight {s['in_flight']['mean']:.0f}, added gap p99 "
                    f"{(s['added_gap_ms'] or {}).get('p99')} ms, TTFT p50 "
                    f"{(s['ttft_ms'] or {}).get('p50')} ms, errors {s['requests']['errors']} "
                    f"(load {loadavg()[0]:.2f})",
                    flush=True,
                )
    return steps


def estimate_s(ns: argparse.Namespace) -> float:
    stream_s = ns.first_token_ms / 1000 + ns.tokens / ns.token_rate
    fast = 0.0
    if "fast" in ns.phases:
        per_round = sum(
            len(ts) * ((min(ns.seconds, 3.0) if c == "added_p50_c1" else ns.seconds) + 1.6)
            for c, ts in cells(ns).items()
        )
        fast = per_round * (ns.rounds + 0.4)
    cost_steps = len(ns.cost_targets) * len(ns.cost_streams) * ns.rounds
    cost = (
        cost_steps * (stream_s + ns.step_seconds + ns.step_pause_s + 1)
        if "cost" in ns.phases
        else 0
    )
    warm = 6 * 5.0 if {"cost", "capacity"} & set(ns.phases) else 0
    return 40 + fast + warm + (ns.budget if "capacity" in ns.phases else 0) + cost


def run(ns: argparse.Namespace) -> Result:
    """The rig, its cells for ``ns.phases``, the summary and the table."""
    os.sched_setaffinity(0, {CORE_A})
    raise_nofile()
    binary = gopeer.build()
    print(
        f"{ns.scenario}: about {estimate_s(ns) / 60:.0f} min at most; gopeer {binary}", flush=True
    )
    out: Result = {"quiet": wait_quiet(max_wait_s=ns.max_wait), "gopeer": str(binary)}
    out["layout"] = {
        "default": f"server under test alone on core {CORE_B}; Go mocks and Go generator on core {CORE_A}",
        "added_p50_c1": f"server, mock and generator all on core {CORE_A}",
        "workers": f"edgegw unpinned on cores {sorted(BOTH)}: it shares core {CORE_A} with the "
        "Go mocks and the Go generator",
    }
    with ExitStack() as stack:
        rig = Rig(ns, stack, binary)
        out["stream_s"] = round(rig.stream_s, 3)
        out["idle_rss_mib"] = {
            t: round(rss_bytes(rig.pid[t, rig.kinds[0]]) / MiB, 1)
            for t in rig.targets
            if t != "edgegw_w1_unpinned"
        }
        if "fast" in ns.phases:
            out["fast"] = _fast_phase(rig, ns)
        if "cost" in ns.phases or "capacity" in ns.phases:
            for t in rig.targets:  # the paced instances: connections, pools, code paths
                if t in ns.targets or t in ns.cost_targets:
                    rig.stream_step(t, 32, warm_up=True)
        if "cost" in ns.phases:
            out["cost"] = _cost_phase(rig, ns)
        if "capacity" in ns.phases and ns.budget > 0:  # --budget 0: the cost phase alone
            out["capacity"] = _capacity_phase(rig, ns)
    out["summary"] = capacity_report.summarise(out)
    capacity_report.print_table(out)
    return out


def paced_arguments(p: argparse.ArgumentParser) -> None:
    """The paced mock's stream: 200 tokens at 30/s, the first after 250 ms, jitter 0.2."""
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--token-rate", type=float, default=30.0)
    p.add_argument("--first-token-ms", type=float, default=250.0)
    p.add_argument("--jitter", type=float, default=0.2)


def add_arguments(p: argparse.ArgumentParser, scenario: str) -> None:
    p.set_defaults(phases=PHASES[scenario])
    p.add_argument("--rounds", type=int, default=3, help="rounds of the fast cells and of cost")
    p.add_argument("--seconds", type=float, default=5, help="measured seconds per fast cell")
    p.add_argument("--step-seconds", type=float, default=10, help="measured seconds per step")
    p.add_argument("--budget", type=float, default=900, help="capacity search, seconds")
    p.add_argument("--start", type=int, default=256, help="capacity: first step's streams")
    p.add_argument("--targets", nargs="+", choices=CAPACITY + PEERS, default=list(CAPACITY),
                   help="capacity: the targets searched (default: all but the peers)")  # fmt: skip
    p.add_argument("--inference-gateway", metavar="PATH",
                   help="an inference-gateway binary (built from its source at a named tag): a "
                        "target of every cell")  # fmt: skip
    p.add_argument("--edgegw", metavar="PATH",
                   help="the edgegw executable measured (scripts/build-binary's one-file or "
                        "one-folder build) instead of `python -m edgegw` on this interpreter")  # fmt: skip
    p.add_argument("--nginx", nargs="?", const="nginx", metavar="PATH",
                   help="nginx (default: on PATH) as a proxy_pass target of every cell")  # fmt: skip
    p.add_argument("--pump", action="store_true",
                   help="edgegw relaying streams with its Python pump (EDGEGW_STREAM_RELAY=trio) "
                        "beside the core's relay: a target of every cell")  # fmt: skip
    p.add_argument("--cost-targets", nargs="+", choices=CAPACITY + PEERS, default=["edgegw"],
                   help="cost: the targets measured (a peer only when given)")  # fmt: skip
    p.add_argument("--max-streams", type=int, default=4096)
    p.add_argument("--cost-streams", type=int, nargs="+", default=[256])
    p.add_argument("--gap-p99-ms", type=float, default=5.0)
    p.add_argument("--pause-s", type=float, default=PAUSE_S, help=argparse.SUPPRESS)
    p.add_argument("--step-pause-s", type=float, default=STEP_PAUSE_S, help=argparse.SUPPRESS)
    paced_arguments(p)
    p.add_argument("--max-wait", type=float, default=120, help="seconds to wait for quiet")


# What `python -m bench smoke` passes: every cell and target once, a fraction of a second each.
SMOKE = ["--rounds", "1", "--seconds", "0.2", "--step-seconds", "0.2", "--budget", "60",
         "--start", "4", "--max-streams", "4", "--cost-streams", "4", "--tokens", "4",
         "--token-rate", "200", "--first-token-ms", "10", "--gap-p99-ms", "1000",
         "--pause-s", "0", "--step-pause-s", "0.2", "--max-wait", "0",
         "--nginx", "--pump", "--cost-targets", "edgegw", "nginx_proxy", "edgegw_pump"]  # fmt: skip
