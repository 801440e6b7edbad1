"""The load generator behind `edgegw bench`: HTTP/1.1 on Trio, closed or open loop.

Lean enough that the gateway, not the generator, is what a run measures: one task and one
request in flight per keep-alive connection, the request encoded once, responses framed and
streams split by the Rust core (the gateway's own sans-IO code), fixed-size HDR-like
histograms. **Closed loop** (``rate`` None): latency from the send. **Open loop**: requests
due at ``start + i / rate`` go to an idle connection (another opened up to
``connections``), and latency runs from the *due* time, so a target that stalls is charged
for every request it held back (no coordinated omission).

Every run is bounded twice: no request starts after ``warmup_s + duration_s`` or
``max_requests``, and what still runs ``timeout_s`` later is cancelled. One watchdog task
cuts requests past their deadline (a cancel scope per request cost more than the rest of
its work: bench/README.md). Hooks for bench/: ``on_phase`` ("run", "done") brackets the
measured phase for CPU counters; ``on_stream`` and ``on_stamped`` get each measured
stream's content-event arrival times (with the mock's ``x_sent_ns`` stamps), so the gap a
relay added can be told from the gap the mock made.

Longer than the guide because the loops, the connection and the histograms are one
measuring instrument: split, their costs would no longer be read in one place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from edgegw._core import ResponseParser, SseSplitter, UpstreamProtocolError

RECEIVE_BYTES = 64 * 1024
# A non-streaming body is kept only to read `usage` from it; past this it is counted and dropped.
MAX_KEPT_BODY_BYTES = 1024 * 1024
# After a failed connect, a closed-loop task waits this long: a target that is down must not turn
# the run into a busy loop of refused connects (the run stays bounded in count regardless).
CONNECT_BACKOFF_S = 0.01
# Past the last deadline, how long cleanup may take before the run is cut.
GRACE_S = 2.0
# Open loop: the scheduler wakes this much before a request is due. Trio's timers sit on epoll,
# whose timeout is whole milliseconds rounded up, so a request sent on the wake-up would be
# 0.65 ms late on average (measured: 2 vCPU KVM guest); waking early and sending at once makes
# lateness rare (0.02 ms on average there). An early request is timed from when it was sent.
TIMER_SLACK_S = 0.001
# The watchdog wakes this many times per request timeout, at most every 1 s and at least
# 5 ms apart: an overrunning request is cut up to a tenth of its timeout late.
WATCHDOG_TICKS = 10
WATCHDOG_TICK_S = (0.005, 1.0)
# Histogram range: whole microseconds up to an hour (longer is clamped, and counted).
MAX_US = 3_600_000_000

# A chat or text chunk that carries generated text: `"content":"x` or `"text":"x` with a
# non-empty string (the role chunk's `"content":""` and `null` do not count). The leading quote
# keeps `"reasoning_content"` out, and inside a JSON string a quote is escaped, so quoted JSON
# in the text cannot match either.
_CONTENT = re.compile(rb'"(?:content|text)":\s*"[^"]')
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":\s*(\d+)')
_SENT_NS = re.compile(rb'^\{"x_sent_ns":(\d+)')  # the stamping mock's first member

_SUB_BITS = 7  # 128 buckets per power of two above 256 µs: each under 0.8 % wide
_EXACT = 2 << _SUB_BITS  # below 256 µs every microsecond has its own bucket


def bucket_index(us: int) -> int:
    """The histogram bucket that a duration of `us` whole microseconds falls in."""
    if us < _EXACT:
        return us
    shift = us.bit_length() - _SUB_BITS - 1
    return (shift << _SUB_BITS) + (us >> shift)


def bucket_bounds(index: int) -> tuple[int, int]:
    """The lowest and highest microsecond value of a bucket."""
    if index < _EXACT:
        return index, index
    shift = (index >> _SUB_BITS) - 1
    m = index - (shift << _SUB_BITS)
    return m << shift, ((m + 1) << shift) - 1


class Histogram:
    """Durations in log-linear buckets of whole microseconds (the HdrHistogram layout at about
    two significant digits): exact below 256 µs, under 0.8 % wide above. A percentile is the
    middle of its bucket, clamped to the exact min and max."""

    __slots__ = ("counts", "total", "sum_us", "min_us", "max_us")

    def __init__(self) -> None:
        self.counts = [0] * (bucket_index(MAX_US) + 1)
        self.total = 0
        self.sum_us = 0
        self.min_us = MAX_US
        self.max_us = 0

    def record(self, seconds: float) -> None:
        us = int(seconds * 1e6)
        if us < 0:
            us = 0
        elif us > MAX_US:
            us = MAX_US
        self.counts[us if us < _EXACT else bucket_index(us)] += 1
        self.total += 1
        self.sum_us += us
        if us < self.min_us:
            self.min_us = us
        if us > self.max_us:
            self.max_us = us

    def percentile_us(self, q: float) -> float:
        """The q-th percentile (0 < q <= 100) in microseconds; nan when empty."""
        if not self.total:
            return math.nan
        if q >= 100:
            return float(self.max_us)
        rank = max(1, math.ceil(q / 100 * self.total))
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                low, high = bucket_bounds(index)
                return min(max((low + high) / 2, self.min_us), self.max_us)
        return float(self.max_us)  # unreachable: the counts sum to total

    def summary_ms(self) -> dict[str, float | int] | None:
        """count, min, mean, p50, p90, p99, p99.9 and max in milliseconds; None when empty."""
        if not self.total:
            return None
        out: dict[str, float | int] = {
            "count": self.total,
            "min": self.min_us / 1000,
            "mean": round(self.sum_us / self.total / 1000, 3),
        }
        for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9)):
            out[name] = round(self.percentile_us(q) / 1000, 3)
        out["max"] = self.max_us / 1000
        return out

    def buckets(self) -> list[list[int]]:
        """[lowest µs of the bucket, count] for every bucket in use, ascending."""
        return [[bucket_bounds(i)[0], c] for i, c in enumerate(self.counts) if c]


@dataclass
class Stats:
    """What one phase (warm-up or measurement) observed."""

    started: int = 0
    requests: int = 0  # finished, successfully or not
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # by kind
    statuses: dict[int, int] = field(default_factory=dict)
    tokens: int = 0  # completion tokens of successful requests
    tokens_from_usage: int = 0  # requests whose tokens came from `usage` (else: content events)
    events: int = 0  # SSE events received, [DONE] included
    latency: Histogram = field(default_factory=Histogram)  # successful requests, to the end
    ttft: Histogram = field(default_factory=Histogram)  # to the first event carrying text
    gap: Histogram = field(default_factory=Histogram)  # between consecutive events of a stream
    send_delay: Histogram = field(default_factory=Histogram)  # open loop: sent minus due
    timeline: dict[int, list[int]] = field(default_factory=dict)  # second -> [requests, errors]

    @property
    def error_count(self) -> int:
        return self.requests - self.ok

    def fail(self, kind: str, second: int) -> None:
        self.requests += 1
        self.errors[kind] = self.errors.get(kind, 0) + 1
        slot = self.timeline.setdefault(second, [0, 0])
        slot[0] += 1
        slot[1] += 1


@dataclass(frozen=True, slots=True)
class LoadSpec:
    address: str  # an IP address to connect to (resolve names once, before the run)
    port: int
    request: bytes  # the whole request, sent as is on every exchange
    stream: bool  # expect an SSE stream (and time its events)
    connections: int  # closed loop: how many; open loop: the most that may be opened
    rate: float | None  # requests per second (open loop); None for a closed loop
    duration_s: float
    warmup_s: float
    max_requests: int  # measured requests started, at most (the warm-up has its own, equal cap)
    timeout_s: float  # per request, from its start (closed loop) or due time (open loop)


class _Exchange:
    """The mutable state of one request in progress."""

    __slots__ = (
        "status", "fault", "first", "last", "events", "content", "done", "usage_tokens", "body",
        "times", "sent",
    )  # fmt: skip

    def __init__(self, times: list[float] | None, sent: list[int] | None = None) -> None:
        self.times = times  # arrival times of the content events, when someone wants them
        self.sent = sent  # their x_sent_ns stamps (-1: none), when someone wants them
        self.status = 0
        self.done = False
        self.fault: str | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.events = 0
        self.content = 0
        self.usage_tokens: int | None = None
        self.body = bytearray()


class _Connection:
    """One connection task's socket and the deadline of its request in flight (inf: none),
    which the watchdog holds it to."""

    __slots__ = ("stream", "deadline")

    def __init__(self) -> None:
        self.stream: trio.SocketStream | None = None
        self.deadline = math.inf


class Load:
    """One run. ``await load.run()``; the live counters feed a progress display.

    ``on_phase("run")`` is called when the measured phase begins, ``on_phase("done")`` when
    the run has ended; ``on_stream(times)`` with each successful measured stream's content
    event arrival times (trio clock); ``on_stamped(times, sent)`` with those and the events'
    ``x_sent_ns`` stamps (time.perf_counter_ns of the mock's write; -1 where absent)."""

    def __init__(
        self,
        spec: LoadSpec,
        *,
        on_phase: Callable[[str], object] | None = None,
        on_stream: Callable[[list[float]], object] | None = None,
        on_stamped: Callable[[list[float], list[int]], object] | None = None,
    ) -> None:
        self.spec = spec
        self._on_phase = on_phase
        self._on_stream = on_stream
        self._on_stamped = on_stamped
        self.warmup = Stats()
        self.measured = Stats()
        self.connections_opened = 0
        self.connections_open = 0
        self.peak_connections = 0
        self.interrupted = False
        self.start = 0.0
        self.measure_start = 0.0
        self.end = 0.0
        self.finished: float | None = None
        self._idle = 0  # open loop: connection tasks waiting for a due time
        self._workers = 0
        self._connections: set[_Connection] = set()
        self._scope: trio.CancelScope | None = None

    @property
    def elapsed_s(self) -> float:
        """Measured time: from the end of the warm-up to the last request's end."""
        finish = self.finished if self.finished is not None else trio.current_time()
        return max(0.0, finish - self.measure_start)

    @property
    def in_flight(self) -> int:
        """Open loop: requests sent and not yet answered whole (a stream: not yet ended);
        closed loop: the connection tasks, each always in a request or about to send one."""
        if self.spec.rate is None:
            return len(self._connections)
        return self._workers - self._idle

    def phase(self) -> str:
        if self.finished is not None:
            return "done"
        now = trio.current_time()
        if now < self.measure_start:
            return "warm-up"
        return "run" if now < self.end else "drain"

    def interrupt(self) -> None:
        """Stop now (Ctrl-C): requests in flight are dropped, the rest is reported."""
        self.interrupted = True
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        spec = self.spec
        self.start = trio.current_time()
        self.measure_start = self.start + spec.warmup_s
        self.end = self.measure_start + spec.duration_s
        with trio.CancelScope(deadline=self.end + spec.timeout_s + GRACE_S) as scope:
            self._scope = scope
            if self.interrupted:
                scope.cancel()
            async with trio.open_nursery() as outer:
                outer.start_soon(self._watch)
                async with trio.open_nursery() as nursery:
                    if self._on_phase is not None:
                        if spec.warmup_s > 0:
                            nursery.start_soon(self._announce_run, self._on_phase)
                        else:
                            self._on_phase("run")
                    if spec.rate is None:
                        for _ in range(spec.connections):
                            nursery.start_soon(self._closed_loop)
                    else:
                        nursery.start_soon(self._schedule, nursery)
                outer.cancel_scope.cancel()  # the watchdog, once every request has ended
        self.finished = trio.current_time()
        if self._on_phase is not None:
            self._on_phase("done")

    async def _announce_run(self, on_phase: Callable[[str], object]) -> None:
        await trio.sleep_until(self.measure_start)
        on_phase("run")

    async def _watch(self) -> None:
        """Wake every exchange blocked past its deadline: its receive (or send) raises
        ClosedResourceError, and `_request` counts it as a timeout."""
        low, high = WATCHDOG_TICK_S
        tick = min(max(self.spec.timeout_s / WATCHDOG_TICKS, low), high)
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            for conn in self._connections:
                if conn.deadline <= now and conn.stream is not None:
                    trio.lowlevel.notify_closing(conn.stream.socket)

    # -- the two loops ------------------------------------------------------------------------

    def _admit(self, due: float) -> Stats | None:
        """The phase a request due at `due` belongs to, counted as started; None: do not send."""
        if due >= self.end:
            return None
        stats = self.warmup if due < self.measure_start else self.measured
        if stats.started >= self.spec.max_requests:
            return None
        stats.started += 1
        return stats

    async def _closed_loop(self) -> None:
        conn = _Connection()
        self._connections.add(conn)
        try:
            while True:
                now = trio.current_time()
                stats = self._admit(now)
                if stats is None:
                    if now < self.measure_start:  # the warm-up's cap is spent: wait it out
                        await trio.sleep_until(self.measure_start)
                        continue
                    return
                await self._request(conn, now, stats)
        finally:
            await self._release(conn)

    async def _schedule(self, nursery: trio.Nursery) -> None:
        spec = self.spec
        assert spec.rate is not None
        send, receive = trio.open_memory_channel[tuple[float, Stats]](0)
        async with send, receive:
            i = 0
            while True:
                due = self.start + i / spec.rate
                i += 1
                stats = self._admit(due)
                if stats is None:
                    if due < self.measure_start:  # the warm-up's cap is spent: skip to the run
                        i = max(i, math.ceil(spec.warmup_s * spec.rate))
                        continue
                    return
                await trio.sleep_until(due - TIMER_SLACK_S)
                if self._idle == 0 and self._workers < spec.connections:
                    self._idle += 1
                    self._workers += 1
                    nursery.start_soon(self._open_loop, receive.clone())
                await send.send((due, stats))

    async def _open_loop(self, receive: trio.MemoryReceiveChannel[tuple[float, Stats]]) -> None:
        conn = _Connection()
        self._connections.add(conn)
        try:
            async with receive:
                async for due, stats in receive:
                    self._idle -= 1
                    now = trio.current_time()
                    stats.send_delay.record(now - due)  # early (negative) counts as 0
                    if now - due >= self.spec.timeout_s:  # held back too long to be worth sending
                        stats.fail("timeout", self._second(now))
                    else:
                        await self._request(conn, max(due, now), stats)
                    self._idle += 1
        finally:
            await self._release(conn)

    # -- one request --------------------------------------------------------------------------

    def _second(self, t: float) -> int:
        return int(t - self.measure_start) if t >= self.measure_start else -1

    async def _request(self, conn: _Connection, origin: float, stats: Stats) -> None:
        """Send one request on `conn` (connecting first if needed) and record it."""
        spec = self.spec
        deadline = origin + spec.timeout_s
        stream = conn.stream
        if stream is None:
            stream = conn.stream = await self._connect(deadline, stats)
            if stream is None:
                return
        kind: str | None = None
        reusable = False
        hooked = spec.stream and (self._on_stream is not None or self._on_stamped is not None)
        ex = _Exchange(
            [] if hooked else None, [] if hooked and self._on_stamped is not None else None
        )
        conn.deadline = deadline  # the watchdog's from here
        try:
            reusable = await self._exchange(stream, ex, stats)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            kind = "closed"
        except UpstreamProtocolError as e:  # framing: a cut response, or broken HTTP/SSE
            kind = "closed" if e.code == "upstream_connection_lost" else "protocol"
        conn.deadline = math.inf
        now = trio.current_time()
        if now >= deadline:  # cut by the watchdog, or answered too late anyway
            kind = "timeout"
        if kind is None:
            self._finish(ex, origin, now, stats)
        else:
            stats.fail(kind, self._second(now))
        if kind is not None or not reusable:
            conn.stream = None
            await self._drop(stream)

    async def _connect(self, deadline: float, stats: Stats) -> trio.SocketStream | None:
        """A new connection, or None (the failure counted against `stats`)."""
        with trio.move_on_at(deadline):
            try:
                stream = await trio.open_tcp_stream(self.spec.address, self.spec.port)
            except OSError:
                stats.fail("connect", self._second(trio.current_time()))
                await trio.sleep(CONNECT_BACKOFF_S)
                return None
            self.connections_opened += 1
            self.connections_open += 1
            self.peak_connections = max(self.peak_connections, self.connections_open)
            return stream
        stats.fail("timeout", self._second(trio.current_time()))
        return None

    async def _release(self, conn: _Connection) -> None:
        self._connections.discard(conn)
        if conn.stream is not None:
            stream, conn.stream = conn.stream, None
            await self._drop(stream)

    async def _drop(self, stream: trio.SocketStream) -> None:
        self.connections_open -= 1
        with trio.move_on_after(1, shield=True):
            try:
                await stream.aclose()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _exchange(self, stream: trio.SocketStream, ex: _Exchange, stats: Stats) -> bool:
        """Write the request, read the whole response into `ex`; whether the connection can
        carry another request. Transport and framing errors propagate."""
        parser = ResponseParser()
        splitter: SseSplitter | None = None
        clock = trio.current_time
        gap = stats.gap
        await stream.send_all(self.spec.request)
        while True:
            data = await stream.receive_some(RECEIVE_BYTES)
            fed = parser.feed(data) if data else parser.feed_eof()
            head, body, done = fed.head, fed.body, fed.done
            if head is not None:
                ex.status = head.status
                if self.spec.stream and 200 <= ex.status < 300:
                    if _is_sse(head.headers):
                        splitter = SseSplitter()
                    else:
                        ex.fault = "not_sse"
            if body:
                if splitter is None:
                    if len(ex.body) < MAX_KEPT_BODY_BYTES:
                        ex.body += body
                else:
                    now = clock()
                    for event in splitter.feed(body):
                        if ex.last is not None:
                            gap.record(now - ex.last)
                        ex.last = now
                        ex.events += 1
                        if event.is_done:
                            ex.done = True
                            continue
                        payload = event.data
                        if event.event == "error" or payload.startswith(b'{"error"'):
                            ex.fault = "sse_error"
                        elif _CONTENT.search(payload):
                            ex.content += 1
                            if ex.first is None:
                                ex.first = now
                            if ex.times is not None:
                                ex.times.append(now)
                                if ex.sent is not None:
                                    m = _SENT_NS.match(payload)
                                    ex.sent.append(int(m[1]) if m else -1)
                        if b'"completion_tokens"' in payload:
                            m = _COMPLETION_TOKENS.search(payload)
                            if m:
                                ex.usage_tokens = int(m[1])
            if done:
                # A stream that ends without [DONE], or in the middle of an event, was cut.
                if splitter is not None and (splitter.finish() or not ex.done):
                    ex.fault = ex.fault or "stream_incomplete"
                return parser.reusable

    def _finish(self, ex: _Exchange, origin: float, now: float, stats: Stats) -> None:
        stats.statuses[ex.status] = stats.statuses.get(ex.status, 0) + 1
        stats.events += ex.events
        if not 200 <= ex.status < 300:
            stats.fail(f"http_{ex.status}", self._second(now))
            return
        if ex.fault is not None:
            stats.fail(ex.fault, self._second(now))
            return
        stats.requests += 1
        stats.ok += 1
        slot = stats.timeline.setdefault(self._second(now), [0, 0])
        slot[0] += 1
        stats.latency.record(now - origin)
        if ex.first is not None:
            stats.ttft.record(ex.first - origin)
        if ex.times is not None and stats is self.measured:
            if self._on_stream is not None:
                self._on_stream(ex.times)
            if self._on_stamped is not None and ex.sent is not None:
                self._on_stamped(ex.times, ex.sent)
        if ex.usage_tokens is not None:
            stats.tokens += ex.usage_tokens
            stats.tokens_from_usage += 1
        elif self.spec.stream:
            stats.tokens += ex.content
        else:
            m = _COMPLETION_TOKENS.search(ex.body)
            if m:
                stats.tokens += int(m[1])
                stats.tokens_from_usage += 1


@dataclass(frozen=True, slots=True)
class Probe:
    """How the target answered one request."""

    kind: str | None  # None when an HTTP answer came (see status); else the error kind
    status: int = 0
    detail: str | None = None  # the error envelope's code, or the system's reason


async def probe(spec: LoadSpec, *, connect_timeout_s: float, answer_timeout_s: float) -> Probe:
    """Send one request on its own connection and read its head (and an error's body):
    can the run start at all?"""
    try:
        with trio.fail_after(connect_timeout_s):
            stream = await trio.open_tcp_stream(spec.address, spec.port)
    except OSError as e:
        return Probe("connect", detail=_reason(e))
    except trio.TooSlowError:
        return Probe("timeout", detail=f"no connection within {connect_timeout_s:g} s")
    parser = ResponseParser()
    status, body = 0, bytearray()
    try:
        with trio.move_on_after(answer_timeout_s):
            await stream.send_all(spec.request)
            while True:
                data = await stream.receive_some(RECEIVE_BYTES)
                fed = parser.feed(data) if data else parser.feed_eof()
                head, piece, done = fed.head, fed.body, fed.done
                if head is not None:
                    status = head.status
                    if 200 <= status < 300:
                        return Probe(None, status)
                if len(body) < MAX_KEPT_BODY_BYTES:
                    body += piece
                if done:
                    return Probe(None, status, _error_code(bytes(body)))
        return Probe("timeout", status, f"no answer within {answer_timeout_s:g} s")
    except (OSError, trio.BrokenResourceError):
        return Probe("closed", detail="the connection was closed")
    except UpstreamProtocolError as e:
        return Probe(
            "closed" if e.code == "upstream_connection_lost" else "protocol", detail=e.code
        )
    finally:
        with trio.move_on_after(1, shield=True):
            await stream.aclose()


async def send_one(stream: trio.SocketStream, request: bytes) -> tuple[int, bool]:
    """Send `request` on an open connection and read the whole answer, untimed: (its status,
    whether the connection can carry another request). For callers that need connections in
    a known state (bench/memory.py holds thousands open and idle); transport and framing
    errors propagate."""
    parser = ResponseParser()
    status = 0
    await stream.send_all(request)
    while True:
        data = await stream.receive_some(RECEIVE_BYTES)
        fed = parser.feed(data) if data else parser.feed_eof()
        if fed.head is not None:
            status = fed.head.status
        if fed.done:
            return status, parser.reusable


def _reason(e: OSError) -> str:
    """The system's words for a failed connect (trio wraps each attempt's error in a group)."""
    cause = e.__cause__
    if isinstance(cause, BaseExceptionGroup):
        for inner in cause.exceptions:
            if isinstance(inner, OSError) and inner.strerror:
                return inner.strerror
    return e.strerror or str(e) or type(e).__name__


def _error_code(body: bytes) -> str | None:
    """The `code` (or `type`) of an OpenAI error envelope, if the body is one."""
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(error, dict):
        return None
    code = error.get("code") or error.get("type")
    return str(code)[:80] if code is not None else None


def _is_sse(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"content-type":
            return value.lower().startswith(b"text/event-stream")
    return False


def _tokens_source(stats: Stats) -> str | None:
    if not stats.ok:
        return None
    if stats.tokens_from_usage == stats.ok:
        return "usage"
    return "content_events" if stats.tokens_from_usage == 0 else "mixed"


def stats_json(stats: Stats, elapsed_s: float) -> dict[str, Any]:
    """The measured phase as plain JSON values (durations in ms, histograms in µs)."""
    per_s = (lambda n: round(n / elapsed_s, 3)) if elapsed_s > 0 else (lambda n: 0.0)
    return {
        "requests": stats.requests,
        "ok": stats.ok,
        "errors": stats.error_count,
        "error_rate": round(stats.error_count / stats.requests, 6) if stats.requests else 0.0,
        "errors_by_kind": dict(sorted(stats.errors.items())),
        "status_counts": {str(k): v for k, v in sorted(stats.statuses.items())},
        "tokens": stats.tokens,
        "tokens_source": _tokens_source(stats),
        "events": stats.events,
        "throughput": {
            "requests_per_s": per_s(stats.requests),
            "ok_per_s": per_s(stats.ok),
            "tokens_per_s": per_s(stats.tokens),
            "events_per_s": per_s(stats.events),
        },
        "latency_ms": stats.latency.summary_ms(),
        "ttft_ms": stats.ttft.summary_ms(),
        "gap_ms": stats.gap.summary_ms(),
        "send_delay_ms": stats.send_delay.summary_ms(),
        "timeline": [
            {"second": s, "requests": v[0], "errors": v[1]}
            for s, v in sorted(stats.timeline.items())
            if s >= 0
        ],
        "histograms_us": {
            name: hist.buckets()
            for name, hist in (
                ("latency", stats.latency),
                ("ttft", stats.ttft),
                ("gap", stats.gap),
                ("send_delay", stats.send_delay),
            )
            if hist.total
        },
    }
