"""A kept-alive raw upstream: every request on a connection is answered with `answer`'s bytes as
they are, and the connection stays open for the next. It counts connections and keeps their
streams, so that a test can act as the peer on one (send stray bytes, shut its side down).
With `hold_at`, an answer's first `hold_at` bytes go out at once and the rest once `release` is
set: the answer's head is in while its body is held back."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

import trio

from .bad_upstream import read_request, serve_loopback

# Linux's tcp_info: the state is its first byte, tcpi_unacked the u32 at offset 24.
_ESTABLISHED, _FIN_WAIT2 = 1, 5


@dataclass
class RawUpstream:
    answer: bytes = b""
    hold_at: int | None = None
    release: trio.Event = field(default_factory=trio.Event)
    port: int = 0
    connections: int = 0
    requests: int = 0
    streams: list[trio.SocketStream] = field(default_factory=list)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await serve_loopback(self, self._connection, task_status)

    async def _connection(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        self.streams.append(stream)
        buffered = b""
        try:
            while (read := await read_request(stream, buffered)) is not None:
                _, buffered = read
                self.requests += 1
                answer, hold_at = self.answer, self.hold_at
                if hold_at is None:
                    await stream.send_all(answer)
                else:
                    await stream.send_all(answer[:hold_at])
                    await self.release.wait()
                    await stream.send_all(answer[hold_at:])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            with trio.move_on_after(1, shield=True):
                await stream.aclose()


def delivered(stream: trio.SocketStream) -> bool:
    """All this side sent has been acknowledged by the peer's kernel: it is in the peer's
    receive queue, readable there (and a FIN sent with `send_eof` too)."""
    info = stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    state, unacked = info[0], struct.unpack_from("I", info, 24)[0]
    return unacked == 0 and state in (_ESTABLISHED, _FIN_WAIT2)
