"""A tiny HTTP/1.1 client for tests that need the raw bytes of a response or to hang up
mid-stream (what the official SDK hides)."""

from __future__ import annotations

from dataclasses import dataclass, field

import h11
import trio


@dataclass
class RawResponse:
    status: int
    headers: dict[bytes, bytes]
    body: bytes = b""
    chunks: list[bytes] = field(default_factory=list)


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
    conn = h11.Connection(h11.CLIENT)
    hdrs = [("host", f"127.0.0.1:{port}"), ("content-length", str(len(body))), *(headers or [])]
    if not any(k.lower() == "content-type" for k, _ in hdrs):
        hdrs.append(("content-type", "application/json"))
    try:
        await stream.send_all(
            conn.send(h11.Request(method=method, target=path, headers=hdrs))
            + (conn.send(h11.Data(data=body)) if body else b"")
            + conn.send(h11.EndOfMessage())
        )
        response: RawResponse | None = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
                continue
            if isinstance(event, h11.Response):
                response = RawResponse(event.status_code, dict(event.headers.raw_items()))
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
