"""A tiny HTTP/1.1 client for tests that need the raw bytes of a response or to hang up
mid-stream (what the official SDK hides): `request()` for one exchange on its own
connection, `Client` for a keep-alive connection read a piece at a time (the fakes' tests)."""

from __future__ import annotations

from dataclasses import dataclass, field

import h11
import orjson
import trio


@dataclass
class RawResponse:
    status: int
    headers: dict[bytes, bytes]
    body: bytes = b""
    chunks: list[bytes] = field(default_factory=list)
    # Every header line as sent (`headers` keeps the last of a repeated name).
    header_lines: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass
class Reply:
    """A response as `Client.reply()` read it."""

    status: int
    headers: dict[str, str]
    body: bytes
    complete: bool  # False when the connection ended inside the body (or before any response)

    def json(self) -> object:
        return orjson.loads(self.body)

    def events(self) -> list[object]:
        return sse_events(self.body)


@dataclass
class Client:
    """One connection driven with h11: send a request, then read the answer whole
    (`reply`) or its head and then one SSE event at a time (`head`, `next_event`). For
    keep-alive, `conn.start_next_cycle()` between exchanges."""

    stream: trio.SocketStream
    conn: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))
    buffer: bytes = b""  # body bytes read but not yet handed out as events

    async def send(
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str | None = "application/json",
        headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
        host: str = "127.0.0.1",
    ) -> None:
        """`body` as bytes, or encoded as JSON; a content-type only when there is a body."""
        data = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
        head = [("host", host), ("content-length", str(len(data))), *headers]
        if body is not None and content_type is not None:
            head.append(("content-type", content_type))
        await self.send_head(method, path, head, data)

    async def send_head(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        """A request with exactly these headers."""
        out = self.conn.send(h11.Request(method=method, target=path, headers=headers))
        if body:
            out += self.conn.send(h11.Data(data=body))
        await self.stream.send_all(out + self.conn.send(h11.EndOfMessage()))

    async def event(self) -> object:
        """The next h11 event of the answer, reading from the socket as needed."""
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(await self.stream.receive_some(65536))

    async def head(self) -> tuple[int, dict[str, str]]:
        event = await self.event()
        assert isinstance(event, h11.Response), event
        return event.status_code, {k.decode(): v.decode() for k, v in event.headers}

    async def next_event(self) -> object:
        """The next SSE payload of a streamed body; None at its clean end."""
        while b"\n\n" not in self.buffer:
            event = await self.event()
            if isinstance(event, h11.EndOfMessage):
                assert not self.buffer
                return None
            assert isinstance(event, h11.Data), event
            self.buffer += bytes(event.data)
        block, self.buffer = self.buffer.split(b"\n\n", 1)
        return sse_events(block + b"\n\n")[0]

    async def reply(self) -> Reply:
        status, headers, parts = 0, {}, []
        try:
            while True:
                event = await self.event()
                if isinstance(event, h11.Response):
                    status = event.status_code
                    headers = {k.decode(): v.decode() for k, v in event.headers}
                elif isinstance(event, h11.Data):
                    parts.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    return Reply(status, headers, self.buffer + b"".join(parts), complete=True)
                else:  # ConnectionClosed before any response
                    return Reply(status, headers, b"".join(parts), complete=False)
        except h11.RemoteProtocolError:  # the peer closed inside the body
            return Reply(status, headers, self.buffer + b"".join(parts), complete=False)


async def exchange(
    port: int,
    method: str,
    path: str,
    body: object = None,
    content_type: str | None = "application/json",
    headers: tuple[tuple[str, str], ...] = (),
    host: str = "127.0.0.1",
) -> Reply:
    """One request (as `Client.send` makes it) on its own connection, its answer read whole."""
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        client = Client(stream)
        await client.send(method, path, body, content_type, headers, host)
        return await client.reply()


async def request(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: list[tuple[str, str]] | None = None,
    *,
    max_chunks: int | None = None,
    unix_socket: str | None = None,
) -> RawResponse:
    """Send one request; read the response (or only `max_chunks` body pieces, then hang up).
    With `unix_socket`, connect to that path instead of the port."""
    if unix_socket is not None:
        stream: trio.SocketStream = await trio.open_unix_socket(unix_socket)
    else:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    hdrs = [("host", f"127.0.0.1:{port}"), ("content-length", str(len(body))), *(headers or [])]
    if not any(k.lower() == "content-type" for k, _ in hdrs):
        hdrs.append(("content-type", "application/json"))
    client = Client(stream)
    try:
        await client.send_head(method, path, hdrs, body)
        response: RawResponse | None = None
        while True:
            event = await client.event()
            if isinstance(event, h11.Response):
                raw = list(event.headers.raw_items())
                response = RawResponse(event.status_code, dict(raw), header_lines=raw)
            elif isinstance(event, h11.Data):
                assert response is not None
                response.chunks.append(bytes(event.data))
                response.body += bytes(event.data)
                if max_chunks is not None and len(response.chunks) >= max_chunks:
                    return response
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                assert response is not None
                return response
    finally:
        await stream.aclose()


def sse_data(body: bytes) -> list[bytes]:
    """The data payloads of an SSE body, in order."""
    return [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]


def sse_events(body: bytes) -> list[object]:
    """The payloads of an SSE body of `data:` blocks only, JSON-decoded except the literal
    [DONE] (a block of any other shape fails the test)."""
    out: list[object] = []
    for block in body.split(b"\n\n"):
        if block:
            assert block.startswith(b"data: "), block
            data = block[len(b"data: ") :]
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out
