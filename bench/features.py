"""The scenario `features`: what turning a feature on adds to a proxied request, measured
through the gateway as a user runs it (no call into edgegw's internals).

One gateway process per configuration, all in front of the Go mock, each pinned to core 1, the
mock and the Go closed loop (``--connections``) on core 0; rounds interleaved in random order,
fresh gateways every round (a process keeps its own luck through a run, +-10 % on this kind of
machine), medians. The figure is the server's CPU µs per answered request, and the added
cost each feature's median puts over ``off``'s:

- ``off``: telemetry on (metrics), nothing else: the reference;
- ``no_telemetry``: telemetry off too, as `capacity` runs edgegw (below the reference);
- ``tracing``: every request traced, spans exported to the Go mock's OTLP/HTTP ``/v1/traces``
  (a collector that keeps nothing);
- ``access_log``: ``LOG_LEVEL=INFO``, one line a request (to /dev/null);
- ``guardrails``: a Rego policy that blocks a word, redacts secrets, warns on an e-mail address,
  else allows (the request is allowed): ``pre_call`` on the request, ``post_call`` on the answer;
- ``routing``: the request names an alias over three deployments (round robin), the strategy,
  the breaker and the routing metrics on every request;
- ``keys``: a client key (EDGEGW_API_KEYS), sent on every request: the reference of
  ``tenants``;
- ``tenants``: the same key as a tenant's in the key file, with every limit (rpm, tpm,
  concurrency) and both budgets set on the tenant and the key (never reached), the model
  priced (MODEL_PRICES) and the usage written to SQLite every second;
- ``tenants_budgets`` and ``tenants_limits``: the same with only the budgets (priced, usage to
  SQLite), or only the limits (no price, nothing stored): which of the two costs what;
- ``tenants_redis``: the same through Redis (TENANTS_REDIS_URL: a redis-server on core 0
  with the mock): a script round trip to admit each request, one more to settle it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from bench import gopeer
from bench.harness import (
    CHAT,
    CORE_A,
    CORE_B,
    Result,
    body_file,
    edgegw,
    free_port,
    generate,
    go_mock,
    per_request_us,
    process,
    scratch_dir,
    spread,
    wait_quiet,
)

POLICY = """\
package guardrails

import rego.v1

main := {"action": "block", "message": "no forbidden words"} if {
    contains(input.request.body, "forbidden")
} else := {"action": "redact", "message": "secrets removed"} if {
    some d in input.detected
    d in {"api_key", "bearer_token", "credit_card"}
} else := {"action": "warn", "message": "mentions an e-mail address"} if {
    "email" in input.detected
} else := {"action": "allow"}
"""
FEATURES = (
    "off",
    "no_telemetry",
    "tracing",
    "access_log",
    "guardrails",
    "routing",
    "keys",
    "tenants",
    "tenants_budgets",
    "tenants_limits",
    "tenants_redis",
)
KEY = "sk-bench-tenant-key"
LIMITS = "rpm=1000000000 tpm=1000000000000 concurrency=1000000"
BUDGETS = "budget_tokens=1e15/month budget_usd=1000000000/day"


def configurations(
    work: Path, mock_port: int, redis_port: int
) -> dict[str, tuple[dict[str, str], bytes]]:
    """Each configuration's environment and request body (`keys` and `tenants` send KEY)."""
    policies = work / "policies"
    policies.mkdir(exist_ok=True)
    (policies / "main.rego").write_text(POLICY)
    routing = work / "routing.yaml"
    deployments = [{"provider": "openai", "model": m} for m in ("m1", "m2", "m3")]
    routing.write_text(  # JSON is YAML
        json.dumps({"models": {"fast": {"strategy": "round_robin", "deployments": deployments}}})
    )
    base = {"TELEMETRY_ENABLED": "true", "TELEMETRY_METRICS_PORT": "0", "PYTHONHASHSEED": "0"}
    digest = hashlib.sha256(KEY.encode()).hexdigest()

    def tenants_with(what: str, name: str) -> dict[str, str]:
        keys = work / name
        keys.write_text(f"tenant bench {what}\nkey k tenant=bench sha256={digest} {what}\n")
        env = {**base, "EDGEGW_API_KEYS_FILE": str(keys)}
        if BUDGETS in what:
            env["TENANTS_STORE_PATH"] = str(work / f"{name}.sqlite3")
            env["MODEL_PRICES"] = "openai/gpt-4o-mini=0.15:0.6"
        return env

    tenants = tenants_with(f"{LIMITS} {BUDGETS}", "keys")
    return {
        "off": (base, CHAT),
        "no_telemetry": ({"PYTHONHASHSEED": "0"}, CHAT),
        "tracing": (
            {
                **base,
                "TELEMETRY_TRACING_ENABLED": "true",
                "TELEMETRY_TRACING_OTLP_ENDPOINT": f"http://127.0.0.1:{mock_port}",
            },
            CHAT,
        ),  # fmt: skip
        "access_log": ({**base, "LOG_LEVEL": "INFO"}, CHAT),
        "guardrails": (
            {**base, "GUARDRAILS_ENABLED": "true", "GUARDRAILS_POLICY_DIR": str(policies)},
            CHAT,
        ),
        "routing": (
            {**base, "ROUTING_ENABLED": "true", "ROUTING_CONFIG_PATH": str(routing)},
            CHAT.replace(b'"openai/gpt-4o-mini"', b'"fast"'),
        ),
        "keys": ({**base, "EDGEGW_API_KEYS": KEY}, CHAT),
        "tenants": (tenants, CHAT),
        "tenants_budgets": (tenants_with(BUDGETS, "keys_budgets"), CHAT),
        "tenants_limits": (tenants_with(LIMITS, "keys_limits"), CHAT),
        "tenants_redis": (
            {**tenants, "TENANTS_REDIS_URL": f"redis://127.0.0.1:{redis_port}"},
            CHAT,
        ),
    }


def run(ns: argparse.Namespace) -> Result:
    os.sched_setaffinity(0, {CORE_A})
    binary = gopeer.build()
    quiet = wait_quiet(max_wait_s=ns.max_wait)
    work = scratch_dir()
    mock_port, redis_port = free_port(), free_port()
    configs = configurations(work, mock_port, redis_port)
    bodies = {name: body_file(work, name, body) for name, (_, body) in configs.items()}
    cells: dict[str, list[float | None]] = {name: [] for name in ns.features}
    rps: dict[str, list[float]] = {name: [] for name in ns.features}
    with go_mock(binary, mock_port), _redis(redis_port, "tenants_redis" in ns.features):
        for round_ in range(ns.rounds):
            order = list(ns.features)
            random.shuffle(order)
            for name in order:
                port = free_port()
                with edgegw(port, mock_port, CORE_B, configs[name][0]) as gw:
                    args = ["load", "--port", str(port), "--body-file", bodies[name],
                            "--connections", str(ns.connections), "--seconds", str(ns.seconds),
                            "--warmup-s", str(ns.warmup_s)]  # fmt: skip
                    if name == "keys" or name.startswith("tenants"):
                        args += ["--header", f"Authorization: Bearer {KEY}"]
                    r = generate(binary, args, gw.pid)
                assert r["errors"] == 0 and r["ok"], (name, r["errors_by_kind"])
                cells[name].append(per_request_us(r))
                rps[name].append(r["rps"])
                print(f"  round {round_ + 1} {name:11s} {per_request_us(r)} µs CPU/req, "
                      f"{r['rps']:.0f} req/s", flush=True)  # fmt: skip
    out: Result = {"quiet": quiet, "connections": ns.connections}
    out["cpu_us_per_req"] = {name: spread(v) for name, v in cells.items()}
    out["rps"] = {name: spread(v) for name, v in rps.items()}
    off = out["cpu_us_per_req"].get("off", {}).get("median")
    added: dict[str, Any] = {}
    for name in ns.features:
        m = out["cpu_us_per_req"][name]["median"]
        if name != "off" and off and m is not None:
            added[name] = {"us": round(m - off, 1), "percent": round((m - off) / off * 100, 1)}
    out["added"] = added
    print(f"off: {off} µs CPU a request; added: "
          + ", ".join(f"{k} {v['us']:+} µs ({v['percent']:+} %)" for k, v in added.items()))  # fmt: skip
    return out


def _redis(port: int, wanted: bool) -> AbstractContextManager[object]:
    """redis-server on core 0 beside the mock, when a configuration needs it."""
    if not wanted:
        return nullcontext()
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("tenants_redis needs redis-server on PATH (Debian: redis-server)")
    args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    return process(args, CORE_A, port=port, exe=binary)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--features", nargs="+", choices=FEATURES, default=list(FEATURES))
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=5, help="measured seconds per cell")
    p.add_argument("--warmup-s", type=float, default=1.0, help="per cell, not counted")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--max-wait", type=float, default=120, help="seconds to wait for quiet")


SMOKE = ["--rounds", "1", "--seconds", "0.3", "--warmup-s", "0.1", "--connections", "2",
         "--max-wait", "0"]  # fmt: skip
