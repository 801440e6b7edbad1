"""A scriptable misbehaving upstream: raw bytes on a loopback socket, for the faults a real
HTTP library would refuse to produce (bad framing, a reset in the middle of an event, endless
headers, a body that never ends, gzip when identity was asked for, a key quoted back).

Each accepted connection reads one request (head, then a Content-Length body), records it,
and plays the current `Script`: pieces of bytes with pauses, then a clean close, an abortive
reset, or silence (a blackhole that keeps the socket open)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

CLOSE, RESET, HANG = "close", "reset", "hang"


@dataclass
class Script:
    # (pause in seconds before the piece, bytes)
    pieces: Sequence[tuple[float, bytes]] = ()
    end: str = CLOSE


@dataclass
class BadUpstream:
    script: Script = field(default_factory=Script)
    requests: list[bytes] = field(default_factory=list)
    port: int = 0
    connections: int = 0
    # Connections that saw their peer (edgegw) close while the script still had pieces.
    cut_short: int = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await serve_loopback(self, self._connection, task_status)

    async def _connection(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        try:
            read = await read_request(stream)
            if read is None:
                return
            request, _ = read
            self.requests.append(request)
            script = self.script
            for pause, data in script.pieces:
                if pause:
                    await trio.sleep(pause)
                await stream.send_all(data)
            if script.end == HANG:
                await trio.sleep_forever()
            if script.end == RESET:
                # SO_LINGER 0: close sends an RST instead of a FIN.
                stream.socket.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.cut_short += 1
        finally:
            with trio.move_on_after(1, shield=True):
                await stream.aclose()


class _Peer(Protocol):
    port: int


async def serve_loopback(
    peer: _Peer,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    task_status: trio.TaskStatus[None],
) -> None:
    """Serve `handler` on a loopback port of the system's choosing, set as `peer.port`."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    peer.port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        task_status.started()
        await trio.serve_listeners(handler, listeners, handler_nursery=nursery)


async def read_request(
    stream: trio.SocketStream, buffered: bytes = b""
) -> tuple[bytes, bytes] | None:
    """One request (its head, then a Content-Length body) and the bytes read past it; None
    when the peer closes first."""
    data = buffered
    while b"\r\n\r\n" not in data:
        piece = await stream.receive_some(65536)
        if not piece:
            return None
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        piece = await stream.receive_some(65536)
        if not piece:
            return None
        body += piece
    return head + b"\r\n\r\n" + body[:length], body[length:]


def response(status: int, headers: Sequence[tuple[str, str]], body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)
