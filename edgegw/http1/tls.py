"""TLS on a connection of the layer: `TlsWire` is a `Wire` whose bytes pass through an
`ssl.SSLObject` over memory BIOs, on the same non-blocking socket, so that HTTPS gets every
bound of the plain port (the head, body, keep-alive and write-stall deadlines, the head
screen, the caps, descriptor release on EOF) from the same code.

- The handshake runs under the new connection's head deadline (header_timeout_s from
  accept) and a bound on handshakes in progress (MAX_HANDSHAKES); a client that does not
  finish it in time is closed without an answer, as one that sent nothing.
- Writes encrypt into the outgoing BIO and leave through `Wire.write` (its stall
  deadline), one writer at a time: a record the reader makes OpenSSL produce (a TLS 1.3
  key update answer) waits in the BIO for the next write, so records never interleave.
- ALPN offers http/1.1 only: HTTP/2 is not served here (README "HTTPS and HTTP/2").

Python's ssl module is OpenSSL itself; the BIOs cost one copy each way, as trio.SSLStream's
(which drives the same SSLObject through a stream abstraction this layer does not use).
"""

from __future__ import annotations

import socket
import ssl

import trio

from edgegw.http1.limits import LINGER_S, READ_SIZE
from edgegw.http1.wire import Wire

# OpenSSL's refusals of what a client sent: the connection just ends.
_TLS_ERRORS = (ssl.SSLError, ssl.CertificateError)


def server_context(cert_path: str, key_path: str, alpn: list[str]) -> ssl.SSLContext:
    """TLS 1.2 or newer, no compression, no renegotiation, forward-secret AEAD suites for
    TLS 1.2 (TLS 1.3's are all such), ALPN `alpn`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    # Mozilla's "intermediate" TLS 1.2 list, as Hypercorn's default.
    ctx.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20")
    ctx.set_alpn_protocols(alpn)
    ctx.load_cert_chain(cert_path, key_path)
    return ctx


class TlsWire(Wire):
    __slots__ = ("tls", "incoming", "outgoing", "flushing", "flushed")

    def __init__(
        self, sock: socket.socket, write_stall_timeout_s: float, context: ssl.SSLContext
    ) -> None:
        super().__init__(sock, write_stall_timeout_s)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        # One flush at a time, so that records leave in order: a flag and, while a flush
        # blocked mid-send has another waiting, an event (a trio.Lock's acquire and release
        # were 6 % of a paced TLS stream's instructions, bench/README.md).
        self.flushing = False
        self.flushed: trio.Event | None = None

    async def handshake(self) -> bool:
        """Complete the TLS handshake; False if the client failed it or went away."""
        tls = self.tls
        while True:
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                if not await self._flush():
                    return False
                data = await super().recv()
                if not data:
                    return False
                self.incoming.write(data)
                continue
            except _TLS_ERRORS:
                await self._flush()  # the alert saying why, when there is one
                return False
            # TLS 1.3 session tickets follow the server's Finished.
            return await self._flush()

    def recv_now(self) -> bytes | None:
        """Decrypted bytes available now (b"" at EOF, reset or a TLS error), else None."""
        tls = self.tls
        while True:
            try:
                data = tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return b""  # close_notify
            except _TLS_ERRORS:
                return b""
            else:
                return data
            raw = super().recv_now()
            if raw is None:
                return None
            if not raw:
                return b""
            self.incoming.write(raw)

    async def recv(self) -> bytes:
        while True:
            data = self.recv_now()
            if data is not None:
                return data
            try:
                await trio.lowlevel.wait_readable(self.sock)
            except trio.ClosedResourceError:
                return b""

    async def write(self, data: bytes) -> bool:
        if self.gone:
            return False
        try:
            self.tls.write(data)  # a memory BIO takes it all
        except _TLS_ERRORS:
            self.lost()
            return False
        return await self._flush()

    async def _flush(self) -> bool:
        """Send what the outgoing BIO holds, whoever put it there, in order. Free, as nearly
        always, it is taken with no checkpoint (a lock's `acquire` has one: a turn of the
        scheduler every write of a TLS stream)."""
        while self.flushing:
            if self.flushed is None:
                self.flushed = trio.Event()
            await self.flushed.wait()
        self.flushing = True
        try:
            while self.outgoing.pending:
                if not await super().write(self.outgoing.read()):
                    return False
        finally:
            self.flushing = False
            if self.flushed is not None:
                self.flushed.set()
                self.flushed = None
        return True

    async def close(self) -> None:
        if self.linger and not self.gone:
            # close_notify, then Wire's FIN and drain: the client reads a clean end.
            try:
                self.tls.unwrap()
            except (ssl.SSLWantReadError, *_TLS_ERRORS):
                pass
            with trio.move_on_after(LINGER_S):
                await self._flush()
        await super().close()
