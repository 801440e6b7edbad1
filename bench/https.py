"""The scenario `https`: what serving HTTPS costs a proxied request.

Three gateways in front of the Go mock, the same certificate for the two that serve TLS:
`http` (plain HTTP/1.1, the reference), `https` (edgegw.http1's TLS, the default) and
`https_hypercorn` (SERVER_HTTP2_ENABLED=true: Hypercorn serves TLS so that it can offer h2;
the client offers only http/1.1, so all three answer HTTP/1.1). The gateways pinned to core 1,
the mock and the Go closed loop (keep-alive connections, `--tls-ca` for HTTPS) on core 0;
rounds interleaved in random order, medians. Server CPU µs per answered request (from /proc)
is the figure to compare, req/s beside it. A cell with a failed request fails the run.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from contextlib import ExitStack
from typing import Any

import trustme

from bench import gopeer
from bench.harness import (
    CHAT,
    CORE_A,
    CORE_B,
    Others,
    Result,
    body_file,
    edgegw,
    free_port,
    generate,
    go_mock,
    per_request_us,
    ratio,
    scratch_dir,
    spread,
    wait_quiet,
)

TARGETS = ("http", "https", "https_hypercorn")


def run(ns: argparse.Namespace) -> Result:
    os.sched_setaffinity(0, {CORE_A})
    binary = gopeer.build()
    quiet = wait_quiet(max_wait_s=ns.max_wait)
    work = scratch_dir()
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key, ca_pem = work / "cert.pem", work / "key.pem", work / "ca.pem"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())
    ca_pem.write_bytes(ca.cert_pem.bytes())
    chat = body_file(work, "chat", CHAT)
    tls = {"SERVER_TLS_CERT_PATH": str(cert), "SERVER_TLS_KEY_PATH": str(key)}
    env: dict[str, dict[str, str]] = {
        "http": {},
        "https": tls,
        "https_hypercorn": {**tls, "SERVER_HTTP2_ENABLED": "true"},
    }
    ports = {name: free_port() for name in TARGETS}
    mock_port = free_port()
    pids: dict[str, int] = {}
    cells: dict[str, list[dict[str, Any]]] = {name: [] for name in TARGETS}

    def cell(name: str, seconds: float) -> Result:
        args = ["load", "--port", str(ports[name]), "--body-file", chat, "--connections",
                str(ns.connections), "--seconds", str(seconds), "--warmup-s", "0.2"]  # fmt: skip
        if name != "http":
            args += ["--tls-ca", str(ca_pem)]
        r = generate(binary, args, pids[name])
        assert r["errors"] == 0 and r["ok"], (name, r["errors_by_kind"])
        return {"rps": r["rps"], "cpu_us_per_req": per_request_us(r)}

    with ExitStack() as stack:
        stack.enter_context(go_mock(binary, mock_port))
        for name in TARGETS:
            gw = stack.enter_context(edgegw(ports[name], mock_port, CORE_B, env[name]))
            pids[name] = gw.pid
        for name in TARGETS:  # warm-up: connections, pools, code paths
            cell(name, min(1.0, ns.seconds))
        for round_ in range(ns.rounds):
            order = list(TARGETS)
            random.shuffle(order)
            for name in order:
                with Others(list(pids.values())) as others:
                    c = cell(name, ns.seconds)
                c["others_cores"] = round(others.cores, 3)
                cells[name].append(c)
                print(f"  round {round_ + 1} {name:16s} {c['rps']:7.0f} req/s "
                      f"{c['cpu_us_per_req']} µs CPU/req (others {others.cores:.2f} cores)",
                      flush=True)  # fmt: skip
                time.sleep(0.2)
    out: Result = {"quiet": quiet, "connections": ns.connections, "cells": cells}
    for name in TARGETS:
        out[name] = {k: spread(c[k] for c in cells[name]) for k in ("rps", "cpu_us_per_req")}
        print(f"{name:16s} {out[name]['rps']['median']} req/s, "
              f"{out[name]['cpu_us_per_req']['median']} µs CPU/req (medians)")  # fmt: skip
    cpu = {name: out[name]["cpu_us_per_req"]["median"] for name in TARGETS}
    out["tls_cpu_us_per_req"] = (
        round(cpu["https"] - cpu["http"], 1) if cpu["https"] and cpu["http"] else None
    )
    out["hypercorn_vs_http1_cpu"] = ratio(cpu["https_hypercorn"], cpu["https"])
    print(f"TLS adds {out['tls_cpu_us_per_req']} µs CPU a request; Hypercorn's TLS takes "
          f"{out['hypercorn_vs_http1_cpu']}x edgegw.http1's CPU a request")  # fmt: skip
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=5, help="per cell")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--max-wait", type=float, default=120, help="seconds to wait for quiet")


SMOKE = ["--rounds", "1", "--seconds", "0.3", "--connections", "2", "--max-wait", "0"]
