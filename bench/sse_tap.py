"""What the relay's usage tap costs a relayed event in process, CPU µs per event: one
stream of chat chunks (content chunks with `"usage":null`, then the finish chunk, the
usage chunk and [DONE]) fed one event a piece, as a paced stream arrives, through the
loop `edgegw.relay` ran before (`SseSplitter.feed`: an object per event, three byte tests
in Python) and the one it runs (`feed_tapped`: only the events the tap reads come back).

    python -m bench.sse_tap [--rounds 7] [--events 200] [--streams 500]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.harness import loadavg
from edgegw._core import SseSplitter
from edgegw.exchange import Outcome
from edgegw.tap import has_usage, tap

HEAD = (
    b'{"id":"chatcmpl-0123456789","object":"chat.completion.chunk","created":1764633600,'
    b'"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0123456789",'
)


def stream(events: int) -> list[bytes]:
    pieces = [
        b"data: " + HEAD + b'"choices":[{"index":0,"delta":{"content":" tok%d"},"logprobs":null,'
        b'"finish_reason":null}],"usage":null}\n\n' % i
        for i in range(events)
    ]
    pieces.append(
        b"data: " + HEAD + b'"choices":[{"index":0,"delta":{},"logprobs":null,'
        b'"finish_reason":"stop"}],"usage":null}\n\n'
    )
    pieces.append(
        b"data: " + HEAD + b'"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":'
        b'%d,"total_tokens":%d}}\n\n' % (events, events + 7)
    )
    pieces.append(b"data: [DONE]\n\n")
    return pieces


def per_event(pieces: list[bytes], outcome: Outcome) -> None:
    splitter = SseSplitter()
    for chunk in pieces:
        for event in splitter.feed(chunk):
            outcome.events += 1
            if event.is_done:
                outcome.done = True
            elif (
                has_usage(event.data)
                or b'"tool_calls"' in event.data
                or b'"finish_reason":"' in event.data
            ):
                tap(event.data, outcome, "delta")


def tapped(pieces: list[bytes], outcome: Outcome) -> None:
    splitter = SseSplitter()
    for chunk in pieces:
        n, done, taps = splitter.feed_tapped(chunk)
        outcome.events += n
        if done:
            outcome.done = True
        for data in taps:
            tap(data, outcome, "delta")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sse_tap")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--streams", type=int, default=500)
    ns = parser.parse_args()
    pieces = stream(ns.events)
    a, b = Outcome(), Outcome()
    per_event(pieces, a)
    tapped(pieces, b)
    assert (a.events, a.done, a.usage, a.finish_reasons) == (
        b.events,
        b.done,
        b.usage,
        b.finish_reasons,
    ), "the two loops disagree"
    print(f"load average before: {loadavg()}")
    results: dict[str, list[float]] = {"feed, tests per event": [], "feed_tapped": []}
    for _ in range(ns.rounds):
        for name, loop in (("feed, tests per event", per_event), ("feed_tapped", tapped)):
            t0 = time.process_time()
            for _ in range(ns.streams):
                loop(pieces, Outcome())
            elapsed = time.process_time() - t0
            results[name].append(elapsed / (ns.streams * len(pieces)) * 1e6)
    print(f"load average after: {loadavg()}")
    for name, rounds in results.items():
        print(
            f"{name:24s} {statistics.median(rounds):.2f} µs per event "
            f"(rounds: {', '.join(f'{r:.2f}' for r in rounds)})"
        )


if __name__ == "__main__":
    main()
