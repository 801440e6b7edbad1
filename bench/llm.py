"""`python -m bench llm`: the LLM-shaped scenario (edgegw.bench.llm) against several targets
in one run, interleaved.

Targets: the paced mock direct (the instrument's own ceiling), edgegw, the bare Hypercorn-Trio
app passing the mock's stream through (bench/bare_app.py ``--upstream``: the server stack's
ceiling for a relay), LiteLLM's proxy when its virtualenv exists (bench/peers.py; skipped
with a message otherwise), and with ``--baseline REF`` a second edgegw running the Python
code of git commit REF (exported to a scratch directory with ``git archive``, with this
tree's built Rust extension: for before/after comparisons of Python changes in one run).

Layout: every server under test on core 1 (the others idle there), the mock and the load
generator on core 0. CPU per relayed event and RSS per stream are read from the server's
process tree in /proc.

Two phases:

- **cost**: ``--rounds`` rounds at a fixed ``--cost-streams`` concurrent streams, targets in a
  new random order each round; medians of CPU µs per relayed event, RSS per stream, added
  gap p99 and TTFT added;
- **capacity**: the step search of edgegw.bench.llm for every target, one step per target per
  round in random order (each target keeps its own bracket), bounded by ``--budget`` seconds
  for the whole phase.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import subprocess
import tarfile
import time
from contextlib import ExitStack
from pathlib import Path

import trio

from bench.harness import (
    CHAT,
    CHAT_DIRECT,
    CORE_A,
    CORE_B,
    PATH,
    ROOT,
    free_port,
    loadavg,
    pin_tree,
    post,
    process,
    scratch_dir,
    streaming,
    wait_quiet,
)
from bench.peers import LITELLM, litellm
from edgegw.bench import llm
from edgegw.mock import MockConfig


def _mock(port: int, m: MockConfig) -> list[str]:
    return [
        "-m", "edgegw.mock", "--port", str(port), "--tokens", str(m.tokens),
        "--token-rate", str(m.token_rate), "--first-token-ms", str(m.first_token_s * 1000),
        "--jitter", str(m.jitter), "--stamp",
    ]  # fmt: skip


def _gateway_env(mock_port: int) -> dict[str, str]:
    return {
        "OPENAI_API_URL": f"http://127.0.0.1:{mock_port}/v1",
        "OPENAI_API_KEY": "bench-key",
        "LOG_LEVEL": "WARNING",
        "EDGEGW_WORKERS": "1",
    }


def export_baseline(ref: str) -> Path:
    """The Python package at git commit `ref`, with this tree's built Rust extension."""
    work = scratch_dir() / "baseline"
    work.mkdir()
    data = subprocess.run(
        ["git", "archive", ref, "edgegw"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(work, filter="data")
    import edgegw._core as core

    shutil.copy(core.__file__, work / "edgegw" / Path(core.__file__).name)
    return work


def _cell(target: llm.Target, mock: MockConfig, spec: llm.LlmSpec, streams: int, pid: int):
    meter = llm.Meter.of_pid(pid, f"pid {pid}")

    async def go() -> dict:
        return await llm.run_step(target, mock, spec, streams, meter)

    return trio.run(go)


def cmd_llm(ns: argparse.Namespace) -> dict:
    os.sched_setaffinity(0, {CORE_A})
    quiet = wait_quiet(max_wait_s=ns.max_wait)
    mock = MockConfig(
        token_rate=ns.token_rate, tokens=ns.tokens, first_token_s=ns.first_token_ms / 1000,
        jitter=ns.jitter, stamp=True,
    )  # fmt: skip
    spec = llm.LlmSpec(
        start_streams=ns.start, max_streams=ns.max_streams, step_s=ns.step_seconds,
        budget_s=ns.budget, gap_p99_ms=ns.gap_p99_ms,
    )  # fmt: skip
    mock_port = free_port()
    ports: dict[str, int] = {}
    bodies: dict[str, bytes] = {}
    pids: dict[str, int] = {}
    out: dict = {"quiet": quiet, "mock": llm.mock_json(mock), "spec": llm.spec_json(spec)}
    with ExitStack() as stack:
        mock_proc = stack.enter_context(process(_mock(mock_port, mock), CORE_A, port=mock_port))
        ports["mock_direct"], bodies["mock_direct"], pids["mock_direct"] = (
            mock_port, CHAT_DIRECT, mock_proc.pid,
        )  # fmt: skip
        p = free_port()
        gw = stack.enter_context(
            process(["-m", "edgegw", "serve", "--port", str(p)], CORE_B, _gateway_env(mock_port), p)
        )
        ports["edgegw"], bodies["edgegw"], pids["edgegw"] = p, CHAT, gw.pid
        if ns.baseline:
            where = export_baseline(ns.baseline)
            p = free_port()
            base = stack.enter_context(
                process(
                    ["-m", "edgegw", "serve", "--port", str(p)],
                    CORE_B,
                    _gateway_env(mock_port),
                    p,
                    cwd=where,
                )  # fmt: skip
            )
            name = f"edgegw@{ns.baseline}"
            ports[name], bodies[name], pids[name] = p, CHAT, base.pid
        p = free_port()
        bare = stack.enter_context(
            process(
                [
                    "-m",
                    "bench.bare_app",
                    "--port",
                    str(p),
                    "--upstream",
                    f"http://127.0.0.1:{mock_port}/v1",
                ],
                CORE_B,
                port=p,
            )  # fmt: skip
        )
        ports["bare_hypercorn"], bodies["bare_hypercorn"], pids["bare_hypercorn"] = (
            p, CHAT, bare.pid,
        )  # fmt: skip
        if "litellm" in ns.skip:
            print("LiteLLM: skipped (--skip litellm)")
        elif not Path(LITELLM).exists():
            print(f"LiteLLM: skipped, {LITELLM} does not exist (set LITELLM_BIN to its litellm)")
        else:
            p = free_port()
            ll, info = stack.enter_context(litellm(p, mock_port, CORE_B))
            ports["litellm"], bodies["litellm"], pids["litellm"] = p, CHAT_DIRECT, ll.pid
            out["litellm_ready_s"] = info["ready_s"]
        for name in ns.skip:
            for d in (ports, bodies, pids):
                d.pop(name, None)
        for name, pid in pids.items():
            pin_tree(pid, CORE_A if name == "mock_direct" else CORE_B)
        # The shared bodies ask for max_tokens 16, which the mock honours: without this the
        # streams would be 16 tokens (0.78 s), not the nominal length the arrivals assume.
        cap = b'"max_tokens":%d' % mock.tokens
        targets = {
            n: llm.Target(
                "127.0.0.1",
                ports[n],
                post(ports[n], PATH, streaming(bodies[n].replace(b'"max_tokens":16', cap))),
            )
            for n in ports
        }
        for n, t in targets.items():  # warm-up: connections, pools, code paths
            _cell(t, mock, llm.LlmSpec(step_s=1.0), 8, pids[n])
        out["targets"] = list(targets)
        if "cost" in ns.phases:
            out["cost"] = _cost(ns, targets, mock, spec, pids)
        if "capacity" in ns.phases:
            out["capacity"] = _capacity(ns, targets, mock, spec, pids)
    return out


def _median(values: list[float]) -> float:
    values = [v for v in values if v is not None and v == v]
    return statistics.median(values) if values else float("nan")


def _cost(ns, targets, mock, spec, pids) -> dict:
    rows: dict[str, list[dict]] = {n: [] for n in targets}
    for rnd in range(ns.rounds):
        order = list(targets)
        random.shuffle(order)
        for n in order:
            rows[n].append(_cell(targets[n], mock, spec, ns.cost_streams, pids[n]))
        print(
            f"  cost round {rnd + 1} at {ns.cost_streams} streams (load {loadavg()[0]:.2f}): "
            + ", ".join(
                f"{n} {rows[n][-1]['cpu_us_per_event']} µs/event "
                f"gap p99 {(rows[n][-1]['added_gap_ms'] or {}).get('p99')} ms"
                for n in targets
            ),
            flush=True,
        )
    out: dict = {"streams": ns.cost_streams, "rounds": rows}
    for n, steps in rows.items():
        out[n] = {
            "cpu_us_per_event": _median([s["cpu_us_per_event"] for s in steps]),
            "rss_per_stream_kib": _median([s["rss_per_stream_kib"] for s in steps]),
            "added_gap_p99_ms": _median([(s["added_gap_ms"] or {}).get("p99") for s in steps]),
            "relay_lag_p99_ms": _median([(s["relay_lag_ms"] or {}).get("p99") for s in steps]),
            "ttft_added_p50_ms": _median([(s["ttft_added_ms"] or {}).get("p50") for s in steps]),
            "errors": sum(s["errors"] for s in steps),
            "gap_source": sorted({s["gap_source"] for s in steps}),
        }
    return out


def _capacity(ns, targets, mock, spec, pids) -> dict:
    searches = {n: llm.Search(spec) for n in targets}
    t0 = time.monotonic()
    estimate = llm.step_estimate_s(mock, spec)
    rnd = 0
    while True:
        live = [n for n, s in searches.items() if s.next is not None]
        if not live or time.monotonic() - t0 + estimate * len(live) > ns.budget:
            break
        rnd += 1
        random.shuffle(live)
        for n in live:
            streams = searches[n].next
            assert streams is not None
            searches[n].record(_cell(targets[n], mock, spec, streams, pids[n]))
        print(
            f"  capacity round {rnd} (load {loadavg()[0]:.2f}): "
            + ", ".join(
                f"{n} {searches[n].steps[-1]['streams']} "
                f"{'pass' if searches[n].steps[-1]['passed'] else 'FAIL'}"
                for n in live
            ),
            flush=True,
        )
    return {n: s.result() for n, s in searches.items()}


def print_llm(out: dict) -> None:
    if "cost" in out:
        c = out["cost"]
        print(f"\ncost at {c['streams']} concurrent streams, medians of rounds:")
        for n in out["targets"]:
            m = c[n]
            print(
                f"  {n:18s} {m['cpu_us_per_event']:7.1f} µs CPU/event, "
                f"{m['rss_per_stream_kib']:6.1f} KiB/stream, added gap p99 "
                f"{m['added_gap_p99_ms']:.2f} ms, lag p99 {m['relay_lag_p99_ms']:.2f} ms, "
                f"TTFT added p50 {m['ttft_added_p50_ms']:.2f} ms, errors {m['errors']}"
            )
    if "capacity" in out:
        print("\ncapacity (largest concurrent streams with added gap p99 within the limit):")
        for n in out["targets"]:
            r = out["capacity"][n]
            print(
                f"  {n:18s} {r['sustained_streams']:6d} (first failure "
                f"{r['first_failure'] or '-'}; {'complete' if r['search_complete'] else 'budget ran out'})"
            )
