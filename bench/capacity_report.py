"""The figures and ratios of `python -m bench capacity` (bench/capacity.py): medians over
rounds per cell and target, the capacity issue's ratios with their targets, and the table.

``go_proxy`` stands in for the Go gateway of the issue's targets (inference-gateway cannot be
fetched here); a plain reverse proxy does less per request than any gateway, so a ratio
against it is a floor for what edgegw would show against a real Go gateway, not that figure.
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
        s["cost_edgegw"] = {
            "streams": cost[0]["streams"],
            "cpu_us_per_event": median([c["cpu_us_per_event"] for c in cost]),
            "rss_per_stream_kib": median([c.get("rss_per_stream_kib") for c in cost]),
            "added_gap_p99_ms": median([(c["added_gap_ms"] or {}).get("p99") for c in cost]),
            "in_flight_mean": median([c["in_flight"]["mean"] for c in cost]),
            "errors": sum(c["requests"]["errors"] for c in cost),
        }
    return s


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
    for t in ("mock_direct", "go_proxy", "bare_server", "edgegw", "edgegw_w1_unpinned",
              "edgegw_w2_unpinned"):  # fmt: skip

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
    if "cost_edgegw" in s:
        cost = s["cost_edgegw"]
        print(f"edgegw at {cost['streams']} paced streams: {cost['cpu_us_per_event']} µs CPU per "
              f"relayed event, {cost['rss_per_stream_kib']} KiB RSS per stream in flight "
              f"(in flight {cost['in_flight_mean']}, added gap p99 {cost['added_gap_p99_ms']} ms)")  # fmt: skip
    print("ratios (go_proxy stands in for a Go gateway: a floor, see bench/README.md):")
    for k, v in s.get("ratios", {}).items():
        print(f"  {k}: {v}")
