"""The scenario `instructions`: what a feature adds to a proxied request in instructions,
counted exactly where CPU time on a shared 2-core machine moves by several per cent between
runs (bench/README.md, "Tenants, limits and budgets").

Each configuration of the `features` scenario named in ``--features`` gets a gateway of its own
under valgrind's callgrind, instrumentation off until the requests to count
(`callgrind_control -i on`), in front of the Go mock. One keep-alive connection sends
``--warmup`` chat requests (imports, caches, the upstream pool), then ``--requests`` counted
ones, each answer read whole before the next. Reported: instructions, glibc `malloc` calls and
calls into the Rust core (Python-to-Rust crossings) a request, each configuration's difference
from the first, and the C functions whose own instructions differ most. The ``--idle`` seconds
after the requests are counted too: that rate (timers, the tenants' usage flushed once a
second) times the requests' duration is taken out of their count and reported apart. User space only
(system calls are not counted), and an instruction is not a fixed time; the interpreter's
functions stand for the Python code they run.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trustme

from bench import gopeer
from bench.features import FEATURES, KEY, configurations
from bench.harness import Result, edgegw_env, free_port, scratch_dir, streaming

STREAM_TOKENS = 50  # the streams/s @16 cell's: 51 events an answer


def _request(body: bytes, key: bool) -> bytes:
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += "Content-Type: application/json\r\n"
    if key:
        head += f"Authorization: Bearer {KEY}\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def _exchange(sock: socket.socket, data: bytes, n: int, think_s: float = 0.0) -> int:
    """`n` requests one after the other, each 200 answer read whole (Content-Length, or a
    chunked stream to its last chunk), `think_s` between an answer and the next request;
    the SSE events of the last answer."""
    events = 0
    for i in range(n):
        if think_s and i:
            time.sleep(think_s)
        sock.sendall(data)
        buf = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the gateway closed the connection")
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if not sep:
                continue
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"not a 200 answer: {head[:200]!r}")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            if length is not None and len(rest) >= int(length[1]):
                break
            if length is None and rest.endswith(b"\r\n0\r\n\r\n"):
                break
        events = rest.count(b"data: ")
    return events


# PyO3's entry for every call of a function or method of edgegw._core: a Python-to-Rust
# crossing (object deallocations take `trampoline_unraisable`, not counted).
CROSSING = "pyo3::impl_::trampoline::trampoline"


def _costs(dump: Path) -> tuple[dict[str, int], int, dict[str, int]]:
    """Each function's own instructions, the total, and the calls to malloc and CROSSING."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(dump)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    costs: dict[str, int] = collections.Counter()
    total = 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if not m:
            continue
        name = re.sub(r"^/tmp/python-build[^:]*/", "", re.sub(r" \[[^\]]*\]$", "", m[2]))
        n = int(m[1].replace(",", ""))
        if "PROGRAM TOTALS" in name:
            total = n
        else:
            costs[name] += n
    calls = {"malloc": 0, CROSSING: 0}
    names: dict[str, str] = {}
    target: str | None = None
    for line in dump.read_text().splitlines():
        if m := re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line):
            if m[3]:
                names[m[2]] = m[3].strip()
            target = names.get(m[2]) if m[1] == "cfn" else None
        elif target in calls and line.startswith("calls="):
            calls[target] += int(line[6:].split()[0])
    return costs, total, calls


def _count(binary: Path, name: str, ns: argparse.Namespace) -> tuple[Path, Path, float, int]:
    """One configuration's gateway under callgrind: its dump of the counted requests, the dump
    of the ``--idle`` seconds after them, how long the counted requests took, and the events
    an answer held."""
    out = scratch_dir()
    mock_port, port = free_port(), free_port()
    env, body = configurations(out, mock_port, free_port())[name]
    if ns.stream:
        body = streaming(body, STREAM_TOKENS)
    if ns.first_byte_ms:  # the mock's scripted model: the model's prices no longer apply
        body = body.replace(b'"openai/gpt-4o-mini"',
                            b'"openai/mock-slow-first-byte-%d"' % ns.first_byte_ms)  # fmt: skip
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={out}/callgrind.out.%p"]  # fmt: skip
    client_tls = None
    if ns.tls:  # the gateway terminates TLS (HTTPS listener), a throwaway certificate
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1")
        leaf.private_key_and_cert_chain_pem.write_to_path(str(out / "leaf.pem"))
        env = {**env, "SERVER_TLS_CERT_PATH": str(out / "leaf.pem"),
               "SERVER_TLS_KEY_PATH": str(out / "leaf.pem")}  # fmt: skip
        client_tls = ssl.create_default_context()
        ca.configure_trust(client_tls)
    full = {**os.environ, **edgegw_env(mock_port, 1, {**env, "PYTHONHASHSEED": "0"})}
    with open(out / "valgrind.log", "w") as log:
        tokens = (
            ["--tokens", str(STREAM_TOKENS), "--token-rate", str(ns.token_rate)]
            if ns.stream
            else []
        )
        mock = subprocess.Popen([str(binary), "mock", "--port", str(mock_port), *tokens],
                                stdout=subprocess.DEVNULL)  # fmt: skip
        gw = subprocess.Popen([*valgrind, sys.executable, "-m", "edgegw", "serve", "--port",
                               str(port)], env=full, stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), 1)
                if client_tls is not None:
                    sock = client_tls.wrap_socket(sock, server_hostname="127.0.0.1")
                break
            except OSError:
                if time.monotonic() > deadline or gw.poll() is not None:
                    raise RuntimeError(f"the gateway did not start: {out}/valgrind.log") from None
                time.sleep(0.5)
        data = _request(body, name == "keys" or name.startswith("tenants"))
        with sock:
            _exchange(sock, data, ns.warmup)

            def control(*args: str) -> None:
                subprocess.run(["callgrind_control", *args, str(gw.pid)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

            control("-i", "on")
            control("--zero")
            start = time.monotonic()
            events = _exchange(sock, data, ns.requests, ns.think_ms / 1000)
            counted_s = time.monotonic() - start
            control("--dump=counted")
            time.sleep(ns.idle)  # the background's own: timers, the usage store's flushes
            control("--dump=idle")
            control("-i", "off")
    finally:
        gw.terminate()
        gw.wait(60)
        mock.terminate()
        mock.wait(10)
    counted, idle = sorted(out.glob("callgrind.out.*.*"), key=lambda p: int(p.suffix[1:]))[-2:]
    return counted, idle, counted_s, events


def run(ns: argparse.Namespace) -> Result:
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        raise SystemExit("instructions needs valgrind (Debian: valgrind)")
    binary = gopeer.build()
    n = ns.requests
    per: dict[str, Any] = {}
    base: tuple[dict[str, int], int] | None = None
    for name in ns.features:
        dump, idle_dump, counted_s, events = _count(binary, name, ns)
        costs, raw, calls = _costs(dump)
        # What runs whether or not requests come (per second, from the idle dump) is taken out
        # for the time the requests took: under callgrind a request takes ~25x its time, so a
        # once-a-second task would count 25x what it costs a request at full load.
        background = _costs(idle_dump)[1] / ns.idle if ns.idle else 0.0
        total = round(raw - background * counted_s)
        row: dict[str, Any] = {
            "instructions": round(total / n),
            "raw_instructions": round(raw / n),
            "background_per_s": round(background),
            "events": events,
            "mallocs": round(calls["malloc"] / n, 1),
            "crossings": round(calls[CROSSING] / n, 1),
        }
        if base is None:
            base = (costs, total)
        else:
            row["added"] = round((total - base[1]) / n)
            row["added_percent"] = round((total - base[1]) / base[1] * 100, 1)
            diffs = sorted(
                ((costs.get(k, 0) - base[0].get(k, 0)) / n, k) for k in {*costs, *base[0]}
            )
            row["most_added"] = [[round(d), k[:100]] for d, k in reversed(diffs[-ns.top :])]
        if ns.stream:
            row["instructions_per_event"] = round(total / n / max(1, events))
        per[name] = row
        added = f", {row['added']:+,} ({row['added_percent']:+.1f} %)" if "added" in row else ""
        print(f"  {name:16s} {row['instructions']:,} instructions a request{added}, "
              f"{row['mallocs']} malloc calls, {row['crossings']} calls into the Rust core; "
              f"background {row['background_per_s']:,} a second, {row['raw_instructions']:,} "
              "a request with it"
              + (f"; {events} events, {row['instructions_per_event']:,} instructions an event"
                 if ns.stream else ""), flush=True)  # fmt: skip
        for d, k in row.get("most_added", [])[:8]:
            print(f"      {d:+9,}  {k}")
    return {"requests": n, "configurations": per}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--features", nargs="+", choices=[f for f in FEATURES if f != "tenants_redis"],
                   default=["keys", "tenants"], help="the first is the reference")  # fmt: skip
    p.add_argument("--requests", type=int, default=300, help="requests counted a configuration")
    p.add_argument("--warmup", type=int, default=40, help="requests before counting")
    p.add_argument("--top", type=int, default=12, help="functions listed a configuration")
    p.add_argument("--idle", type=float, default=3.0,
                   help="seconds counted with no request, whose rate is taken out of the "
                        "requests' counts (0: nothing taken out)")  # fmt: skip
    p.add_argument("--stream", action="store_true",
                   help=f"streamed answers of {STREAM_TOKENS} tokens: also instructions an event")  # fmt: skip
    p.add_argument("--first-byte-ms", type=int, default=0,
                   help="the mock answers this late (openai/gpt-4o-mini's configurations): "
                        "0, it answers at once, and under callgrind's slowdown the answer is "
                        "there before the gateway reads; a real upstream is always waited for")  # fmt: skip
    p.add_argument("--think-ms", type=float, default=0.0,
                   help="the client's pause between an answer and its next request: 0, the "
                        "next is there before the gateway, slowed down by callgrind, reads "
                        "for it; a pause makes each request begin with the keep-alive wait, "
                        "as one client's sequential requests do")  # fmt: skip
    p.add_argument("--tls", action="store_true",
                   help="the client's connection over TLS, which the gateway terminates")  # fmt: skip
    p.add_argument("--token-rate", type=float, default=0.0,
                   help="with --stream: the mock's tokens a second (0: unpaced; paced, each event "
                        "is a wake-up of its own, as a model's are)")  # fmt: skip


SMOKE = ["--features", "off", "keys", "--requests", "3", "--warmup", "2", "--top", "3",
         "--idle", "0.5"]  # fmt: skip
