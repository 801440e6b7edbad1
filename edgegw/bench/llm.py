"""The LLM-shaped scenario (`edgegw bench --scenario llm`): how many model-paced streams a
target carries at once while keeping the gap between tokens, and what each stream costs.

The mock streams like a model (``MockConfig``: the first token ``first_token_s`` after the
head, then ``token_rate`` tokens per second with ``jitter``, ``tokens`` of them) and stamps
every event with the moment it wrote it (``stamp``). Arrivals are open loop: a step of C
streams sends C / (nominal stream length) requests per second, so that C streams are in
flight once the first ones end (Little's law). Each step warms up for one stream length,
measures ``step_s`` (streams *started* then are measured), then lets its streams finish.

A step passes when no request failed and the p99 of the gap the path *added* between two
consecutive tokens of a stream is at most ``gap_p99_ms``: the gap the client saw minus the
gap the mock made, both from the stamps (a target that drops the stamps, re-serialising
chunks, is measured against the mock's nominal gap instead, ``gap_source: "nominal"``,
exact only without jitter). The search doubles C from ``start_streams`` until a step fails
or ``max_streams`` has passed, then bisects between the last pass and the first failure
down to an eighth of the bracket; no step starts that would end past ``budget_s``. The
answer, ``sustained_streams``, is the largest C that passed.

Each step reports, besides errors: streams in flight (sampled every ``SAMPLE_S`` over the
measured phase), the added gap, the relay lag (token arrival minus its stamp: what the
path delays each token by), TTFT added (TTFT minus the mock's nominal TTFT, from each
request's due time), CPU per relayed event (the metered process over the whole step,
set-up and drain included, divided by every event the generator received in it) and RSS per
stream in flight (RSS over the measured phase minus RSS before the step). What is metered
is a ``Meter``: this process by default (the in-process gateway, the mock and the generator
together), or another process tree (``Meter.of_pid``; bench/ runs each server alone).
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import trio

from edgegw.bench.loadgen import Histogram, Load, LoadSpec, stats_json
from edgegw.mock import MockConfig

# Shaped after chat traffic: a few hundred tokens at a reading-speed rate, the first token
# after prefill; the target (1,500 streams a core at 30 tokens/s) is stated at these.
LLM_MOCK = MockConfig(
    latency_s=0.0, token_rate=30.0, tokens=200, first_token_s=0.25, jitter=0.2, stamp=True
)
SAMPLE_S = 0.1  # in-flight and RSS samples during a step's measured phase
MAX_EXTRA_CONNECTIONS = 64  # open loop: a burst of arrivals may need more than C connections
REFINE = 8  # bisect until the bracket is within 1/REFINE of its upper end
DRAIN_GRACE_S = 0.5  # what a step may take past its streams' nominal end

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class LlmSpec:
    start_streams: int = 64
    max_streams: int = 4096
    step_s: float = 10.0  # measured seconds per step
    budget_s: float = 240.0  # the whole search
    gap_p99_ms: float = 5.0
    timeout_s: float | None = None  # per stream; None: three nominal stream lengths + 10 s


@dataclass(frozen=True, slots=True)
class Meter:
    """Where CPU seconds and resident bytes are read from."""

    label: str
    cpu_s: Callable[[], float]
    rss_bytes: Callable[[], int]

    @classmethod
    def this_process(cls, label: str) -> Meter:
        return cls(label, time.process_time, lambda: _statm_rss(os.getpid()))

    @classmethod
    def of_pid(cls, pid: int, label: str) -> Meter:
        """A process and its children (procfs: Linux)."""
        return cls(label, lambda: _tree_cpu_s(pid), lambda: sum(map(_statm_rss, _tree(pid))))


@dataclass(frozen=True, slots=True)
class Target:
    address: str
    port: int
    request: bytes  # a whole streaming chat request, sent as is


@dataclass
class _Gaps:
    """The on_stamped hook: the gaps a path added and the lag of every token."""

    offset_s: float  # trio.current_time() minus time.perf_counter()
    nominal_gap_s: float
    added: Histogram = field(default_factory=Histogram)
    lag: Histogram = field(default_factory=Histogram)
    stamped: int = 0
    unstamped: int = 0

    def __call__(self, times: list[float], sent: list[int]) -> None:
        prev_t = prev_s = None
        for t, s in zip(times, sent, strict=True):
            if s < 0:
                self.unstamped += 1
                if prev_t is not None:
                    self.added.record(t - prev_t - self.nominal_gap_s)
                prev_t, prev_s = t, None
                continue
            self.stamped += 1
            sent_s = s / 1e9
            self.lag.record(t - self.offset_s - sent_s)
            if prev_t is not None:
                made = sent_s - prev_s if prev_s is not None else self.nominal_gap_s
                self.added.record(t - prev_t - made)
            prev_t, prev_s = t, sent_s


async def run_step(
    target: Target, mock: MockConfig, spec: LlmSpec, streams: int, meter: Meter
) -> dict[str, Any]:
    """One step of `streams` concurrent streams; its figures and whether it passed."""
    stream_s = mock.nominal_stream_s
    rate = streams / stream_s
    timeout_s = spec.timeout_s or 3 * stream_s + 10
    load_spec = LoadSpec(
        address=target.address,
        port=target.port,
        request=target.request,
        stream=True,
        connections=math.ceil(streams * 1.25) + MAX_EXTRA_CONNECTIONS,
        rate=rate,
        duration_s=spec.step_s,
        warmup_s=stream_s,
        max_requests=10_000_000,
        timeout_s=timeout_s,
    )
    nominal_gap_s = mock.chunk_tokens / mock.token_rate if mock.token_rate else 0.0
    gaps = _Gaps(trio.current_time() - time.perf_counter(), nominal_gap_s)
    load = Load(load_spec, on_stamped=gaps)
    in_flight: list[int] = []
    rss: list[int] = []
    rss_before = meter.rss_bytes()
    cpu_before = meter.cpu_s()
    async with trio.open_nursery() as nursery:

        async def sample() -> None:
            while True:
                await trio.sleep(SAMPLE_S)
                if load.phase() == "run":
                    in_flight.append(load.in_flight)
                    rss.append(meter.rss_bytes())

        nursery.start_soon(sample)
        await load.run()
        nursery.cancel_scope.cancel()
    cpu_s = meter.cpu_s() - cpu_before
    measured = stats_json(load.measured, load.elapsed_s)
    events = load.warmup.events + load.measured.events
    added = gaps.added.summary_ms()
    mean_flight = sum(in_flight) / len(in_flight) if in_flight else 0.0
    rss_mean = sum(rss) / len(rss) if rss else float(rss_before)
    nominal_ttft_ms = mock.nominal_ttft_s * 1000
    ttft = load.measured.ttft
    why = _failure(measured, added, gaps, spec)
    return {
        "streams": streams,
        "passed": why is None,
        "why": why,
        "arrivals_per_s": round(rate, 3),
        "requests": measured["requests"],
        "ok": measured["ok"],
        "errors": measured["errors"],
        "errors_by_kind": measured["errors_by_kind"],
        "in_flight": {
            "mean": round(mean_flight, 1),
            "min": min(in_flight, default=0),
            "max": max(in_flight, default=0),
        },
        "events": events,
        "gap_source": "stamps" if gaps.unstamped == 0 else "nominal",
        "added_gap_ms": added,
        "relay_lag_ms": gaps.lag.summary_ms(),
        "ttft_ms": measured["ttft_ms"],
        "ttft_added_ms": {
            "p50": round(ttft.percentile_us(50) / 1000 - nominal_ttft_ms, 3),
            "p99": round(ttft.percentile_us(99) / 1000 - nominal_ttft_ms, 3),
        }
        if ttft.total
        else None,
        "send_delay_ms": measured["send_delay_ms"],
        "cpu_s": round(cpu_s, 3),
        "cpu_us_per_event": round(cpu_s / events * 1e6, 2) if events else None,
        "rss_before_mib": round(rss_before / 2**20, 1),
        "rss_mean_mib": round(rss_mean / 2**20, 1),
        "rss_per_stream_kib": round((rss_mean - rss_before) / mean_flight / 1024, 1)
        if mean_flight
        else None,
        "loadavg": _loadavg(),
    }


def _failure(
    measured: dict[str, Any], added: dict[str, Any] | None, gaps: _Gaps, spec: LlmSpec
) -> str | None:
    if measured["errors"]:
        return f"{measured['errors']} errors"
    if not measured["ok"]:
        return "no stream completed"
    if added is None:
        return "no gap measured"
    if added["p99"] > spec.gap_p99_ms:
        return f"added gap p99 {added['p99']:.2f} ms > {spec.gap_p99_ms:g} ms"
    return None


def step_estimate_s(mock: MockConfig, spec: LlmSpec) -> float:
    """Warm-up, measurement and drain of one step."""
    return 2 * mock.nominal_stream_s + spec.step_s + DRAIN_GRACE_S


class Search:
    """The step search's state (module doc): which C to try next, given the steps so far."""

    def __init__(self, spec: LlmSpec) -> None:
        self.spec = spec
        self.steps: list[dict[str, Any]] = []
        self.passed: int | None = None  # the largest C that passed
        self.failed: int | None = None  # the smallest C that failed
        self.complete = False
        self.next: int | None = max(1, min(spec.start_streams, spec.max_streams))

    def record(self, step: dict[str, Any]) -> None:
        streams = step["streams"]
        self.steps.append(step)
        if step["passed"]:
            self.passed = max(self.passed or 0, streams)
        else:
            self.failed = streams if self.failed is None else min(self.failed, streams)
        self.next = self._choose(streams)
        self.complete = self.next is None

    def _choose(self, streams: int) -> int | None:
        if self.failed is None:
            return (
                None
                if streams >= self.spec.max_streams
                else min(streams * 2, self.spec.max_streams)
            )
        low = self.passed or 0
        if self.failed - low <= max(1, self.failed // REFINE):
            return None
        nxt = (low + self.failed) // 2 if self.passed is not None else self.failed // 2
        return nxt if nxt > low and nxt >= 1 else None

    def result(self) -> dict[str, Any]:
        best = next((s for s in self.steps if s["passed"] and s["streams"] == self.passed), None)
        return {
            "sustained_streams": self.passed or 0,
            "first_failure": self.failed,
            "search_complete": self.complete,
            "best_step": best,
            "steps": self.steps,
        }


def spec_json(spec: LlmSpec) -> dict[str, Any]:
    return {
        "start_streams": spec.start_streams,
        "max_streams": spec.max_streams,
        "step_s": spec.step_s,
        "budget_s": spec.budget_s,
        "gap_p99_ms": spec.gap_p99_ms,
    }


def mock_json(mock: MockConfig) -> dict[str, Any]:
    return {
        "first_token_ms": mock.first_token_s * 1000,
        "token_rate": mock.token_rate,
        "tokens": mock.tokens,
        "chunk_tokens": mock.chunk_tokens,
        "jitter": mock.jitter,
        "latency_ms": mock.latency_s * 1000,
        "nominal_stream_s": round(mock.nominal_stream_s, 3),
        "nominal_ttft_ms": round(mock.nominal_ttft_s * 1000, 3),
    }


async def search(
    target: Target,
    mock: MockConfig,
    spec: LlmSpec,
    meter: Meter,
    *,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """The step search (module doc) within the budget; every step's figures and the largest
    C that passed."""
    start = trio.current_time()
    estimate = step_estimate_s(mock, spec)
    state = Search(spec)
    while state.next is not None and trio.current_time() - start + estimate <= spec.budget_s:
        step = await run_step(target, mock, spec, state.next, meter)
        state.record(step)
        if out is not None:
            print(_step_line(step), file=out, flush=True)
    return {
        "scenario": "llm",
        **state.result(),
        "spec": spec_json(spec),
        "mock": mock_json(mock),
        "metered": meter.label,
        "elapsed_s": round(trio.current_time() - start, 1),
    }


def _ms(summary: dict[str, Any] | None, key: str) -> str:
    return f"{summary[key]:.2f}" if summary else "-"


def _step_line(s: dict[str, Any]) -> str:
    ttft = s["ttft_added_ms"]
    per = s["rss_per_stream_kib"]
    cpu = s["cpu_us_per_event"]
    return (
        f"  {s['streams']:5d} streams: {'pass' if s['passed'] else 'FAIL'}"
        f"{'' if s['passed'] else ' (' + s['why'] + ')'}; in flight {s['in_flight']['mean']:.0f}, "
        f"{s['ok']} ok / {s['errors']} err, added gap p50 {_ms(s['added_gap_ms'], 'p50')} "
        f"p99 {_ms(s['added_gap_ms'], 'p99')} ms, lag p99 {_ms(s['relay_lag_ms'], 'p99')} ms, "
        f"TTFT added p50 {ttft['p50'] if ttft else '-'} ms, "
        f"{cpu if cpu is not None else '-'} µs CPU/event, "
        f"{per if per is not None else '-'} KiB/stream, load {s['loadavg'][0]:.2f}"
    )


def print_header(mock: MockConfig, spec: LlmSpec, target: str, out: TextIO) -> None:
    print(
        f"edgegw bench --scenario llm: streams of {mock.tokens} tokens at {mock.token_rate:g}/s "
        f"(jitter {mock.jitter:g}), first token after {mock.first_token_s * 1000:g} ms; steps "
        f"from {spec.start_streams} to at most {spec.max_streams} concurrent streams, "
        f"{spec.step_s:g} s measured each, within {spec.budget_s:g} s\n  target  {target}",
        file=out,
        flush=True,
    )


def print_search(result: dict[str, Any], out: TextIO) -> None:
    best = result["best_step"]
    m = result["mock"]
    print(
        f"\nLLM scenario: {m['tokens']} tokens at {m['token_rate']:g}/s (jitter "
        f"{m['jitter']:g}), first token after {m['first_token_ms']:g} ms; "
        f"pass: no error, added gap p99 <= {result['spec']['gap_p99_ms']:g} ms",
        file=out,
    )
    if best is None:
        print("  no step passed", file=out)
    else:
        print(
            f"  sustained: {result['sustained_streams']} concurrent streams "
            f"({'search complete' if result['search_complete'] else 'budget ran out'}; "
            f"first failure at {result['first_failure'] or '-'})",
            file=out,
        )
        print(
            f"  at that step: CPU {best['cpu_us_per_event']} µs per relayed event, RSS "
            f"{best['rss_per_stream_kib']} KiB per stream in flight, TTFT added p50 "
            f"{best['ttft_added_ms']['p50'] if best['ttft_added_ms'] else '-'} ms "
            f"(metered: {result['metered']})",
            file=out,
        )


# --- procfs -----------------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo.extend(
                    int(k) for k in Path(f"/proc/{p}/task/{task}/children").read_text().split()
                )
        except OSError:
            pass
    return out


def _tree_cpu_s(pid: int) -> float:
    """CPU time of every thread of the tree: schedstat's nanoseconds, where the kernel has
    them (stat's clock ticks, 10 ms each, are too coarse for a step's few CPU-seconds)."""
    total = 0.0
    for p in _tree(pid):
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                total += int(Path(f"/proc/{p}/task/{task}/schedstat").read_text().split()[0]) / 1e9
                continue
            except (OSError, ValueError, IndexError):
                pass
            try:
                fields = Path(f"/proc/{p}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / _TCK
    return total


def _statm_rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except OSError:  # not Linux: this process's peak, the best a portable call offers
        if pid != os.getpid():
            return 0
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return [math.nan] * 3
