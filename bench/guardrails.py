"""`python -m bench.guardrails`: what the guardrails add to a request, in process.

A typical policy (block a word, redact when a detector found a secret, warn on an e-mail
address, else allow: tests/test_guardrails.py's POLICY) against a typical chat request (a
5-message chat, ~1 KB) and answer (~1 KB). Measured, CPU µs per call, medians of rounds:
  - `pre_call` whole, as the route calls it (the input document written with orjson, the
    detectors over the body, the Rego evaluation, the counter), on a request the policy
    allows, and on one it redacts (then also the redaction of the body);
  - `post_call` on the answer;
  - its parts: the Rego evaluation alone, the detectors alone;
  - the Rego evaluation in 1 and in 2 threads (wall time per call): it runs without the
    GIL, so 2 threads on 2 cores should take about half the wall time per call.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

import orjson
import trio

from bench.mcp import ANSWER  # the same ~1 KB answer
from edgegw._core import GuardPolicy, detect_sensitive
from edgegw.guardrails.check import Guardrails
from edgegw.guardrails.settings import GuardrailsSettings
from edgegw.settings import Settings
from edgegw.telemetry.recording import Telemetry

ROUNDS = 7
CALLS = 5_000

POLICY = """\
package guardrails

import rego.v1

main := {"action": "block", "message": "no forbidden words"} if {
    contains(input.request.body, "forbidden")
} else := {"action": "redact", "message": "secrets removed"} if {
    redactable
} else := {"action": "warn", "message": "mentions an e-mail address"} if {
    "email" in input.detected
} else := {"action": "allow"}

redactable if {
    some d in input.detected
    d in {"api_key", "bearer_token", "credit_card"}
}
"""


def chat(last: str) -> bytes:
    return orjson.dumps(
        {
            "model": "openai/gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant. " * 8},
                {"role": "user", "content": "What is the weather in Paris today? " * 4},
                {"role": "assistant", "content": "Let me check that for you. " * 6},
                {"role": "user", "content": "And tomorrow? Please be brief. " * 3},
                {"role": "assistant", "content": "Tomorrow looks sunny. " * 5},
                {"role": "user", "content": last},
            ],
            "temperature": 0.2,
        }
    )


REQUEST = chat("Thanks, that is all.")
SECRET_REQUEST = chat("My key is sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234, keep it.")


def guardrails() -> Guardrails:
    settings = Settings.load(environ={"TELEMETRY_ENABLED": "true"})
    policy = GuardPolicy([("main.rego", POLICY)])
    return Guardrails(GuardrailsSettings(enabled=True), policy, None, Telemetry(settings))


def measure(name: str, fn: Callable[[], object]) -> None:
    per_call = []
    for _ in range(ROUNDS):
        start = time.process_time()
        for _ in range(CALLS):
            fn()
        per_call.append((time.process_time() - start) / CALLS * 1e6)
    print(
        f"{name:34s} {statistics.median(per_call):6.1f} µs CPU "
        f"(rounds {min(per_call):.1f}-{max(per_call):.1f})"
    )


def measure_async(name: str, guard: Guardrails, body: bytes, phase: str) -> None:
    async def run() -> list[float]:
        per_call = []
        for _ in range(ROUNDS):
            start = time.process_time()
            for _ in range(CALLS):
                if phase == "pre_call":
                    await guard.pre_call(
                        method="POST",
                        path="/v1/chat/completions",
                        body=body,
                        model="openai/gpt-4o-mini",
                        identity=None,
                    )
                else:
                    await guard.post_call(
                        method="POST",
                        path="/v1/chat/completions",
                        payload=body,
                        model="openai/gpt-4o-mini",
                        identity=None,
                    )
            per_call.append((time.process_time() - start) / CALLS * 1e6)
        return per_call

    per_call = trio.run(run)
    print(
        f"{name:34s} {statistics.median(per_call):6.1f} µs CPU "
        f"(rounds {min(per_call):.1f}-{max(per_call):.1f})"
    )


def threads(policy: GuardPolicy, document: bytes, n: int) -> float:
    """Wall µs per evaluation with `n` threads evaluating at once."""

    def work() -> None:
        for _ in range(CALLS):
            policy.evaluate(document)

    best = []
    for _ in range(3):
        pool = [threading.Thread(target=work) for _ in range(n)]
        start = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        best.append((time.perf_counter() - start) / (CALLS * n) * 1e6)
    return statistics.median(best)


def main() -> None:
    guard = guardrails()
    body = REQUEST.decode()
    document = orjson.dumps(
        {
            "method": "POST",
            "path": "/v1/chat/completions",
            "phase": "pre_call",
            "request": {"body": body, "model": "openai/gpt-4o-mini"},
            "identity": None,
            "detected": detect_sensitive(body),
        }
    )
    print(f"request {len(REQUEST)} bytes, answer {len(ANSWER)} bytes")
    measure_async("pre_call, allowed", guard, REQUEST, "pre_call")
    measure_async("pre_call, redacted", guard, SECRET_REQUEST, "pre_call")
    measure_async("post_call", guard, ANSWER, "post_call")
    measure("  Rego evaluation alone", lambda: guard.policy.evaluate(document))
    measure("  detectors alone", lambda: detect_sensitive(body))
    one = threads(guard.policy, document, 1)
    two = threads(guard.policy, document, 2)
    print(f"Rego evaluation, wall per call      1 thread {one:.1f} µs, 2 threads {two:.1f} µs")


if __name__ == "__main__":
    main()
