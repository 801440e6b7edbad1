"""`python -m bench.soak`: does edgegw's memory stay flat under a long paced-stream load?

edgegw (`--workers N`, default 2, unpinned) relays C paced streams (default 1,000: 200 tokens
at 30/s, first token after 250 ms, jitter 0.2) from the Go mock for `--minutes` (default 10),
driven by the Go open-loop generator (bench/gopeer), mock and generator on core 0. Every
`--sample-s` seconds the RSS of edgegw's process tree (supervisor and workers) and its
open file descriptors are read; the answer is the series, the RSS at the end of the first
and of the last tenth, and the errors the generator saw. Past one machine's capacity the
streams slow down and the generator's connection cap holds C + 64 in flight: memory is what
is measured, not the token gaps.

    python -m bench.soak [--streams 1000] [--minutes 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import threading
import time
from contextlib import ExitStack

from bench.capacity import _edgegw_env, paced_arguments
from bench.gopeer import build
from bench.harness import (
    CHAT,
    CORE_A,
    MiB,
    fd_count,
    free_port,
    loadavg,
    process,
    rss_bytes,
    tree_pids,
    wait_quiet,
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sample-s", type=float, default=10.0)
    paced_arguments(parser)
    ns = parser.parse_args()
    go = str(build())
    quiet = wait_quiet(max_wait_s=120)
    stream_s = ns.first_token_ms / 1000 + ns.tokens / ns.token_rate
    body = json.loads(CHAT)
    body.update(stream=True, max_tokens=ns.tokens)
    body_file = f"/tmp/edgegw-soak-body-{free_port()}.json"
    with open(body_file, "w") as f:
        json.dump(body, f)
    mock_port, port = free_port(), free_port()
    samples: list[dict] = []
    with ExitStack() as stack:
        stack.enter_context(process(
            ["mock", "--port", str(mock_port), "--tokens", str(ns.tokens), "--token-rate",
             str(ns.token_rate), "--first-token-ms", str(ns.first_token_ms), "--jitter",
             str(ns.jitter), "--stamp"], CORE_A, port=mock_port, exe=go))  # fmt: skip
        env = {**_edgegw_env(mock_port, ns.workers)}
        gw = stack.enter_context(
            process(["-m", "edgegw", "serve", "--port", str(port)], CORE_A, env, port)
        )
        for pid in tree_pids(gw.pid):  # unpinned: both cores
            for task in _tasks(pid):
                _set_affinity(task, {0, 1})
        time.sleep(3)  # the workers come up after the port opens
        seconds = ns.minutes * 60
        gen = subprocess.Popen(
            [go, "streams", "--port", str(port), "--body-file", body_file, "--streams",
             str(ns.streams), "--seconds", str(seconds), "--warmup-s", f"{stream_s:.3f}",
             "--stream-s", f"{stream_s:.3f}", "--timeout-s", "120"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            preexec_fn=lambda: _set_affinity(0, {CORE_A}),
        )  # fmt: skip
        done = threading.Event()
        t0 = time.monotonic()

        def sample() -> None:
            while not done.wait(ns.sample_s):
                pids = tree_pids(gw.pid)
                samples.append({
                    "t_s": round(time.monotonic() - t0, 1),
                    "rss_mib": round(rss_bytes(gw.pid) / MiB, 1),
                    "fds": fd_count(gw.pid),
                    "processes": len(pids),
                })  # fmt: skip

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        out, _ = gen.communicate(timeout=seconds + stream_s + 300)
        done.set()
        sampler.join()
    result = json.loads(out.strip().splitlines()[-1])
    tenth = max(1, len(samples) // 10)
    first = statistics.median(s["rss_mib"] for s in samples[:tenth])
    last = statistics.median(s["rss_mib"] for s in samples[-tenth:])
    report = {
        "streams": ns.streams,
        "minutes": ns.minutes,
        "workers": ns.workers,
        "quiet": quiet,
        "loadavg_after": loadavg(),
        "rss_first_tenth_mib": first,
        "rss_last_tenth_mib": last,
        "rss_max_mib": max(s["rss_mib"] for s in samples),
        "generator": {
            k: result.get(k)
            for k in ("in_flight", "requests", "errors_by_kind", "events_total", "added_gap_ms")
        },  # fmt: skip
        "samples": samples,
    }
    print(json.dumps(report, indent=1))


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _set_affinity(pid: int, cpus: set[int]) -> None:
    try:
        os.sched_setaffinity(pid, cpus)
    except OSError:
        pass


if __name__ == "__main__":
    main()
