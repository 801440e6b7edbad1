"""The figures and ratios of `python -m bench capacity` (bench/capacity.py): medians over
rounds per cell and target, the capacity issue's ratios with their targets, and the table.

``go_proxy`` is a plain Go reverse proxy: it does less per request than any gateway, so a ratio
against it is a floor. With ``--inference-gateway`` the ratios against the real Go gateway are
computed too (``*_vs_inference_gateway``), and with ``--nginx`` against nginx's proxy_pass.
"""

from __future__ import annotations

from typing import Any

from bench.harness import Result, median, ratio

TARGET_STREAMS = 1500  # concurrent paced streams per core; stretch 3,000


def _p50(r: Result) -> float | None:
    return (r.get("latency_ms") or {}).get("p50")


def summarise(out: Result) -> Result:
    s: dict[str, Any] = {}
    fast = out.get("fast")
    if fast:
        cells: dict[str, dict[str, Any]] = {}
        for cell, per in fast.items():
            cells[cell] = {}
            for t, runs in per.items():
                m: dict[str, Any] = {
                    "rps": median([r["rps"] for r in runs]),
                    "p50_ms": median([_p50(r) for r in runs]),
                    "p99_ms": median([(r.get("latency_ms") or {}).get("p99") for r in runs]),
                    "server_cpu_us_per_request": median(
                        [r["server_cpu_us_per_request"] for r in runs]
                    ),
                    "errors": sum(r["errors"] for r in runs),
                    "rps_runs": [r["rps"] for r in runs],
                }
                if cell == "streams16":
                    m["events_per_stream"] = median([r.get("events_per_stream") for r in runs])
                cells[cell][t] = m
        direct_p50 = [_p50(r) for r in fast["added_p50_c1"]["mock_direct"]]
        for t, runs in fast["added_p50_c1"].items():
            cells["added_p50_c1"][t]["added_p50_ms"] = median(
                [
                    (_p50(r) or 0) - d
                    for r, d in zip(runs, direct_p50, strict=True)
                    if d is not None and _p50(r) is not None
                ]
            )
        s["cells"] = cells
        rps, slow, st = cells["rps64"], cells["rps64_slow50"], cells["streams16"]
        lat = cells["added_p50_c1"]
        s["ratios"] = {
            "rps64_edgegw_vs_go_proxy": ratio(rps["edgegw"]["rps"], rps["go_proxy"]["rps"]),
            "rps64_edgegw_vs_bare": ratio(rps["edgegw"]["rps"], rps["bare_server"]["rps"]),
            "rps64_edgegw_vs_direct": ratio(rps["edgegw"]["rps"], rps["mock_direct"]["rps"]),
            "added_p50_c1_edgegw_ms": lat["edgegw"]["added_p50_ms"],
            "added_p50_c1_go_proxy_ms": lat["go_proxy"]["added_p50_ms"],
            "streams16_edgegw_vs_go_proxy": ratio(st["edgegw"]["rps"], st["go_proxy"]["rps"]),
            "slow50_edgegw_share_of_direct": ratio(
                slow["edgegw"]["rps"], slow["mock_direct"]["rps"]
            ),
            "slow50_go_proxy_share_of_direct": ratio(
                slow["go_proxy"]["rps"], slow["mock_direct"]["rps"]
            ),
            "rps64_workers2_vs_workers1_unpinned": ratio(
                rps["edgegw_w2_unpinned"]["rps"], rps["edgegw_w1_unpinned"]["rps"]
            ),
        }
        for peer in ("inference_gateway", "nginx_proxy", "edgegw_pump"):
            if peer in rps:
                s["ratios"].update(_against(peer, rps, lat, st))
    cap = out.get("capacity")
    if cap:
        s["capacity"] = {
            t: {
                "sustained_streams": r["sustained_streams"],
                "first_failure": r["first_failure"],
                "search_complete": r["search_complete"],
                "in_flight_mean_at_best": (r["best_step"] or {}).get("in_flight", {}).get("mean"),
                "cpu_us_per_event_at_best": (r["best_step"] or {}).get("cpu_us_per_event"),
            }
            for t, r in cap.items()
        }
        sustained = {t: r["sustained_streams"] for t, r in cap.items()}
        s.setdefault("ratios", {}).update(
            {
                "streams_edgegw": sustained.get("edgegw"),
                "streams_edgegw_vs_target_1500": ratio(sustained.get("edgegw"), TARGET_STREAMS),
                "streams_edgegw_vs_direct": ratio(
                    sustained.get("edgegw"), sustained.get("mock_direct")
                ),
                "streams_edgegw_vs_go_proxy": ratio(
                    sustained.get("edgegw"), sustained.get("go_proxy")
                ),
                "streams_workers2_vs_workers1_unpinned": ratio(
                    sustained.get("edgegw_w2_unpinned"), sustained.get("edgegw_w1_unpinned")
                ),
            }
        )
    cost = out.get("cost")
    if cost:
        s["cost"] = {t: {n: _cost(steps) for n, steps in per.items()} for t, per in cost.items()}
        for peer in ("inference_gateway", "edgegw_pump"):
            other = s["cost"].get(peer, {})
            for n, c in s["cost"].get("edgegw", {}).items():
                if n in other:
                    s.setdefault("ratios", {})[f"cost_{n}_edgegw_vs_{peer}"] = ratio(
                        c["cpu_us_per_event"], other[n]["cpu_us_per_event"]
                    )
    return s


def _against(peer: str, rps: Result, lat: Result, st: Result) -> Result:
    """edgegw's cells as ratios to `peer`'s (CPU: edgegw's over the peer's)."""
    return {
        f"rps64_edgegw_vs_{peer}": ratio(rps["edgegw"]["rps"], rps[peer]["rps"]),
        f"cpu_per_request_edgegw_vs_{peer}": ratio(
            rps["edgegw"]["server_cpu_us_per_request"], rps[peer]["server_cpu_us_per_request"]
        ),
        f"added_p50_c1_edgegw_vs_{peer}": ratio(
            lat["edgegw"]["added_p50_ms"], lat[peer]["added_p50_ms"]
        ),
        f"streams16_edgegw_vs_{peer}": ratio(st["edgegw"]["rps"], st[peer]["rps"]),
    }


def _cost(steps: list[Result]) -> Result:
    """Medians of the cost steps of one target at one number of streams."""
    return {
        "cpu_us_per_event": median([c["cpu_us_per_event"] for c in steps]),
        "rss_per_stream_kib": median([c.get("rss_per_stream_kib") for c in steps]),
        "added_gap_p50_ms": median([(c["added_gap_ms"] or {}).get("p50") for c in steps]),
        "added_gap_p99_ms": median([(c["added_gap_ms"] or {}).get("p99") for c in steps]),
        "ttft_p50_ms": median([(c["ttft_ms"] or {}).get("p50") for c in steps]),
        "in_flight_mean": median([c["in_flight"]["mean"] for c in steps]),
        "events_run": median([c["events_run"] for c in steps]),
        "errors": sum(c["requests"]["errors"] for c in steps),
    }


def _fmt(v: Any, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def _mib(v: float | None) -> str:
    return "(as edgegw)" if v is None else f"{v:.1f} MiB"


def print_table(out: Result) -> None:
    s = out["summary"]
    print(f"\nlayout: {out['layout']['default']}; added p50: {out['layout']['added_p50_c1']}; "
          f"workers: {out['layout']['workers']}")  # fmt: skip
    cells = s.get("cells", {})
    cap = s.get("capacity", {})
    head = ("target", "req/s @64", "CPU µs/req", "added p50 @1", "streams/s @16",
            "req/s @64 50 ms", "paced streams", "idle RSS")  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    targets = {t for per in cells.values() for t in per} | set(cap)
    order = ("mock_direct", "nginx_proxy", "go_proxy", "inference_gateway", "bare_server",
             "edgegw_pump", "edgegw", "edgegw_w1_unpinned", "edgegw_w2_unpinned")  # fmt: skip
    for t in (t for t in order if t in targets):

        def c(cell: str, key: str, spec: str = ",.0f", t: str = t) -> str:
            return _fmt(cells.get(cell, {}).get(t, {}).get(key), spec)

        lat = c("added_p50_c1", "added_p50_ms", "+.3f")
        row = (t, c("rps64", "rps"), c("rps64", "server_cpu_us_per_request"),
               lat if lat == "-" else lat + " ms", c("streams16", "rps"),
               c("rps64_slow50", "rps"), _fmt(cap.get(t, {}).get("sustained_streams"), ","),
               _mib(out.get("idle_rss_mib", {}).get(t)))  # fmt: skip
        print("| " + " | ".join(row) + " |")
    if "streams16" in cells:
        print("events per stream @16: " + ", ".join(
            f"{t} {v.get('events_per_stream')}" for t, v in cells["streams16"].items()))  # fmt: skip
    for t, per in s.get("cost", {}).items():
        for n, m in per.items():
            print(f"{t} at {n} paced streams: {m['cpu_us_per_event']} µs CPU per relayed event, "
                  f"{m['rss_per_stream_kib']} KiB RSS per stream in flight (in flight "
                  f"{m['in_flight_mean']}), added gap p50 {m['added_gap_p50_ms']} / p99 "
                  f"{m['added_gap_p99_ms']} ms, TTFT p50 {m['ttft_p50_ms']} ms, "
                  f"errors {m['errors']}")  # fmt: skip
    print("ratios (against go_proxy: a floor for a Go gateway; see bench/README.md):")
    for k, v in s.get("ratios", {}).items():
        print(f"  {k}: {v}")
