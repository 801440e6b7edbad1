"""`python -m bench peers`: edgegw side by side with the mock direct, the bare Hypercorn-Trio
app and LiteLLM's proxy, in one run, interleaved rounds, medians.

Layouts (sched_setaffinity, applied to every thread of each server's process tree):

- latency at one request in flight: every server and the load generator on core 0 (on this
  2-vCPU VM cross-core wake-ups dominate the tail at c=1; bench-method §4.1);
- throughput at 32 and 128 connections: the server under test has core 1 (the other servers
  sit idle there), the mock and the load generator share core 0.

LiteLLM runs from its own virtualenv (``LITELLM_BIN``, default /tmp/litellm-venv/bin/litellm)
with a generated config routing ``gpt-4o-mini`` to ``openai/gpt-4o-mini`` at the mock, one
uvicorn worker, no master key (edgegw runs without client auth here too), the bundled model
cost map (no fetch), and outbound HTTP proxies pointed at a dead loopback port so that nothing
it might try to fetch leaves the machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.harness import (
    CHAT,
    CHAT_DIRECT,
    CORE_A,
    CORE_B,
    PATH,
    CoreMeter,
    MiB,
    RssSampler,
    bare,
    cell,
    cpu_seconds,
    free_port,
    gateway,
    load,
    loadavg,
    mock_args,
    pin_tree,
    process,
    rss_bytes,
    scratch_dir,
    streaming,
    wait_quiet,
)

LITELLM = os.environ.get("LITELLM_BIN", "/tmp/litellm-venv/bin/litellm")
LITELLM_MODEL = "gpt-4o-mini"  # the model_name in the generated config
TARGETS = ("mock_direct", "bare_hypercorn", "edgegw", "litellm")


def litellm_config(mock_port: int) -> str:
    return f"""model_list:
  - model_name: {LITELLM_MODEL}
    litellm_params:
      model: openai/{LITELLM_MODEL}
      api_base: http://127.0.0.1:{mock_port}/v1
      api_key: sk-bench-dummy
litellm_settings:
  set_verbose: false
  json_logs: false
  turn_off_message_logging: true
general_settings:
  disable_spend_logs: true
  disable_error_logs: true
  dangerously_permit_weak_or_unset_master_key: true
"""


def litellm_versions() -> dict:
    py = str(Path(LITELLM).with_name("python"))
    code = (
        "import importlib.metadata as m, json\n"
        "out = {}\n"
        "for p in ('litellm', 'uvicorn', 'fastapi', 'openai', 'httpx', 'aiohttp'):\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))\n"
    )
    import json

    try:
        return json.loads(
            subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60).stdout
        )
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return {"error": repr(e)}


def _get(port: int, path: str, timeout_s: float = 2.0) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as r:
        r.read()
        return r.status


@contextmanager
def litellm(port: int, mock_port: int, cpu: int, ready_s: float = 240.0):
    """LiteLLM's proxy, ready (liveliness answers) within ``ready_s``; yields (proc, info)."""
    work = scratch_dir()
    cfg = work / "litellm.yaml"
    cfg.write_text(litellm_config(mock_port))
    dead = "http://127.0.0.1:9"  # discard port: any outbound fetch fails at once, locally
    env = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "HTTP_PROXY": dead,
        "HTTPS_PROXY": dead,
        "http_proxy": dead,
        "https_proxy": dead,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    args = ["--config", str(cfg), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    t0 = time.monotonic()
    with process(args, cpu, env, exe=LITELLM, log=work / "litellm.log") as proc:
        deadline = t0 + ready_s
        while True:
            if proc.poll() is not None:
                tail = (work / "litellm.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"litellm exited with {proc.returncode}:\n{tail}")
            try:
                if _get(port, "/health/liveliness") == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"litellm not ready after {ready_s:.0f} s (log: {work})")
            time.sleep(0.5)
        yield proc, {"ready_s": round(time.monotonic() - t0, 1), "log": str(work / "litellm.log")}


def _median(values: list[float]) -> float:
    values = [v for v in values if v == v]  # drop NaN
    return statistics.median(values) if values else float("nan")


def cmd_peers(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_A})
    quiet = wait_quiet()
    mock_port, bare_port, gw_port, ll_port = (free_port() for _ in range(4))
    bodies = {
        "mock_direct": CHAT_DIRECT,
        "bare_hypercorn": CHAT,
        "edgegw": CHAT,
        "litellm": CHAT_DIRECT,  # LiteLLM wants the model_name of its config
    }
    ports = {
        "mock_direct": mock_port,
        "bare_hypercorn": bare_port,
        "edgegw": gw_port,
        "litellm": ll_port,
    }
    out: dict = {"quiet": quiet, "litellm_versions": litellm_versions()}
    with ExitStack() as stack:
        mock = stack.enter_context(process(mock_args(mock_port), CORE_A, port=mock_port))
        bare_proc = stack.enter_context(bare(bare_port, CORE_B))
        gw = stack.enter_context(gateway(gw_port, mock_port, CORE_B))
        ll, ll_info = stack.enter_context(litellm(ll_port, mock_port, CORE_B))
        pids = {
            "mock_direct": mock.pid,
            "bare_hypercorn": bare_proc.pid,
            "edgegw": gw.pid,
            "litellm": ll.pid,
        }
        out["litellm_ready_s"] = ll_info["ready_s"]
        time.sleep(2)
        out["rss_idle_mib"] = {k: rss_bytes(p) / MiB for k, p in pids.items()}
        idle0 = {k: cpu_seconds(p) for k, p in pids.items()}
        time.sleep(5)
        out["idle_cpu_share"] = {k: (cpu_seconds(p) - idle0[k]) / 5 for k, p in pids.items()}
        print(
            f"idle RSS (MiB): {', '.join(f'{k} {v:.1f}' for k, v in out['rss_idle_mib'].items())}; "
            f"litellm ready after {ll_info['ready_s']} s"
        )
        out["latency"] = _latency_phase(ns, ports, bodies, pids)
        out["throughput"] = _throughput_phase(ns, ports, bodies, pids)
        out["rss_after_mib"] = {k: rss_bytes(p) / MiB for k, p in pids.items()}
    out["summary"] = _summary(out)
    return out


def _latency_phase(ns, ports, bodies, pids) -> dict:
    for pid in pids.values():
        pin_tree(pid, CORE_A)
    time.sleep(0.5)
    rows: dict[str, dict[str, list[float]]] = {t: {} for t in TARGETS}

    def add(t: str, k: str, v: float) -> None:
        rows[t].setdefault(k, []).append(v)

    for t in TARGETS:  # warm-up: connections, pools, code paths
        load(ports[t], bodies[t], PATH, 1, 2, 300)
        load(ports[t], streaming(bodies[t]), PATH, 1, 2, 50, stream=True)
    every = list(pids.values())
    for rnd in range(ns.latency_rounds):
        order = list(TARGETS)
        random.shuffle(order)
        for t in order:
            r, others, tries = cell(
                lambda t=t: load(
                    ports[t], bodies[t], PATH, 1, ns.latency_seconds, ns.latency_requests
                ),
                every,
            )
            add(t, "p50_ms", r.percentile_ms(50))
            add(t, "p99_ms", r.percentile_ms(99))
            add(t, "requests", r.requests)
            add(t, "errors", r.errors)
            add(t, "others_cores", others)
            add(t, "attempts", tries)
            s, others, tries = cell(
                lambda t=t: load(
                    ports[t], streaming(bodies[t]), PATH, 1, ns.latency_seconds,
                    ns.latency_streams, stream=True,
                ),
                every,
            )  # fmt: skip
            add(t, "ttft_p50_ms", s.ttft_ms(50))
            add(t, "ttft_p99_ms", s.ttft_ms(99))
            add(t, "streams", s.ok)
            add(t, "stream_errors", s.errors)
            add(t, "stream_others_cores", others)
            add(t, "stream_attempts", tries)
        line = ", ".join(
            f"{t} {rows[t]['p50_ms'][-1]:.3f}/{rows[t]['ttft_p50_ms'][-1]:.3f}" for t in TARGETS
        )
        print(f"  latency round {rnd + 1}: p50/TTFT p50 ms: {line}")
    out: dict = {"layout": "everything on core 0", "rounds": rows}
    direct = rows["mock_direct"]
    for t in TARGETS:
        m = {k: _median(v) for k, v in rows[t].items()}
        for k in ("p50_ms", "p99_ms", "ttft_p50_ms", "ttft_p99_ms"):
            m[f"added_{k}"] = _median([g - d for g, d in zip(rows[t][k], direct[k], strict=True)])
        out[t] = m
    return out


def _throughput_phase(ns, ports, bodies, pids) -> dict:
    for t, pid in pids.items():
        pin_tree(pid, CORE_A if t == "mock_direct" else CORE_B)
    time.sleep(0.5)
    for t in TARGETS:
        load(ports[t], bodies[t], PATH, 32, 2, 100_000)
    out: dict = {"layout": "server under test alone on core 1; mock and load generator on core 0"}
    every = list(pids.values())
    for conns in ns.connections:
        rows: dict[str, dict[str, list[float]]] = {t: {} for t in TARGETS}
        for rnd in range(ns.rounds):
            order = list(TARGETS)
            random.shuffle(order)
            for t in order:
                cells, others, tries = cell(
                    lambda t=t, conns=conns: _throughput_cell(ns, t, ports, bodies, pids, conns),
                    every,
                )
                cells["others_cores"], cells["attempts"] = others, tries
                for k, v in cells.items():
                    rows[t].setdefault(k, []).append(v)
            print(
                f"  c={conns} round {rnd + 1}: "
                + ", ".join(
                    f"{t} {rows[t]['rps'][-1]:.0f} req/s ({rows[t]['errors'][-1]:.0f} err)"
                    for t in TARGETS
                )
            )
        res: dict = {"rounds": rows}
        for t in TARGETS:
            res[t] = {k: _median(v) for k, v in rows[t].items() if k != "error_kinds"}
            res[t]["rps_runs"] = rows[t]["rps"]
            res[t]["errors_total"] = sum(rows[t]["errors"])
        out[f"c{conns}"] = res
    return out


def _throughput_cell(ns, t: str, ports, bodies, pids, conns: int) -> dict:
    pid = pids[t]
    la = loadavg()[0]
    with CoreMeter() as meter, RssSampler(pid, 0.2) as rss:
        r = load(ports[t], bodies[t], PATH, conns, ns.seconds, 10_000_000, skip_s=ns.skip, pid=pid)
    cells: dict = {
        "rps": r.rps,
        "p50_ms": r.percentile_ms(50),
        "p99_ms": r.percentile_ms(99),
        "errors": r.errors,
        "error_rate": r.errors / max(1, r.requests),
        "cpu_us_per_req": r.server_cpu_s / max(1, r.requests) * 1e6,
        "loadgen_cpu_us_per_req": r.client_cpu_s / max(1, r.requests) * 1e6,
        "server_busy": r.server_cpu_s / r.elapsed_s if r.elapsed_s else float("nan"),
        "core1_busy": meter.busy.get(f"cpu{CORE_B}", float("nan")),
        "rss_peak_mib": rss.peak / MiB,
        "loadavg": la,
    }
    if r.errors:
        cells["error_kinds"] = {**r.error_kinds, **{str(k): v for k, v in r.statuses.items()}}
    return cells


def _summary(out: dict) -> dict:
    lat, thr = out["latency"], out["throughput"]
    s: dict = {
        "added_p50_ms": lat["edgegw"]["added_p50_ms"],
        "added_p99_ms": lat["edgegw"]["added_p99_ms"],
        "added_ttft_p50_ms": lat["edgegw"]["added_ttft_p50_ms"],
        "added_ttft_p99_ms": lat["edgegw"]["added_ttft_p99_ms"],
    }
    for key in (k for k in thr if k.startswith("c")):
        c = thr[key]
        s[f"{key}_edgegw_vs_litellm_rps"] = (
            c["edgegw"]["rps"] / c["litellm"]["rps"] if c["litellm"]["rps"] else float("inf")
        )
        s[f"{key}_edgegw_vs_litellm_cpu"] = (
            c["litellm"]["cpu_us_per_req"] / c["edgegw"]["cpu_us_per_req"]
        )
        s[f"{key}_edgegw_vs_bare_rps"] = c["edgegw"]["rps"] / c["bare_hypercorn"]["rps"]
        s[f"{key}_edgegw_vs_bare_cpu"] = (
            c["bare_hypercorn"]["cpu_us_per_req"] / c["edgegw"]["cpu_us_per_req"]
        )
        s[f"{key}_litellm_error_rate"] = c["litellm"]["error_rate"]
        s[f"{key}_edgegw_errors"] = c["edgegw"]["errors_total"]
    s["targets"] = {
        "added_p50_le_0.5ms": s["added_p50_ms"] <= 0.5,
        "added_p99_le_1ms": s["added_p99_ms"] <= 1.0,
        **{
            f"{key}_ge_5x_litellm": s[f"{key}_edgegw_vs_litellm_rps"] >= 5
            for key in thr
            if key.startswith("c")
        },
        **{
            f"{key}_ge_85pct_bare": s[f"{key}_edgegw_vs_bare_rps"] >= 0.85
            for key in thr
            if key.startswith("c")
        },
    }
    return s


def print_peers(out: dict) -> None:
    lat = out["latency"]
    print("\nlatency at c=1 (same core), medians of rounds, ms:")
    print(
        f"  {'target':15s} {'p50':>7s} {'p99':>7s} {'+p50':>7s} {'+p99':>7s} {'TTFT50':>7s} {'TTFT99':>7s} {'+TTFT50':>8s} {'+TTFT99':>8s}"
    )
    for t in TARGETS:
        m = lat[t]
        print(
            f"  {t:15s} {m['p50_ms']:7.3f} {m['p99_ms']:7.3f} {m['added_p50_ms']:7.3f} {m['added_p99_ms']:7.3f} "
            f"{m['ttft_p50_ms']:7.3f} {m['ttft_p99_ms']:7.3f} {m['added_ttft_p50_ms']:8.3f} {m['added_ttft_p99_ms']:8.3f}"
        )
    for key, c in out["throughput"].items():
        if not key.startswith("c"):
            continue
        print(f"\nthroughput {key} (server on core 1), medians:")
        for t in TARGETS:
            m = c[t]
            print(
                f"  {t:15s} {m['rps']:8.0f} req/s (runs {', '.join(f'{x:.0f}' for x in m['rps_runs'])}), "
                f"p50 {m['p50_ms']:.1f} p99 {m['p99_ms']:.1f} ms, {m['cpu_us_per_req']:.0f} µs CPU/req, "
                f"errors {m['errors_total']:.0f} ({m['error_rate'] * 100:.2f} %), RSS peak {m['rss_peak_mib']:.0f} MiB"
            )
    print(
        "\nsummary:",
        {k: (round(v, 3) if isinstance(v, float) else v) for k, v in out["summary"].items()},
    )
