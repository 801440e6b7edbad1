"""A small Redis client over a Trio socket: RESP2 commands, a pool of idle connections,
scripts by EVALSHA (loaded with EVAL on NOSCRIPT).

Why not a library: redis-py's asyncio client does not run under Trio; coredis 6 does
(through anyio), but brings anyio's runtime, its own native extension and a client built
for cluster, pub/sub and caching, where the tenants need two scripts and PING. Speaking
RESP for that is a screenful, and leaves the two properties that matter here in edgegw's
hands: each call is bounded by one deadline (a cancel scope), and a connection interrupted
anywhere (a deadline, a cancellation, a half-read reply) is closed, never pooled again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import trio

from edgegw.settings import RedisAddress

# Idle connections kept (each gateway request holds one for a round trip).
MAX_IDLE = 16
# Largest reply read: the scripts answer a few numbers.
MAX_REPLY_BYTES = 1 << 20

Reply = bytes | int | list[Any] | None


class RedisUnavailable(Exception):
    """No answer: refused, reset, timed out, or not RESP (the caller's fail mode decides)."""


class RedisReplyError(Exception):
    """Redis answered with an error (`-ERR ...`)."""


@dataclass(frozen=True, slots=True)
class Script:
    source: str

    @property
    def sha(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()


def encode(args: tuple[bytes | str | int, ...]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class _Connection:
    __slots__ = ("stream", "buffer")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def _line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) == -1:
            await self._fill()
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    async def _fill(self) -> None:
        if len(self.buffer) > MAX_REPLY_BYTES:
            raise RedisUnavailable("reply too large")
        data = await self.stream.receive_some(65536)
        if not data:
            raise RedisUnavailable("connection closed")
        self.buffer += data

    async def reply(self) -> Reply:
        line = await self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RedisReplyError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buffer) < n + 2:
                await self._fill()
            data = bytes(self.buffer[:n])
            del self.buffer[: n + 2]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [await self.reply() for _ in range(n)]
        raise RedisUnavailable("not a RESP reply")


class RedisLink:
    """Calls to one Redis server, each within `timeout_s` (RedisUnavailable past it)."""

    def __init__(self, address: RedisAddress, timeout_s: float) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._idle: list[_Connection] = []

    async def call(self, *args: bytes | str | int) -> Reply:
        try:
            with trio.fail_after(self.timeout_s):
                return await self._call(encode(args))
        except trio.TooSlowError:
            raise RedisUnavailable(f"no answer within {self.timeout_s:g} s") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise RedisUnavailable(getattr(e, "strerror", None) or type(e).__name__) from None

    async def pipeline(
        self, commands: Sequence[tuple[bytes | str | int, ...]]
    ) -> list[Reply | Exception]:
        """Several commands in one write, their replies (or reply errors) in order."""
        try:
            with trio.fail_after(self.timeout_s):
                conn = self._idle.pop() if self._idle else await self._connect()
                try:
                    await conn.stream.send_all(b"".join(encode(c) for c in commands))
                    replies: list[Reply | Exception] = []
                    for _ in commands:
                        try:
                            replies.append(await conn.reply())
                        except RedisReplyError as e:
                            replies.append(e)
                except BaseException:
                    conn.stream.socket.close()
                    raise
                self._keep(conn)
                return replies
        except trio.TooSlowError:
            raise RedisUnavailable(f"no answer within {self.timeout_s:g} s") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise RedisUnavailable(getattr(e, "strerror", None) or type(e).__name__) from None

    async def evalsha(self, script: Script, keys: list[str], args: list[str | int]) -> Reply:
        try:
            return await self.call("EVALSHA", script.sha, len(keys), *keys, *args)
        except RedisReplyError as e:
            if not str(e).startswith("NOSCRIPT"):
                raise
        return await self.call("EVAL", script.source, len(keys), *keys, *args)

    async def _call(self, request: bytes) -> Reply:
        conn = self._idle.pop() if self._idle else await self._connect()
        try:
            await conn.stream.send_all(request)
            reply = await conn.reply()
        except RedisReplyError:
            self._keep(conn)  # a whole reply was read: the connection is sound
            raise
        except BaseException:
            conn.stream.socket.close()  # interrupted mid-exchange: never reused
            raise
        self._keep(conn)
        return reply

    def _keep(self, conn: _Connection) -> None:
        if len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.stream.socket.close()

    async def _connect(self) -> _Connection:
        a = self.address
        stream = await trio.open_tcp_stream(a.host, a.port)
        conn = _Connection(stream)
        try:
            if a.password is not None:
                auth = ("AUTH", a.username, a.password) if a.username else ("AUTH", a.password)
                await stream.send_all(encode(auth))
                await conn.reply()
            if a.db:
                await stream.send_all(encode(("SELECT", a.db)))
                await conn.reply()
        except BaseException:
            stream.socket.close()
            raise
        return conn

    def close(self) -> None:
        for conn in self._idle:
            conn.stream.socket.close()
        self._idle.clear()
