"""The scenario `https`: what serving HTTPS costs a proxied request.

Three gateways in front of the Go mock, the same certificate for the two that serve TLS:
`http` (plain HTTP/1.1, the reference), `https` (edgegw.http1's TLS, the default) and
`https_hypercorn` (SERVER_HTTP2_ENABLED=true: Hypercorn serves TLS so that it can offer h2;
the client offers only http/1.1, so all three answer HTTP/1.1). With `--inference-gateway`,
that binary beside them, plain (`igw_http`) and with the same certificate (`igw_https`, its
SERVER_TLS_CERT_PATH / SERVER_TLS_KEY_PATH, and the CA in SSL_CERT_FILE: it calls its own
/proxy over that listener). The gateways pinned to core 1, the mock and the
Go closed loop (keep-alive connections, `--tls-ca` for HTTPS) on core 0; rounds interleaved in
random order, medians. A cell with a failed request fails the run.

Cells (`--cells`): `rps` (`--connections` requests in flight: server CPU µs per answered
request from /proc, the figure to compare, req/s beside it), `streams16` (16 connections of
streamed answers of 51 events: streams/s and CPU a stream) and `c1` (one request at a time:
latency p50, and added over the mock's own p50 in the same round, `direct`).
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
from bench.capacity import inference_gateway_env
from bench.harness import (
    CHAT,
    CHAT_DIRECT,
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
    process,
    ratio,
    scratch_dir,
    spread,
    streaming,
    wait_quiet,
)

TARGETS = ("http", "https", "https_hypercorn")
PEERS = ("igw_http", "igw_https")  # with --inference-gateway
CELLS = ("rps", "streams16", "c1")
STREAM_TOKENS = 48  # 51 events, as bench capacity's streams16


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
    bodies = {
        "rps": body_file(work, "chat", CHAT),
        "c1": body_file(work, "chat", CHAT),
        "streams16": body_file(work, "stream", streaming(CHAT, STREAM_TOKENS)),
        "direct": body_file(work, "direct", CHAT_DIRECT),
    }
    tls = {"SERVER_TLS_CERT_PATH": str(cert), "SERVER_TLS_KEY_PATH": str(key)}
    env: dict[str, dict[str, str]] = {
        "http": {},
        "https": tls,
        "https_hypercorn": {**tls, "SERVER_HTTP2_ENABLED": "true"},
        "igw_http": {},
        # inference-gateway sends /v1 requests on to its own /proxy over its own listener,
        # so it must trust its certificate: Go reads SSL_CERT_FILE for its roots.
        "igw_https": {**tls, "SSL_CERT_FILE": str(ca_pem)},
    }
    targets = TARGETS + (PEERS if ns.inference_gateway else ())
    ports = {name: free_port() for name in targets}
    mock_port = free_port()
    pids: dict[str, int] = {}
    cells: dict[str, dict[str, list[dict[str, Any]]]] = {
        cell: {name: [] for name in targets} for cell in ns.cells
    }
    direct: list[float] = []  # the mock's own latency p50, one a round of `c1`

    def measure(name: str, cell: str, seconds: float) -> Result:
        conns = {"rps": ns.connections, "streams16": 16, "c1": 1}[cell]
        port = mock_port if name == "direct" else ports[name]
        args = ["load", "--port", str(port), "--body-file", bodies[name if name == "direct" else cell],
                "--connections", str(conns), "--seconds", str(seconds), "--warmup-s", "0.2"]  # fmt: skip
        if name.endswith("https") or name == "https_hypercorn":
            args += ["--tls-ca", str(ca_pem)]
        if cell == "streams16":
            args.append("--stream")
        r = generate(binary, args, pids.get(name))
        assert r["errors"] == 0 and r["ok"], (name, cell, r["errors_by_kind"])
        return {"rps": r["rps"], "cpu_us_per_req": per_request_us(r) if name != "direct" else None,
                "p50_ms": r["latency_ms"]["p50"]}  # fmt: skip

    with ExitStack() as stack:
        stack.enter_context(go_mock(binary, mock_port))
        for name in targets:
            if name.startswith("igw_"):
                igw_env = {**inference_gateway_env(mock_port, ports[name]), **env[name]}
                proc = stack.enter_context(
                    process([], CORE_B, igw_env, ports[name], exe=ns.inference_gateway)
                )
            else:
                proc = stack.enter_context(edgegw(ports[name], mock_port, CORE_B, env[name]))
            pids[name] = proc.pid
        for name in targets:  # warm-up: connections, pools, code paths
            for cell in ns.cells:
                measure(name, cell, min(1.0, ns.seconds))
        for round_ in range(ns.rounds):
            order = [(cell, name) for cell in ns.cells for name in targets]
            random.shuffle(order)
            if "c1" in ns.cells:
                direct.append(measure("direct", "c1", ns.seconds)["p50_ms"])
            for cell, name in order:
                with Others(list(pids.values())) as others:
                    c = measure(name, cell, ns.seconds)
                c["others_cores"] = round(others.cores, 3)
                cells[cell][name].append(c)
                print(f"  round {round_ + 1} {cell:9s} {name:16s} {c['rps']:7.0f}/s "
                      f"{c['cpu_us_per_req']} µs CPU each, p50 {c['p50_ms']} ms "
                      f"(others {others.cores:.2f} cores)", flush=True)  # fmt: skip
                time.sleep(0.2)
    out: Result = {"quiet": quiet, "connections": ns.connections, "cells": cells}
    if direct:
        out["direct_p50_ms"] = spread(direct)
    for cell in ns.cells:
        got = out[cell] = {}
        for name in targets:
            got[name] = {k: spread(c[k] for c in cells[cell][name])
                         for k in ("rps", "cpu_us_per_req", "p50_ms")}  # fmt: skip
            if cell == "c1" and direct:
                added = [c["p50_ms"] - d for c, d in zip(cells[cell][name], direct, strict=True)]
                got[name]["added_p50_ms"] = spread(added, 4)
            print(f"{cell:9s} {name:16s} {got[name]['rps']['median']}/s, "
                  f"{got[name]['cpu_us_per_req']['median']} µs CPU each, "
                  f"p50 {got[name]['p50_ms']['median']} ms (medians)")  # fmt: skip
    if "rps" in ns.cells:
        cpu = {name: out["rps"][name]["cpu_us_per_req"]["median"] for name in TARGETS}
        out["tls_cpu_us_per_req"] = (
            round(cpu["https"] - cpu["http"], 1) if cpu["https"] and cpu["http"] else None
        )
        out["hypercorn_vs_http1_cpu"] = ratio(cpu["https_hypercorn"], cpu["https"])
        print(f"TLS adds {out['tls_cpu_us_per_req']} µs CPU a request; Hypercorn's TLS takes "
              f"{out['hypercorn_vs_http1_cpu']}x edgegw.http1's CPU a request")  # fmt: skip
    if ns.inference_gateway:
        out["ratios"] = ratios = peer_ratios(out, ns.cells)
        for name, value in ratios.items():
            print(f"  {name}: {value}")
    return out


def peer_ratios(out: Result, cells: list[str]) -> dict[str, float | None]:
    """edgegw against inference-gateway, plain and over TLS, cell by cell (medians)."""
    got: dict[str, float | None] = {}
    for mine, theirs, kind in (("http", "igw_http", "plain"), ("https", "igw_https", "tls")):
        for cell in cells:
            a, b = out[cell][mine], out[cell][theirs]
            if cell == "c1":
                if "added_p50_ms" in a:
                    got[f"{kind}_added_p50_c1"] = ratio(
                        a["added_p50_ms"]["median"], b["added_p50_ms"]["median"]
                    )
                continue
            got[f"{kind}_{cell}"] = ratio(a["rps"]["median"], b["rps"]["median"])
            got[f"{kind}_{cell}_cpu"] = ratio(
                a["cpu_us_per_req"]["median"], b["cpu_us_per_req"]["median"]
            )
    return got


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=5, help="per cell")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--max-wait", type=float, default=120, help="seconds to wait for quiet")
    p.add_argument("--cells", nargs="+", choices=CELLS, default=["rps"])
    p.add_argument(
        "--inference-gateway",
        metavar="PATH",
        help="an inference-gateway binary (built from its source at a named tag): plain and "
        "over TLS with the same certificate, beside edgegw",
    )


SMOKE = ["--rounds", "1", "--seconds", "0.3", "--connections", "2", "--max-wait", "0",
         "--cells", *CELLS]  # fmt: skip
