"""The scenario `embeddings`: what one /v1/embeddings request of many inputs costs through
the gateway, next to the same request sent to the upstream direct.

The Go mock answers OpenAI's embeddings (``--embedding-dim`` floats a vector, 1,536 as
text-embedding-3-small); one request carries ``--inputs`` texts (256 by default) of about 40
words. Targets, interleaved in a new random order each round, fresh gateways every round,
medians of rounds:

- ``direct``: the Go load generator to the mock itself, base64 (the SDK's default);
- ``float``: through edgegw to ``openai/``, floats: the answer relayed as it came;
- ``base64``: through edgegw to ``openai/``, base64, which OpenAI encodes: relayed as it came;
- ``encoded``: through edgegw to ``google/``, base64, which its record says it does not
  encode: edgegw asks for floats and encodes every vector itself.

The gateway runs on core 1, the mock and the closed loop (``--connections``, 1 by default)
on core 0. Figures: the gateway's CPU ms per request, the p50 latency of each target and its
difference to ``direct``'s (what a client of the gateway waits more).
"""

from __future__ import annotations

import argparse
import json
import os
import random

from bench import gopeer
from bench.harness import (
    CORE_A,
    CORE_B,
    Result,
    body_file,
    edgegw,
    free_port,
    generate,
    go_mock,
    median,
    per_request_us,
    scratch_dir,
    spread,
    wait_quiet,
)

TARGETS = ("direct", "float", "base64", "encoded")
PATH = "/v1/embeddings"
WORDS = ("the quick brown fox jumps over a lazy dog while edge gateways stream tokens to "
         "clients").split()  # fmt: skip


def _body(model: str, inputs: int, encoding: str | None) -> bytes:
    texts = [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(40)) for i in range(inputs)]
    doc: dict[str, object] = {"model": model, "input": texts}
    if encoding is not None:
        doc["encoding_format"] = encoding
    return json.dumps(doc, separators=(",", ":")).encode()


def run(ns: argparse.Namespace) -> Result:
    os.sched_setaffinity(0, {CORE_A})
    binary = gopeer.build()
    quiet = wait_quiet(max_wait_s=ns.max_wait)
    work = scratch_dir()
    mock_port = free_port()
    google = {
        "GOOGLE_API_URL": f"http://127.0.0.1:{mock_port}/v1",
        "GOOGLE_API_KEY": "bench-key",
        "EDGEGW_EMBEDDINGS_MAX_INPUTS": str(max(2048, ns.inputs)),
    }
    bodies = {
        "direct": _body("text-embedding-3-small", ns.inputs, "base64"),
        "float": _body("openai/text-embedding-3-small", ns.inputs, None),
        "base64": _body("openai/text-embedding-3-small", ns.inputs, "base64"),
        "encoded": _body("google/gemini-embedding-001", ns.inputs, "base64"),
    }
    files = {name: body_file(work, name, body) for name, body in bodies.items()}
    cpu: dict[str, list[float | None]] = {name: [] for name in ns.targets}
    p50: dict[str, list[float | None]] = {name: [] for name in ns.targets}
    with go_mock(binary, mock_port, "--embedding-dim", str(ns.dim)):
        for round_ in range(ns.rounds):
            order = list(ns.targets)
            random.shuffle(order)
            for name in order:
                args = ["load", "--path", PATH, "--body-file", files[name],
                        "--connections", str(ns.connections), "--seconds", str(ns.seconds),
                        "--warmup-s", str(ns.warmup_s)]  # fmt: skip
                if name == "direct":
                    r = generate(binary, [*args, "--port", str(mock_port)])
                else:
                    port = free_port()
                    with edgegw(port, mock_port, CORE_B, google) as gw:
                        r = generate(binary, [*args, "--port", str(port)], gw.pid)
                assert r["errors"] == 0 and r["ok"], (name, r["errors_by_kind"])
                cpu[name].append(None if name == "direct" else per_request_us(r))
                p50[name].append(r["latency_ms"]["p50"])
                print(f"  round {round_ + 1} {name:8s} p50 {r['latency_ms']['p50']} ms, "
                      f"{per_request_us(r) if name != 'direct' else '-'} µs CPU/req", flush=True)  # fmt: skip
    out: Result = {
        "quiet": quiet,
        "inputs": ns.inputs,
        "dim": ns.dim,
        "connections": ns.connections,
    }
    out["gateway_cpu_ms_per_req"] = {
        name: spread([None if v is None else v / 1000 for v in values])
        for name, values in cpu.items()
        if name != "direct"
    }
    out["p50_ms"] = {name: spread(values) for name, values in p50.items()}
    direct = median(p50.get("direct", []))
    out["added_p50_ms"] = {
        name: round(m - direct, 3)
        for name, values in p50.items()
        if name != "direct" and direct is not None and (m := median(values)) is not None
    }
    print(f"{ns.inputs} inputs x {ns.dim} floats: added p50 {out['added_p50_ms']} ms; gateway CPU "
          + ", ".join(f"{k} {v['median']} ms" for k, v in out["gateway_cpu_ms_per_req"].items()))  # fmt: skip
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    p.add_argument("--inputs", type=int, default=256, help="texts a request")
    p.add_argument("--dim", type=int, default=1536, help="floats a vector")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=5, help="measured seconds per cell")
    p.add_argument("--warmup-s", type=float, default=1.0, help="per cell, not counted")
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--max-wait", type=float, default=120, help="seconds to wait for quiet")


SMOKE = ["--rounds", "1", "--seconds", "0.3", "--warmup-s", "0.1", "--inputs", "4",
         "--dim", "8", "--max-wait", "0"]  # fmt: skip
