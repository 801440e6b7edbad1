"""What the tracing hooks of one proxied chat request cost in process, CPU µs per request:
the server span from the request head, `parse` and `route` spans, an upstream attempt with
its `traceparent`, the GenAI attributes, the end (the spans encoded by the Rust core and
queued). No I/O: the queue is emptied every 128 requests instead of posted.

    python -m bench.tracing_hooks [--rounds 7] [--requests 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.harness import loadavg
from edgegw.settings import Settings
from edgegw.telemetry.tracing import Tracing

HEADERS = [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json")]
USAGE = {"prompt_tokens": 7, "completion_tokens": 16, "total_tokens": 23}


def one_request(tracing: Tracing) -> None:
    trace = tracing.start_request("POST", "/v1/chat/completions", HEADERS, "0" * 32)
    assert trace is not None
    with trace.span("parse"):
        pass
    with trace.span("route", **{"gen_ai.request.model": "openai/gpt-4o-mini"}) as span:
        span.set_attribute("edgegw.route.target", "openai")
        span.set_attribute("edgegw.route.named_profile", False)
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_hooks")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=20_000)
    ns = parser.parse_args()
    env = {"TELEMETRY_ENABLED": "true", "TELEMETRY_TRACING_ENABLED": "true"}
    tracing = Tracing(Settings.load(environ=env))
    tracing.queue.limit = 1 << 40
    queue = tracing.queue
    print(f"load average before: {loadavg()}")
    rounds = []
    for _ in range(ns.rounds):
        t0 = time.process_time()
        for i in range(ns.requests):
            one_request(tracing)
            if i % 128 == 0:
                queue.clear()
        rounds.append((time.process_time() - t0) / ns.requests * 1e6)
        queue.clear()
    print(f"load average after: {loadavg()}")
    print(
        f"tracing hooks: {statistics.median(rounds):.1f} µs per request "
        f"(rounds: {', '.join(f'{r:.1f}' for r in rounds)})"
    )


if __name__ == "__main__":
    main()
