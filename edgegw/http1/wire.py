"""The transport of one connection: its socket, driven directly (non-blocking
send/recv first, `wait_readable` / `wait_writable` only when they would block: this is
the hot path of every request), the bytes received but not yet parsed, and the layer's
own error answers.

A write that makes no progress for `write_stall_timeout_s` gives the connection up
(`stalled`); a client that went away (EOF, reset) makes it `gone`; either sets `ended`.
Closing after an answer (`linger`) sends FIN right after the last byte, so the client
sees the end at once, then drains what the client still sends for at most LINGER_S
(LINGER_MAX_BYTES), so that unread request bytes do not turn the close into a reset
that would destroy the answer in flight.
"""

from __future__ import annotations

import socket
from http import HTTPStatus

import trio

from edgegw._core import http_date
from edgegw.errors import default_type, envelope
from edgegw.http1.limits import LINGER_MAX_BYTES, LINGER_S, READ_SIZE

REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


def error_response(status: int, code: str, message: str) -> bytes:
    """A whole answer of the layer's own: the envelope, with `Connection: close`."""
    body = envelope(message, default_type(status), None, code)
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\ndate: %s\r\n\r\n"
        % (status, REASONS.get(status, b""), len(body), http_date())
    ) + body


class Wire:
    """One accepted socket."""

    __slots__ = ("sock", "write_stall_timeout_s", "buf", "gone", "stalled", "linger", "ended")

    def __init__(self, sock: socket.socket, write_stall_timeout_s: float) -> None:
        self.sock = sock
        self.write_stall_timeout_s = write_stall_timeout_s
        self.buf = bytearray()  # received, not yet parsed (a head, pipelined requests)
        self.gone = False  # the client went away, a write stalled, or the socket closed
        self.stalled = False  # a write made no progress for write_stall_timeout_s
        self.linger = False  # an answer went out: FIN, then drain, before closing
        self.ended = trio.Event()  # set once gone

    def recv_now(self) -> bytes | None:
        """What the socket holds now (b"" at EOF or reset), or None if nothing yet."""
        try:
            return self.sock.recv(READ_SIZE)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    async def recv(self) -> bytes:
        """The next bytes from the client, waiting for them; b"" when it went away."""
        while True:
            try:
                return self.sock.recv(READ_SIZE)
            except BlockingIOError:
                pass
            except OSError:
                return b""
            try:
                await trio.lowlevel.wait_readable(self.sock)
            except trio.ClosedResourceError:
                return b""

    async def recv_later(self) -> bytes:
        """`recv` once `recv_now` found nothing: the wait first, not a second recv(2) that
        would fail as the first did."""
        try:
            await trio.lowlevel.wait_readable(self.sock)
        except trio.ClosedResourceError:
            return b""
        return await self.recv()

    async def write(self, data: bytes) -> bool:
        """Send all of `data`; False when the client is gone or the write stalled (the
        connection is then given up)."""
        if self.gone:
            return False
        sock = self.sock
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.lost()
            return False
        if sent == len(data):
            return True
        view = memoryview(data)
        while sent < len(view):
            with trio.move_on_after(self.write_stall_timeout_s) as scope:
                try:
                    await trio.lowlevel.wait_writable(sock)
                except trio.ClosedResourceError:
                    self.lost()
                    return False
            if scope.cancelled_caught:
                self.stalled = True
                self.lost()
                return False
            try:
                sent += sock.send(view[sent:])
            except BlockingIOError:
                pass
            except OSError:
                self.lost()
                return False
        return True

    async def refuse(self, status: int, code: str, message: str) -> None:
        """Answer with the layer's own error; the connection then closes."""
        await self.write(error_response(status, code, message))
        self.linger = True

    def lost(self) -> None:
        self.gone = True
        self.ended.set()

    async def close(self) -> None:
        sock = self.sock
        try:
            if self.linger and not self.gone:
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                else:
                    with trio.move_on_after(LINGER_S):
                        drained = 0
                        while drained < LINGER_MAX_BYTES:
                            data = await Wire.recv(self)  # the socket's bytes, as they come
                            if not data:
                                break
                            drained += len(data)
        finally:
            self.lost()
            trio.lowlevel.notify_closing(sock)
            sock.close()
