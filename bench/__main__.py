"""edgegw benchmarks. See bench/README.md for the method and the recorded figures.

    python -m bench parse                    # Rust parser vs a pure-Python baseline
    python -m bench client                   # upstream client: h11 pool vs httpcore
    python -m bench latency                  # added latency at one request in flight
    python -m bench throughput               # req/s at 32 connections vs bare Hypercorn-Trio
    python -m bench peers                    # vs mock direct, bare Hypercorn-Trio and LiteLLM
    python -m bench streaming                # SSE relay: events/s, added inter-chunk gap
    python -m bench memory                   # RSS idle, under load, per idle connection, soak
    python -m bench profile                  # py-spy of the gateway under load, summarised
    python -m bench capacity                 # the capacity issue's ratios, Go mock and generator
    python -m bench all                      # parse, client, latency, throughput; JSON to bench/results/

Processes are pinned with sched_setaffinity: for latency everything shares core 0 (on a
2-vCPU VM cross-core wake-ups dominate the tail); for throughput the server under test
has core 1 alone and the mock upstream and the load generator share core 0.
Every load loop is bounded in time and count and targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import time
from importlib import metadata
from pathlib import Path

import trio

from bench import client_bench, parse_bench
from bench.accept import add_arguments as accept_arguments
from bench.accept import cmd_accept
from bench.capacity import add_arguments as capacity_arguments
from bench.capacity import cmd_capacity
from bench.harness import (
    CHAT,
    CHAT_DIRECT,
    CORE_A,
    CORE_B,
    RESULTS,
    ROOT,
    free_port,
    gateway,
    load,
    mock_args,
    process,
)
from bench.llm import cmd_llm, print_llm
from bench.memory import cmd_memory
from bench.peers import cmd_peers, print_peers
from bench.pool import add_arguments as pool_arguments
from bench.pool import cmd_pool
from bench.profile import cmd_profile
from bench.streaming import cmd_streaming, print_streaming


def cmd_parse(_: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_A})
    r = parse_bench.run()
    print(
        f"parse_chat_request, {r['body_bytes']} B body: {r['rust_parse_only_us']:.2f} µs "
        f"(+ upstream body {r['rust_parse_and_body_us']:.2f} µs); pure Python {r['python_baseline_us']:.2f} µs"
    )
    return r


def cmd_client(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_B})
    mock_port = free_port()
    out: dict = {}
    with process(mock_args(mock_port), CORE_A, port=mock_port):
        for c in (1, 32):
            for name, fn in (
                ("edgegw", client_bench.edgegw_pool_rps),
                ("h11", client_bench.h11_pool_rps),
                ("httpcore", client_bench.httpcore_rps),
            ):
                runs = [trio.run(fn, mock_port, c, ns.seconds) for _ in range(ns.rounds)]
                rps = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                out[f"{name}_c{c}_rps"] = rps
                out[f"{name}_c{c}_cpu_us_per_req"] = cpu
                print(
                    f"{name:9s} c={c:<3d} {rps:8.0f} req/s, client CPU {cpu:6.1f} µs/req "
                    f"(runs: {', '.join(f'{r[0]:.0f}/{r[1]:.0f}' for r in runs)})"
                )
    return out


def cmd_latency(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_A})
    mock_port, gw_port = free_port(), free_port()
    rows: dict[str, list[float]] = {"direct_p50": [], "direct_p99": [], "gw_p50": [], "gw_p99": []}
    with process(mock_args(mock_port), CORE_A, port=mock_port), gateway(gw_port, mock_port, CORE_A):
        load(gw_port, CHAT, "/v1/chat/completions", 1, 2, 300)  # warm-up
        load(mock_port, CHAT_DIRECT, "/v1/chat/completions", 1, 2, 300)
        for _ in range(ns.rounds):
            order = [("direct", mock_port, CHAT_DIRECT), ("gw", gw_port, CHAT)]
            random.shuffle(order)
            for name, port, body in order:
                r = load(port, body, "/v1/chat/completions", 1, 30, ns.requests)
                assert r.errors == 0, (name, r.statuses, r.error_kinds)
                rows[f"{name}_p50"].append(r.percentile_ms(50))
                rows[f"{name}_p99"].append(r.percentile_ms(99))
    out = {k: statistics.median(v) for k, v in rows.items()}
    out["added_p50_ms"] = statistics.median(
        g - d for g, d in zip(rows["gw_p50"], rows["direct_p50"], strict=True)
    )
    out["added_p99_ms"] = statistics.median(
        g - d for g, d in zip(rows["gw_p99"], rows["direct_p99"], strict=True)
    )
    print(
        f"c=1, {ns.rounds} rounds x {ns.requests} requests: direct p50 {out['direct_p50']:.3f} p99 {out['direct_p99']:.3f} ms; "
        f"gateway p50 {out['gw_p50']:.3f} p99 {out['gw_p99']:.3f} ms; added p50 {out['added_p50_ms']:.3f} p99 {out['added_p99_ms']:.3f} ms"
    )
    return out


def cmd_throughput(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_A})
    mock_port, gw_port, bare_port = free_port(), free_port(), free_port()
    runs: dict[str, list[float]] = {"gateway": [], "bare_hypercorn": [], "mock_direct": []}
    p99: dict[str, list[float]] = {k: [] for k in runs}
    cpu_us: dict[str, list[float]] = {k: [] for k in runs}
    client_us: dict[str, list[float]] = {k: [] for k in runs}
    with (
        process(mock_args(mock_port), CORE_A, port=mock_port) as mock_proc,
        gateway(gw_port, mock_port, CORE_B) as gw_proc,
        process(
            ["-m", "bench.bare_app", "--port", str(bare_port)], CORE_B, port=bare_port
        ) as bare_proc,
    ):
        targets = {
            "gateway": (gw_port, CHAT, gw_proc.pid),
            "bare_hypercorn": (bare_port, CHAT, bare_proc.pid),
            "mock_direct": (mock_port, CHAT_DIRECT, mock_proc.pid),
        }
        for port, body, _ in targets.values():
            load(port, body, "/v1/chat/completions", ns.connections, 2, 100_000)  # warm-up
        for _ in range(ns.rounds):
            order = list(targets.items())
            random.shuffle(order)
            for name, (port, body, pid) in order:
                r = load(
                    port, body, "/v1/chat/completions", ns.connections, ns.seconds, 1_000_000,
                    pid=pid,
                )  # fmt: skip
                assert r.errors == 0, (name, r.statuses, r.error_kinds)
                runs[name].append(r.rps)
                p99[name].append(r.percentile_ms(99))
                cpu_us[name].append(r.server_cpu_s / r.requests * 1e6)
                client_us[name].append(r.client_cpu_s / r.requests * 1e6)
    out = {f"{k}_rps": statistics.median(v) for k, v in runs.items()}
    out.update({f"{k}_p99_ms": statistics.median(v) for k, v in p99.items()})
    out.update({f"{k}_cpu_us_per_req": statistics.median(v) for k, v in cpu_us.items()})
    out.update({f"{k}_loadgen_cpu_us_per_req": statistics.median(v) for k, v in client_us.items()})
    out["gateway_vs_bare"] = out["gateway_rps"] / out["bare_hypercorn_rps"]
    out["gateway_vs_bare_cpu"] = (
        out["bare_hypercorn_cpu_us_per_req"] / out["gateway_cpu_us_per_req"]
    )
    for k, v in runs.items():
        print(
            f"{k:15s} c={ns.connections}: {statistics.median(v):7.0f} req/s (runs: {', '.join(f'{x:.0f}' for x in v)}), "
            f"p99 {statistics.median(p99[k]):.1f} ms, server CPU {statistics.median(cpu_us[k]):.0f} µs/req, "
            f"load generator {statistics.median(client_us[k]):.0f} µs/req"
        )
    print(
        f"gateway / bare Hypercorn-Trio: {out['gateway_vs_bare']:.2f} by req/s, "
        f"{out['gateway_vs_bare_cpu']:.2f} by CPU per request"
    )
    return out


def machine() -> dict:
    info: dict = {
        "python": platform.python_version(),
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "versions": {},
    }
    for pkg in ("edgegw", "trio", "hypercorn", "h11", "orjson"):
        try:
            info["versions"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        info["loadavg_before"] = Path("/proc/loadavg").read_text().split()[:3]
        info["mem_total"] = (
            Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
        )
    except OSError:
        pass
    try:  # read-only: which commit the working tree is on, and whether it has local changes
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        info["tree_dirty"] = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        )
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("parse")
    c = sub.add_parser("client")
    c.add_argument("--seconds", type=float, default=3)
    c.add_argument("--rounds", type=int, default=3)
    lat = sub.add_parser("latency")
    lat.add_argument("--rounds", type=int, default=5)
    lat.add_argument("--requests", type=int, default=2000)
    t = sub.add_parser("throughput")
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--seconds", type=float, default=8)
    t.add_argument("--connections", type=int, default=32)
    p = sub.add_parser("peers", help="edgegw vs mock direct, bare Hypercorn-Trio, LiteLLM")
    p.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    p.add_argument("--seconds", type=float, default=7, help="per throughput cell")
    p.add_argument("--skip", type=float, default=1.5, help="warm-up seconds not counted per cell")
    p.add_argument("--connections", type=int, nargs="+", default=[32, 128])
    p.add_argument("--latency-rounds", type=int, default=5)
    p.add_argument("--latency-seconds", type=float, default=3, help="bound per c=1 cell")
    p.add_argument("--latency-requests", type=int, default=2000)
    p.add_argument("--latency-streams", type=int, default=500)
    s = sub.add_parser("streaming", help="SSE relay: events/s unpaced, added gap paced")
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--seconds", type=float, default=6, help="per unpaced cell")
    s.add_argument("--skip", type=float, default=1.5, help="warm-up seconds not counted per cell")
    s.add_argument("--connections", type=int, default=256)
    s.add_argument(
        "--token-rate", type=float, nargs="+", default=[20.0, 50.0], help="paced mock: tokens/s"
    )
    s.add_argument(
        "--paced-seconds", type=float, default=4, help="per paced cell (streams then finish)"
    )
    s.add_argument("--c1-streams", type=int, default=3, help="paced streams per c=1 cell")
    m = sub.add_parser("memory", help="RSS idle, per idle connection, under load, soak")
    m.add_argument("--conns", type=int, default=2000, help="idle keep-alive connections")
    m.add_argument("--batch", type=int, default=50, help="connections opened at once")
    m.add_argument("--load-seconds", type=float, default=8)
    m.add_argument("--soak-seconds", type=float, default=180)
    m.add_argument("--soak-connections", type=int, default=32)
    m.add_argument("--soak-bare", action="store_true", help="soak the bare app too")
    pr = sub.add_parser("profile", help="py-spy of the gateway under a 32-connection load")
    pr.add_argument("--seconds", type=float, default=10)
    pr.add_argument("--rate", type=int, default=200)
    pr.add_argument("--connections", type=int, default=32)
    pr.add_argument(
        "--nonblocking", action="store_true", help="py-spy --nonblocking, no native frames"
    )
    ll = sub.add_parser("llm", help="paced streams: CPU/event, RSS/stream, most streams per core")
    ll.add_argument(
        "--phases", nargs="+", choices=("cost", "capacity"), default=["cost", "capacity"]
    )
    ll.add_argument("--rounds", type=int, default=3, help="cost rounds")
    ll.add_argument("--cost-streams", type=int, default=256, help="streams in flight, cost phase")
    ll.add_argument("--step-seconds", type=float, default=8, help="measured seconds per step")
    ll.add_argument("--start", type=int, default=128, help="capacity: first step's streams")
    ll.add_argument("--max-streams", type=int, default=4096)
    ll.add_argument("--budget", type=float, default=1200, help="capacity phase, seconds")
    ll.add_argument("--gap-p99-ms", type=float, default=5.0)
    ll.add_argument("--tokens", type=int, default=200)
    ll.add_argument("--token-rate", type=float, default=30.0)
    ll.add_argument("--first-token-ms", type=float, default=250.0)
    ll.add_argument("--jitter", type=float, default=0.2)
    ll.add_argument("--baseline", metavar="REF", help="also edgegw at git commit REF (Python)")
    ll.add_argument("--skip", nargs="*", default=[], help="targets left out, e.g. litellm")
    ll.add_argument("--max-wait", type=float, default=300, help="seconds to wait for quiet")
    pool_arguments(sub.add_parser("pool", help="upstream pool under many streams to one host"))
    accept_arguments(sub.add_parser("accept", help="--workers 2: shared socket vs SO_REUSEPORT"))
    capacity_arguments(
        sub.add_parser("capacity", help="every capacity ratio in one run, Go mock and generator")
    )
    a = sub.add_parser("all")
    a.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()
    results: dict = {
        "machine": machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "args": {k: v for k, v in vars(ns).items() if k != "cmd"},
    }
    if ns.cmd == "all":
        results["parse"] = cmd_parse(ns)
        results["client"] = cmd_client(argparse.Namespace(seconds=3, rounds=ns.rounds))
        results["latency"] = cmd_latency(
            argparse.Namespace(rounds=max(ns.rounds, 5), requests=2000)
        )
        results["throughput"] = cmd_throughput(
            argparse.Namespace(rounds=ns.rounds, seconds=8, connections=32)
        )
    else:
        results[ns.cmd] = {
            "parse": cmd_parse,
            "client": cmd_client,
            "latency": cmd_latency,
            "throughput": cmd_throughput,
            "peers": cmd_peers,
            "streaming": cmd_streaming,
            "memory": cmd_memory,
            "profile": cmd_profile,
            "llm": cmd_llm,
            "pool": cmd_pool,
            "accept": cmd_accept,
            "capacity": cmd_capacity,
        }[ns.cmd](ns)
        if ns.cmd == "peers":
            print_peers(results["peers"])
        elif ns.cmd == "streaming":
            print_streaming(results["streaming"])
        elif ns.cmd == "llm":
            print_llm(results["llm"])
    results["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{ns.cmd}-{results['when'].replace(':', '')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
