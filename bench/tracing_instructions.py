"""What tracing costs a proxied request in instructions: exact counts, where CPU time on a
shared 2-core machine moves by +-10 % between seconds.

The gateway runs under valgrind's callgrind (instrumentation off until the requests to count:
`callgrind_control -i on`), in front of bench/gopeer's mock (200-token answers), sampling
only a client's sampled trace (bench.tracing's ROOTS_OFF). One keep-alive connection sends
`--requests` chat requests with a sampled `traceparent` (each recorded and exported), then as
many with the same header under a name tracing does not read (`x-trace-ctx`: the off path
and the sampling decision, the same bytes parsed), counters zeroed and
dumped around each run. Reported: instructions and heap allocations (glibc `malloc` calls)
per request of each kind, and the functions whose own instructions differ most. User space
only: system calls are not counted (bench.tracing's stime share is the kernel's part), and an
instruction is not a fixed time (cache misses: `--cache-sim`).

    python -m bench.tracing_instructions [--requests 200] [--top 20] [--cache-sim]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import gopeer
from bench.harness import CHAT, free_port
from bench.tracing import ROOTS_OFF

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
KINDS = {"sampled": ("traceparent", PARENT), "no context": ("x-trace-ctx", PARENT)}


def _request(header: tuple[str, str]) -> bytes:
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += "Content-Type: application/json\r\n"
    head += f"{header[0]}: {header[1]}\r\n"
    head += f"Content-Length: {len(CHAT)}\r\n\r\n"
    return head.encode() + CHAT


def _exchange(sock: socket.socket, data: bytes, n: int) -> None:
    """`n` requests one after the other, each answer read whole (content-length)."""
    for _ in range(n):
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
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            assert length is not None and head.startswith(b"HTTP/1.1 200"), head[:200]
            if len(rest) >= int(length[1]):
                break


def _calls(path: Path, callee: str) -> int:
    """Calls to `callee` in a callgrind dump (names compressed as `(id) name`)."""
    names: dict[str, str] = {}
    total, target = 0, False
    for line in path.read_text().splitlines():
        if line.startswith("cfn="):
            m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line)
            if m and m[2]:
                names[m[1]] = m[2]
            target = m is not None and names.get(m[1]) == callee
        elif line.startswith("fn=("):
            m = re.match(r"fn=\((\d+)\) (.*)", line)
            if m:
                names[m[1]] = m[2]
        elif line.startswith("calls=") and target:
            total += int(line[6:].split()[0])
    return total


def _self_costs(path: Path) -> tuple[dict[str, int], int]:
    """Each function's own instructions (callgrind_annotate), and the total."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(path)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    costs: dict[str, int] = collections.Counter()
    total = 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if not m:
            continue
        n, name = int(m[1].replace(",", "")), m[2]
        if "PROGRAM TOTALS" in name:
            total = n
            continue
        name = re.sub(r" \[[^\]]*\]$", "", re.sub(r"^/tmp/python-build[^:]*/", "", name))
        costs[name] += n
    return costs, total


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_instructions")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--cache-sim", action="store_true", help="also simulate the caches")
    ns = parser.parse_args()
    binary = gopeer.build()
    out = Path(tempfile.mkdtemp(prefix="edgegw-callgrind-"))
    mock_port, port = free_port(), free_port()
    env = {
        **os.environ,
        **ROOTS_OFF,
        "OPENAI_API_URL": f"http://127.0.0.1:{mock_port}/v1",
        "OPENAI_API_KEY": "bench-key",
        "LOG_LEVEL": "WARNING",
        "EDGEGW_WORKERS": "1",
        "PYTHONHASHSEED": "0",
        "TELEMETRY_ENABLED": "true",
        "TELEMETRY_METRICS_PORT": "0",
        "TELEMETRY_TRACING_ENABLED": "true",
        "TELEMETRY_TRACING_OTLP_ENDPOINT": f"http://127.0.0.1:{mock_port}",
    }
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={out}/callgrind.out.%p"]  # fmt: skip
    if ns.cache_sim:
        valgrind += ["--cache-sim=yes", "--branch-sim=yes"]
    mock = subprocess.Popen([str(binary), "mock", "--port", str(mock_port), "--tokens", "200"],
                            stdout=subprocess.DEVNULL)  # fmt: skip
    with open(out / "valgrind.log", "w") as log:
        gw = subprocess.Popen([*valgrind, sys.executable, "-m", "edgegw", "serve", "--port",
                               str(port)], env=env, stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), 1)
                break
            except OSError:
                if time.monotonic() > deadline or gw.poll() is not None:
                    raise RuntimeError(f"the gateway did not start: {out}/valgrind.log") from None
                time.sleep(0.5)
        with sock:
            for header in KINDS.values():
                _exchange(sock, _request(header), 30)  # warm: imports, caches, pools

            def control(*args: str) -> None:
                subprocess.run(["callgrind_control", *args, str(gw.pid)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

            for i, header in enumerate(KINDS.values()):
                control("-i", "on")
                control("--zero")
                _exchange(sock, _request(header), ns.requests)
                control(f"--dump=kind{i}")
                control("-i", "off")
    finally:
        gw.terminate()
        gw.wait(60)
        mock.terminate()
        mock.wait(10)
    dumps = sorted(out.glob("callgrind.out.*.*"), key=lambda p: int(p.suffix[1:]))
    n = ns.requests
    results = {}
    for kind, dump in zip(KINDS, dumps, strict=True):
        costs, total = _self_costs(dump)
        results[kind] = (costs, total, _calls(dump, "malloc"))
        print(f"{kind:11s} {total / n:11,.0f} instructions a request, "
              f"{results[kind][2] / n:5.1f} malloc calls")  # fmt: skip
    (a, ta, ma), (b, tb, mb) = results.values()
    print(f"tracing adds {(ta - tb) / n:+,.0f} instructions a request "
          f"({100 * (ta - tb) / tb:+.1f} %), {(ma - mb) / n:+.1f} malloc calls")  # fmt: skip
    if ns.cache_sim:
        for dump, kind in zip(dumps, KINDS, strict=True):
            text = dump.read_text()
            events = re.search(r"^events: (.*)$", text, re.M)
            summary = re.search(r"^summary: (.*)$", text, re.M)
            assert events and summary
            per = {
                e: int(v) / n for e, v in zip(events[1].split(), summary[1].split(), strict=True)
            }
            print(f"  {kind}: " + ", ".join(f"{e} {v:,.0f}" for e, v in per.items()))
    rows = sorted(((a.get(k, 0) - b.get(k, 0)) / n, k) for k in set(a) | set(b))
    print(f"functions whose own instructions differ most (a request, {' - '.join(KINDS)}):")
    for d, k in [*reversed(rows[-ns.top :]), *rows[:5]]:
        print(f"  {d:+9,.0f}  {k[:120]}")
    print(f"dumps: {out}")


if __name__ == "__main__":
    main()
