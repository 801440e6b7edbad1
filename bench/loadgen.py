"""A closed-loop HTTP/1.1 load generator on Trio, lean enough to drive a Python gateway
from one core: requests are pre-encoded bytes, responses are framed by hand
(Content-Length or chunked), keep-alive on every connection, bounded in time and count."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import trio


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

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
    port: int, request: bytes, connections: int, duration_s: float, max_requests: int = 10_000_000
) -> LoadResult:
    result = LoadResult()
    deadline = time.perf_counter() + duration_s
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
                result.latencies_s.append(time.perf_counter() - t0)
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

    start = time.perf_counter()
    with trio.move_on_after(duration_s + 30):
        async with trio.open_nursery() as nursery:
            for _ in range(connections):
                nursery.start_soon(worker)
    result.elapsed_s = time.perf_counter() - start
    return result
