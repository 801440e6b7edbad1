"""`edgegw bench`'s results: the JSON document, the comparison with an earlier run, and the
printed report (split from edgegw.bench.command, which runs the load)."""

from __future__ import annotations

import datetime
import math
import os
import platform
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import orjson
import trio

from edgegw.bench.loadgen import Load, Probe, stats_json
from edgegw.bench.options import BenchOptions

SCHEMA = "edgegw-bench/1"
API_KEY_ENV = "EDGEGW_BENCH_API_KEY"  # a key for the target, never taken from the command line
# Compared metrics within this much of the earlier run are shown as "≈": on a small shared
# machine run-to-run spread is often larger (bench/README.md).
NOISE_PCT = 5.0


class BenchError(Exception):
    """A bad option or an unreachable target: exit status 2."""


def _check_writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(folder):
        raise BenchError(f"--json {path}: not a file in an existing folder")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        raise BenchError(f"--json {path}: not writable")


def _read_run(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = orjson.loads(f.read())
    except OSError as e:
        raise BenchError(f"--compare {path}: cannot read ({e.strerror})") from None
    except orjson.JSONDecodeError:
        raise BenchError(f"--compare {path}: not JSON") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BenchError(f"--compare {path}: not an `edgegw bench --json` file ({SCHEMA})")
    return data


# -- results -------------------------------------------------------------------------------


def _parameters(
    opts: BenchOptions, kind: str, base: str, path: str, model: str, mock_url: str
) -> dict[str, Any]:
    return {
        "target": base,
        "target_kind": kind,
        "path": path,
        "model": model,
        "stream": opts.stream,
        "loop": "closed" if opts.rate is None else "open",
        "connections": opts.loop_connections,
        "rate": opts.rate,
        "duration_s": opts.duration_s,
        "warmup_s": opts.warmup_s,
        "max_requests": opts.max_requests,
        "timeout_s": opts.timeout_s,
        "mock": {
            "url": mock_url,
            "latency_ms": opts.mock.latency_s * 1000,
            "token_rate": opts.mock.token_rate,
            "tokens": opts.mock.tokens,
            "chunk_tokens": opts.mock.chunk_tokens,
            "error_rate": opts.mock.error_rate,
        },
    }


def _result(load: Load, params: dict[str, Any], started_at: datetime.datetime) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        edgegw_version = version("edgegw")
    except PackageNotFoundError:
        edgegw_version = "unknown"
    return {
        "schema": SCHEMA,
        "started_at": started_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "versions": {
            "edgegw": edgegw_version,
            "python": platform.python_version(),
            "trio": trio.__version__,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg": [round(x, 2) for x in os.getloadavg()]
            if hasattr(os, "getloadavg")
            else None,
        },
        "parameters": params,
        "interrupted": load.interrupted,
        "elapsed_s": round(load.elapsed_s, 6),
        "connections": {"opened": load.connections_opened, "peak": load.peak_connections},
        "warmup": {"requests": load.warmup.requests, "errors": load.warmup.error_count},
        **stats_json(load.measured, load.elapsed_s),
    }


# Compared metrics: (label, path in the result, higher is better).
_COMPARED = (
    ("req/s", ("throughput", "requests_per_s"), True),
    ("tokens/s", ("throughput", "tokens_per_s"), True),
    ("latency p50", ("latency_ms", "p50"), False),
    ("latency p90", ("latency_ms", "p90"), False),
    ("latency p99", ("latency_ms", "p99"), False),
    ("latency max", ("latency_ms", "max"), False),
    ("first token p50", ("ttft_ms", "p50"), False),
    ("first token p99", ("ttft_ms", "p99"), False),
    ("chunk gap p50", ("gap_ms", "p50"), False),
    ("chunk gap p99", ("gap_ms", "p99"), False),
    ("error rate", ("error_rate",), False),
)
# Parameters whose difference makes a comparison doubtful (ports and URLs change every run).
_SAME = ("target_kind", "model", "stream", "loop", "connections", "rate", "duration_s", "warmup_s")


def _dig(data: dict[str, Any], path: Sequence[str]) -> float | None:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _comparison(before: dict[str, Any], now: dict[str, Any], path: str) -> dict[str, Any]:
    changes = {}
    for label, where, higher_better in _COMPARED:
        old, new = _dig(before, where), _dig(now, where)
        if old is None or new is None:
            continue
        pct = (new - old) / old * 100 if old else (0.0 if new == old else math.inf)
        verdict = (
            "≈" if abs(pct) < NOISE_PCT else ("better" if (pct > 0) == higher_better else "worse")
        )
        changes[label] = {
            "before": old,
            "now": new,
            "change": round(new - old, 6),
            "change_pct": _finite(pct),
            "verdict": verdict,
        }
    p_old, p_new = before.get("parameters", {}), now["parameters"]
    differ = {k: [p_old.get(k), p_new.get(k)] for k in _SAME if p_old.get(k) != p_new.get(k)}
    mock_old, mock_new = p_old.get("mock", {}), p_new["mock"]
    for k, v in mock_new.items():
        if k != "url" and mock_old.get(k) != v:
            differ[f"mock.{k}"] = [mock_old.get(k), v]
    return {
        "file": path,
        "started_at": before.get("started_at"),
        "parameters_differ": differ,
        "changes": changes,
    }


def _finite(x: float) -> float | None:
    return round(x, 2) if math.isfinite(x) else None


# -- printing ------------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 1:
        return f"{v:.3f} ms"
    if v < 100:
        return f"{v:.2f} ms"
    return f"{v:,.0f} ms" if v >= 1000 else f"{v:.1f} ms"


def _print_header(p: dict[str, Any], out: TextIO) -> None:
    what = "streaming chat completions" if p["stream"] else "chat completions"
    if p["loop"] == "closed":
        loop = f"closed loop, {p['connections']} connections"
    else:
        loop = f"open loop at {p['rate']:g} req/s (up to {p['connections']} connections)"
    warm = f" after a {p['warmup_s']:g} s warm-up" if p["warmup_s"] else ""
    note = {
        "in-process": "edgegw started in this process: gateway, mock and load generator share "
        "one process and one core",
        "direct": "the mock itself, no gateway: the baseline",
        "external": "a running gateway; it must send these requests to the mock below",
    }[p["target_kind"]]
    m = p["mock"]
    pace = f"{m['token_rate']:g} tokens/s" if m["token_rate"] else "unpaced"
    print(
        f"edgegw bench: {p['duration_s']:g} s of {what}{warm}, {loop}, "
        f"at most {p['max_requests']:,} requests\n"
        f"  target  {p['target']}{p['path']}  ({note})\n"
        f"  mock    {m['url']}  latency {m['latency_ms']:g} ms, {pace}, {m['tokens']} tokens "
        f"per answer, {m['chunk_tokens']} per chunk, error rate {m['error_rate']:g}\n"
        f"  model   {p['model']}",
        file=out,
    )
    if p["target_kind"] == "external":
        print(
            f"  (the target must be configured with the mock as its upstream, e.g. edgegw with "
            f"OPENAI_API_URL={m['url']} OPENAI_API_KEY=any;\n   start the target first and pass "
            f"--mock-port to keep the mock's port fixed)",
            file=out,
        )
    out.flush()


def _probe_problem(first: Probe, base: str) -> str | None:
    """Why the run cannot start, or None."""
    if first.kind == "timeout":
        return f"{base} did not answer a first request ({first.detail})"
    if first.kind in ("connect", "closed", "protocol"):
        return f"cannot reach {base}: {first.detail or first.kind}"
    return None


def _probe_warning(first: Probe, kind: str, mock_url: str) -> str:
    what = first.kind or f"HTTP {first.status}"
    code = f" ({first.detail})" if first.detail else ""
    hint = ""
    if first.status == 401:
        hint = f"; set {API_KEY_ENV} to the gateway's key"
    elif kind == "external" and first.status in (404, 400, 502, 503, 504):
        hint = f"; is the target's upstream for this model the mock at {mock_url}?"
    return f"edgegw bench: warning: the first request got {what}{code}{hint}; running anyway"


def _print_report(r: dict[str, Any], out: TextIO) -> None:
    tp = r["throughput"]
    lines = [""]
    if r["interrupted"]:
        lines.append("interrupted: the figures cover the time until Ctrl-C")
    errors_pct = r["error_rate"] * 100
    lines.append(
        f"requests     {r['requests']:,} in {r['elapsed_s']:.2f} s: {tp['requests_per_s']:,.1f} req/s "
        f"(ok {r['ok']:,}, errors {r['errors']:,} = {errors_pct:.2f} %)"
    )
    if r["tokens"]:
        src = {"usage": "from usage", "content_events": "counted as content events"}.get(
            r["tokens_source"], "from usage where given"
        )
        lines.append(f"tokens       {r['tokens']:,}: {tp['tokens_per_s']:,.1f} tokens/s ({src})")
    if r["events"]:
        lines.append(f"sse events   {r['events']:,}: {tp['events_per_s']:,.1f} events/s")
    for label, key in (
        ("latency", "latency_ms"),
        ("first token", "ttft_ms"),
        ("chunk gap", "gap_ms"),
        ("send delay", "send_delay_ms"),
    ):
        s = r[key]
        if s is not None:
            lines.append(
                f"{label:<12} p50 {_ms(s['p50']):>10}  p90 {_ms(s['p90']):>10}  "
                f"p99 {_ms(s['p99']):>10}  max {_ms(s['max']):>10}"
            )
    if r["errors_by_kind"]:
        kinds = ", ".join(f"{k} {v:,}" for k, v in r["errors_by_kind"].items())
        lines.append(f"errors       {kinds}")
    c = r["connections"]
    lines.append(f"connections  {c['opened']:,} opened, at most {c['peak']:,} open at once")
    if r["parameters"]["loop"] == "open" and r["send_delay_ms"]:
        if r["send_delay_ms"]["p99"] > 1:
            lines.append(
                "             (send delay p99 over 1 ms: the rate was not sustained; latency "
                "counts the wait)"
            )
    cmp = r.get("comparison")
    if cmp is not None:
        lines += ["", f"compared with {cmp['file']} ({cmp['started_at']}):"]
        for k, (old, new) in cmp["parameters_differ"].items():
            lines.append(f"  parameter differs: {k} {old} -> {new}")
        lines.append(f"  {'':<16} {'before':>12} {'now':>12} {'difference':>12} {'change':>9}")
        for label, ch in cmp["changes"].items():
            fmt = _fmt_metric(label)
            diff = fmt(abs(ch["change"]))
            diff = ("-" if ch["change"] < 0 else "+") + diff
            pct = "n/a" if ch["change_pct"] is None else f"{ch['change_pct']:+.1f} %"
            lines.append(
                f"  {label:<16} {fmt(ch['before']):>12} {fmt(ch['now']):>12} {diff:>12} "
                f"{pct:>9}  {ch['verdict']}"
            )
    print("\n".join(lines), file=out, flush=True)


def _fmt_metric(label: str) -> Callable[[float], str]:
    if label.endswith("/s"):
        return lambda v: f"{v:,.1f}"
    if label == "error rate":
        return lambda v: f"{v * 100:.2f} %"
    return _ms
