"""A closed-loop HTTP/1.1 load generator on Trio, lean enough to drive a Python gateway
from one core: requests are pre-encoded bytes, responses are framed by hand
(Content-Length or chunked), keep-alive on every connection, bounded in time and count."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from itertools import pairwise

import trio


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    skipped: int = 0  # answered within the first skip_s seconds: not in latencies_s or rps

    @property
    def requests(self) -> int:
        return len(self.latencies_s)

    @property
    def rps(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s else 0.0

    def percentile_ms(self, q: float) -> float:
        if not self.latencies_s:
            return float("nan")
        ordered = sorted(self.latencies_s)
        k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
        return ordered[k] * 1000


def post(port: int, path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


class _Conn:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    async def _fill(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise ConnectionError("closed by peer")
        self.buf += data

    async def read_response(self) -> tuple[int, bool]:
        """(status, whether the server keeps the connection open)."""
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            await self._fill()
        head = self.buf[:end].lower()
        self.buf = self.buf[end + 4 :]
        status = int(head[9:12])
        i = head.find(b"content-length:")
        if i >= 0:
            length = int(
                head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None]
            )
            while len(self.buf) < length:
                await self._fill()
            self.buf = self.buf[length:]
        elif b"transfer-encoding: chunked" in head:
            while (j := self.buf.find(b"\r\n0\r\n\r\n")) < 0 and not self.buf.startswith(
                b"0\r\n\r\n"
            ):
                await self._fill()
            self.buf = self.buf[j + 7 :] if j >= 0 else self.buf[5:]
        return status, b"connection: close" not in head


async def run_load(
    port: int,
    request: bytes,
    connections: int,
    duration_s: float,
    max_requests: int = 10_000_000,
    skip_s: float = 0.0,
) -> LoadResult:
    """Closed loop: ``connections`` keep-alive connections, each sending ``request`` again as
    soon as the answer is in, for ``duration_s`` or ``max_requests``. Answers that complete in
    the first ``skip_s`` seconds (connection set-up, warm-up) count only in ``skipped``."""
    result = LoadResult()
    start = time.perf_counter()
    deadline = start + duration_s
    counted_from = start + skip_s
    budget = [max_requests]

    async def worker() -> None:
        conn: _Conn | None = None
        while time.perf_counter() < deadline and budget[0] > 0:
            budget[0] -= 1
            try:
                if conn is None:
                    conn = _Conn(await trio.open_tcp_stream("127.0.0.1", port))
                t0 = time.perf_counter()
                await conn.stream.send_all(request)
                status, keep = await conn.read_response()
                t1 = time.perf_counter()
                if t1 >= counted_from:
                    result.latencies_s.append(t1 - t0)
                else:
                    result.skipped += 1
                if not keep:  # e.g. Hypercorn's keep_alive_max_requests: reconnect, not an error
                    await conn.stream.aclose()
                    conn = None
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if status >= 400:
                    result.errors += 1
            except (OSError, ConnectionError, trio.BrokenResourceError, ValueError) as e:
                result.errors += 1
                kind = type(e).__name__
                result.error_kinds[kind] = result.error_kinds.get(kind, 0) + 1
                if conn is not None:
                    await conn.stream.aclose()
                conn = None
        if conn is not None:
            await conn.stream.aclose()

    with trio.move_on_after(duration_s + 30):
        async with trio.open_nursery() as nursery:
            for _ in range(connections):
                nursery.start_soon(worker)
    result.elapsed_s = time.perf_counter() - max(start, min(counted_from, deadline))
    return result


# --- streaming ----------------------------------------------------------------------------

# A content delta that is not empty: `"content":"x...` (the role chunk has `"content":""`).
_CONTENT = re.compile(rb'"(?:content|text)":\s*"[^"]')


@dataclass
class StreamResult:
    streams: int = 0  # completed with [DONE] and the chunked terminator
    events: int = 0  # SSE events received (all streams, including the first skip_s seconds)
    window_events: int = 0  # events received between skip_s and the deadline
    window_s: float = 0.0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    ttft_s: list[float] = field(default_factory=list)  # send -> first event with content
    total_s: list[float] = field(default_factory=list)  # send -> end of the stream
    gaps_s: list[float] = field(default_factory=list)  # between consecutive content events
    content_events: list[int] = field(default_factory=list)  # per stream
    ahead_of_schedule: int = 0  # streams whose k-th content event came > 2 intervals early
    max_gap_s: float = 0.0

    @property
    def events_per_s(self) -> float:
        return self.window_events / self.window_s if self.window_s else 0.0

    def _pct(self, values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))] * 1000

    def ttft_ms(self, q: float) -> float:
        return self._pct(self.ttft_s, q)

    def gap_ms(self, q: float) -> float:
        return self._pct(self.gaps_s, q)


async def _read_stream(
    conn: _Conn, t0: float, result: StreamResult, window: tuple[float, float]
) -> tuple[bool, list[float]]:
    """Read one chunked SSE response: (ended with [DONE], arrival times of its content events).

    Events that complete in the same read share that read's timestamp."""
    while (end := conn.buf.find(b"\r\n\r\n")) < 0:
        await conn._fill()
    head = conn.buf[:end].lower()
    buf = conn.buf[end + 4 :]
    conn.buf = b""
    status = int(head[9:12])
    result.statuses[status] = result.statuses.get(status, 0) + 1
    if status != 200 or b"transfer-encoding: chunked" not in head:
        raise ValueError(f"status {status}" if status != 200 else "not chunked")
    now = time.perf_counter()
    pending = b""  # de-chunked bytes not yet split into events
    times: list[float] = []
    done = ended = False
    while True:
        pos = 0
        while (nl := buf.find(b"\r\n", pos)) >= 0:  # de-chunk what is buffered
            size = int(buf[pos:nl].split(b";", 1)[0], 16)
            if len(buf) < nl + 4 + size:
                break
            if size == 0:
                ended = True
                pos = nl + 4
                break
            pending += buf[nl + 2 : nl + 2 + size]
            pos = nl + 4 + size
        buf = buf[pos:]
        if b"\n\n" in pending or b"\r\n\r\n" in pending:
            if b"\r" in pending:
                pending = pending.replace(b"\r\n", b"\n")
            *events, pending = pending.split(b"\n\n")
            result.events += len(events)
            if window[0] <= now <= window[1]:
                result.window_events += len(events)
            for ev in events:
                if _CONTENT.search(ev):
                    if not times:
                        result.ttft_s.append(now - t0)
                    times.append(now)
                elif ev.startswith(b"data: [DONE]"):
                    done = True
        if ended:
            conn.buf = buf  # keep-alive: whatever follows belongs to the next response
            return done, times
        data = await conn.stream.receive_some(65536)
        if not data:
            raise ConnectionError("closed by peer mid-stream")
        now = time.perf_counter()
        buf += data


async def run_streams(
    port: int,
    request: bytes,
    connections: int,
    duration_s: float,
    max_streams: int = 1_000_000,
    *,
    skip_s: float = 0.0,
    interval_s: float = 0.0,
    record_gaps: bool = False,
) -> StreamResult:
    """Closed loop of streaming requests on ``connections`` keep-alive connections for
    ``duration_s`` (streams running at the deadline finish) or ``max_streams``.

    ``events_per_s`` counts the events that arrive between ``skip_s`` and the deadline. With
    ``record_gaps`` the gaps between consecutive content events of each stream are kept and,
    given the mock's ``interval_s``, a stream whose k-th content event arrives more than two
    intervals ahead of ``(k - 1) * interval_s`` after its first counts as ``ahead_of_schedule``
    (a relay that buffers and then flushes in a burst)."""
    result = StreamResult()
    start = time.perf_counter()
    deadline = start + duration_s
    window = (start + skip_s, deadline)
    result.window_s = max(0.0, duration_s - skip_s)
    budget = [max_streams]

    async def worker() -> None:
        conn: _Conn | None = None
        while time.perf_counter() < deadline and budget[0] > 0:
            budget[0] -= 1
            try:
                if conn is None:
                    conn = _Conn(await trio.open_tcp_stream("127.0.0.1", port))
                t0 = time.perf_counter()
                await conn.stream.send_all(request)
                done, times = await _read_stream(conn, t0, result, window)
                result.total_s.append(time.perf_counter() - t0)
                result.content_events.append(len(times))
                if not done:
                    raise ValueError("no [DONE]")
                result.streams += 1
                if record_gaps and len(times) > 1:
                    gaps = [b - a for a, b in pairwise(times)]
                    result.gaps_s.extend(gaps)
                    result.max_gap_s = max(result.max_gap_s, max(gaps))
                    if interval_s and any(
                        t - times[0] < (k - 2) * interval_s for k, t in enumerate(times)
                    ):
                        result.ahead_of_schedule += 1
            except (OSError, ConnectionError, trio.BrokenResourceError, ValueError) as e:
                result.errors += 1
                kind = str(e) if isinstance(e, ValueError) else type(e).__name__
                result.error_kinds[kind] = result.error_kinds.get(kind, 0) + 1
                if conn is not None:
                    await conn.stream.aclose()
                conn = None
        if conn is not None:
            await conn.stream.aclose()

    with trio.move_on_after(duration_s + 60):
        async with trio.open_nursery() as nursery:
            for _ in range(connections):
                nursery.start_soon(worker)
    result.elapsed_s = time.perf_counter() - start
    return result


async def hold_idle(
    port: int, request: bytes, n: int, batch: int, measure, hold_s: float = 2.0
) -> dict:
    """Open ``n`` keep-alive connections, ``batch`` at a time, send one request on each and read
    the answer, then keep them all open and idle; call ``measure(open_count)`` at n/2 and at n
    (after ``hold_s``), close them all. Returns what ``measure`` returned, keyed by count."""
    conns: list[_Conn] = []
    errors = 0
    out: dict = {}

    async def one() -> None:
        nonlocal errors
        try:
            conn = _Conn(await trio.open_tcp_stream("127.0.0.1", port))
            conns.append(conn)
            await conn.stream.send_all(request)
            status, keep = await conn.read_response()
            if status != 200 or not keep:
                errors += 1
        except (OSError, ConnectionError, trio.BrokenResourceError, ValueError):
            errors += 1

    try:
        with trio.fail_after(120):
            for target in (n // 2, n):
                while len(conns) < target:
                    async with trio.open_nursery() as nursery:
                        for _ in range(min(batch, target - len(conns))):
                            nursery.start_soon(one)
                await trio.sleep(hold_s)
                out[target] = measure(len(conns))
    finally:
        for conn in conns:
            await conn.stream.aclose()
    out["errors"] = errors
    return out
