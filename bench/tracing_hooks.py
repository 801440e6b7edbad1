"""What the tracing hooks of one proxied chat request cost in process, CPU µs per request:
the server span from the request head, `parse` and `route` spans, an upstream attempt with
its `traceparent`, the GenAI attributes, the end (the spans encoded by the Rust core and
queued). No I/O: the queue is emptied every 128 requests instead of posted. Beside it, what
a request without trace context costs when root traces are not sampled (the sampling
decision, as in `python -m bench.tracing --interleaved`).

    python -m bench.tracing_hooks [--rounds 7] [--requests 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from bench.harness import loadavg
from edgegw.settings import Settings
from edgegw.telemetry.tracing import Tracing

HEADERS = [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json")]
USAGE = {"prompt_tokens": 7, "completion_tokens": 16, "total_tokens": 23}


def one_request(tracing: Tracing) -> None:
    trace = tracing.start_request("POST", "/v1/chat/completions", HEADERS, "0" * 32)
    assert trace is not None
    trace.parse(bytes, b"{}")
    routing_ns = time.time_ns()
    trace.route(routing_ns, "openai/gpt-4o-mini", "openai", False)
    attempt, _, _ = trace.attempt(b"POST", b"/v1/chat/completions", "127.0.0.1", 9000)
    trace.attempt_done(attempt, 200, False)
    trace.generation(
        operation="chat",
        provider="openai",
        model="openai/gpt-4o-mini",
        response_model="gpt-4o-mini-2024-07-18",
        usage=USAGE,
        finish_reasons=["stop"],
        ttft_s=None,
    )
    trace.finish(200, None)
    trace.trace_id  # noqa: B018 (the exemplars read it)


def no_context(tracing: Tracing) -> None:
    assert tracing.start_request("POST", "/v1/chat/completions", HEADERS, "0" * 32) is None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_hooks")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=20_000)
    ns = parser.parse_args()
    env = {"TELEMETRY_ENABLED": "true", "TELEMETRY_TRACING_ENABLED": "true"}
    tracing = Tracing(Settings.load(environ=env))
    tracing.queue.limit = 1 << 40
    roots_off = {**env, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}
    unsampled = Tracing(Settings.load(environ={**roots_off, "OTEL_TRACES_SAMPLER_ARG": "0"}))
    cases: dict[str, tuple[Callable[[Tracing], None], Tracing]] = {
        "tracing hooks": (one_request, tracing),
        "no trace context, roots not sampled": (no_context, unsampled),
    }
    print(f"load average before: {loadavg()}")
    rounds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ns.rounds):
        for name, (hooks, t) in cases.items():
            t0 = time.process_time()
            for i in range(ns.requests):
                hooks(t)
                if i % 128 == 0:
                    t.queue.clear()
            rounds[name].append((time.process_time() - t0) / ns.requests * 1e6)
            t.queue.clear()
    print(f"load average after: {loadavg()}")
    for name, xs in rounds.items():
        print(
            f"{name}: {statistics.median(xs):.2f} µs per request "
            f"(rounds: {', '.join(f'{r:.2f}' for r in xs)})"
        )


if __name__ == "__main__":
    main()
