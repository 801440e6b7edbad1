"""edgegw's benchmarks, one command with named scenarios (bench/README.md says what each
measures and holds the figures):

    python -m bench throughput   # req/s and CPU per request, added latency, streams/s, 50 ms upstream
    python -m bench streams      # LLM-shaped paced streams: most per core, CPU per relayed event
    python -m bench capacity     # both in one run, with every ratio of the capacity issue
    python -m bench memory       # RSS idle, per idle connection, under load, over a soak
    python -m bench https        # HTTPS through edgegw.http1's TLS, next to plain HTTP
    python -m bench features     # what tracing, the access log, guardrails, routing add a request
    python -m bench instructions # the same, counted in instructions under callgrind (exact)
    python -m bench embeddings   # one /v1/embeddings request of 256 inputs: CPU, added latency
    python -m bench startup      # cold start, idle RSS and size: python, one-file, one-dir, image
    python -m bench smoke        # every scenario for a fraction of a second: it runs, no figures

Every scenario drives servers on 127.0.0.1 only, bounded in time and count, with the Go peer
(bench/gopeer/) as the mock upstream and the load generator, and writes its JSON, with the
machine and the commit, to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import capacity, embeddings, features, https, instructions, memory, startup
from bench.harness import RESULTS, ROOT, Result, loadavg, machine


@dataclass(frozen=True)
class Scenario:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], Result]
    smoke: list[str]  # arguments that make it run for a fraction of a second
    produced: str  # a key its result must hold, checked by the smoke run


def _capacity(name: str, what: str, produced: str) -> Scenario:
    return Scenario(
        what, lambda p: capacity.add_arguments(p, name), capacity.run, capacity.SMOKE, produced
    )


SCENARIOS = {
    "throughput": _capacity(
        "throughput", "req/s, CPU per request, added latency, streams/s, 50 ms upstream", "fast"
    ),
    "streams": _capacity(
        "streams", "LLM-shaped paced streams: most per core, cost per event", "capacity"
    ),
    "capacity": _capacity("capacity", "throughput and streams in one run, every ratio", "summary"),
    "memory": Scenario(
        "RSS idle, per idle connection, under load, soak",
        memory.add_arguments,
        memory.run,
        memory.SMOKE,
        "kib_per_idle_conn",
    ),  # fmt: skip
    "https": Scenario(
        "HTTPS through edgegw.http1's TLS next to plain HTTP",
        https.add_arguments,
        https.run,
        https.SMOKE,
        "cells",
    ),  # fmt: skip
    "features": Scenario(
        "server CPU a request with tracing, the access log, guardrails, routing on",
        features.add_arguments,
        features.run,
        features.SMOKE,
        "added",
    ),  # fmt: skip
    "instructions": Scenario(
        "instructions and mallocs a request under callgrind, configuration against configuration",
        instructions.add_arguments,
        instructions.run,
        instructions.SMOKE,
        "configurations",
    ),  # fmt: skip
    "embeddings": Scenario(
        "one /v1/embeddings request of 256 inputs: gateway CPU and added latency",
        embeddings.add_arguments,
        embeddings.run,
        embeddings.SMOKE,
        "added_p50_ms",
    ),  # fmt: skip
    "startup": Scenario(
        "cold start, idle RSS and size of each build kind present",
        startup.add_arguments,
        startup.run,
        startup.SMOKE,
        "kinds",
    ),  # fmt: skip
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="scenario", required=True)
    for name, scenario in SCENARIOS.items():
        scenario.add_arguments(sub.add_parser(name, help=scenario.help))
    sub.add_parser("smoke", help="every scenario for a fraction of a second (CI): no figures")
    return top


def record(name: str, ns: argparse.Namespace, result: Result, where: Path = RESULTS) -> Path:
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc = {
        "scenario": name,
        "when": when,
        "machine": machine(),
        "args": {k: v for k, v in vars(ns).items() if k != "scenario"},
        "result": result,
        "loadavg_after": loadavg(),
    }
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}-{when.replace(':', '')}.json"
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path


def smoke() -> None:
    """Every scenario with tiny counts: it must start its servers, drive them and hand back a
    result holding what it produces. The figures mean nothing and are not kept."""
    top = parser()
    failed = []
    t0 = time.monotonic()
    for name, scenario in SCENARIOS.items():
        start = time.monotonic()
        print(f"== smoke: {name}", flush=True)
        ns = top.parse_args([name, *scenario.smoke])
        try:
            result = scenario.run(ns)
            if result.get(scenario.produced) in (None, {}, []):
                raise AssertionError(f"no {scenario.produced!r} in its result")
        except Exception as e:  # a scenario's failure is reported, then the next one runs
            failed.append(name)
            print(f"== smoke: {name} FAILED: {type(e).__name__}: {e}", flush=True)
        else:
            print(f"== smoke: {name} ok in {time.monotonic() - start:.1f} s", flush=True)
    total = time.monotonic() - t0
    # Not in a test runner's "N passed, N failed" words: CI reads those as pytest's count.
    if failed:
        sys.exit(f"bench smoke: {', '.join(failed)} did not run ({total:.0f} s)")
    print(f"bench smoke: all {len(SCENARIOS)} scenarios ran ({total:.0f} s)")


def main() -> None:
    ns = parser().parse_args()
    if ns.scenario == "smoke":
        smoke()
        return
    result = SCENARIOS[ns.scenario].run(ns)
    path = record(ns.scenario, ns, result)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
