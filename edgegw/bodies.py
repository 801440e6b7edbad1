"""What an upstream may make the gateway hold or relay: bounded, decoded, scrubbed.

- A whole (non-streaming) answer is read under two bounds: its own size
  (`UPSTREAM_MAX_RESPONSE_SIZE`, 502 past it) and the process's buffer budget
  (`EDGEGW_RESPONSE_BUFFER_BUDGET`, shared by every answer being held at once; 503
  `overloaded` past it), so ten huge answers cannot take the process's memory. An answer
  is charged twice its size while held: the pieces and the joined copy exist together.
  The charge comes before the bytes: an answer with a Content-Length is charged whole
  before its body is read (refused at once when it cannot fit); one of unknown length as
  each piece arrives; a compressed one a decoded step at a time, never more than
  READ_SIZE decoded before it is charged.
- edgegw asks for `Accept-Encoding: identity`; an upstream that encodes anyway (gzip or
  deflate) is decoded here, within the same bounds, so a client never gets compressed
  bytes labelled as JSON. Other encodings are refused (502): nothing mislabelled is relayed.
- The provider's key never reaches a client: an upstream text that quotes it (OpenAI's
  "Incorrect API key provided: sk-...") has it replaced before it is relayed.
"""

from __future__ import annotations

import zlib

from edgegw.errors import GatewayError, fail
from edgegw.upstream import READ_SIZE, Response

REDACTED = b"[redacted]"
# Largest decoded size of one compressed stream piece (a decompression bomb in a stream
# is cut here).
STREAM_PIECE_LIMIT = 4 * 1024 * 1024
# gzip or zlib, told apart by their headers (zlib's wbits 32 + 15).
_AUTO_WBITS = 47


class BufferBudget:
    """Bytes of whole upstream answers held by this process at once; `peak` is the most
    ever held (never past `limit`: a charge that would pass it is refused)."""

    __slots__ = ("limit", "held", "peak")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0

    def take(self, n: int) -> None:
        held = self.held + n
        if held > self.limit:
            raise fail(
                "overloaded",
                "The gateway is holding too many large answers; retry shortly.",
                headers=((b"retry-after", b"1"),),
            )
        self.held = held
        if held > self.peak:
            self.peak = held

    def give(self, n: int) -> None:
        self.held -= n


class Decoder:
    """The upstream's Content-Encoding undone, piece by piece (identity passes through)."""

    __slots__ = ("_z", "_limit", "_out", "_per_piece", "_rest", "more")

    def __init__(self, encoding: bytes | None, limit: int, *, per_piece: bool = False) -> None:
        self._limit = limit
        self._out = 0
        self._per_piece = per_piece
        self._rest = b""  # input a `step` left undecoded
        self.more = False  # a `step` with no new input may decode more
        coding = (encoding or b"identity").strip().lower()
        if coding in (b"identity", b""):
            self._z = None
        elif coding in (b"gzip", b"x-gzip", b"deflate"):
            self._z = zlib.decompressobj(_AUTO_WBITS)
        else:
            raise fail("upstream_error", "the upstream answered in an unsupported content-encoding")

    @property
    def active(self) -> bool:
        return self._z is not None

    def feed(self, data: bytes) -> bytes:
        """What `data` decodes to; past the limit, 502 `upstream_response_too_large` (a
        stream decoder bounds each piece by STREAM_PIECE_LIMIT instead of the total)."""
        if self._z is None:
            return data
        room = self._limit if self._per_piece else self._limit - self._out
        try:
            # Never more than the limit allows, whatever the compression ratio.
            out = self._z.decompress(data, room + 1)
        except zlib.error:
            raise fail(
                "bad_upstream_response", "the upstream's compressed body is corrupt"
            ) from None
        if len(out) > room or self._z.unconsumed_tail:
            raise too_large()
        self._out += len(out)
        return out

    def step(self, data: bytes, most: int) -> bytes:
        """At most `most` bytes decoded from what the last step left and then `data` (pass
        b"" while `more`); past the limit, 502 `upstream_response_too_large`."""
        if self._z is None:
            return data
        try:
            out = self._z.decompress(self._rest + data, most)
        except zlib.error:
            raise fail(
                "bad_upstream_response", "the upstream's compressed body is corrupt"
            ) from None
        self._rest = self._z.unconsumed_tail
        self.more = bool(self._rest) or len(out) == most
        self._out += len(out)
        if self._out > self._limit:
            raise too_large()
        return out

    def finish(self) -> bytes:
        if self._z is None:
            return b""
        out = self._z.flush()
        if not self._z.eof:
            raise fail("bad_upstream_response", "the upstream's compressed body is truncated")
        return out


def too_large() -> GatewayError:
    return fail("upstream_response_too_large", "the upstream response is too large")


async def read_whole(resp: Response, limit: int, budget: BufferBudget) -> tuple[bytes, int]:
    """The decoded body of `resp`, at most `limit` bytes, charged to `budget` before it is
    held (module doc). Returns (body, charge); the caller gives the charge back once the
    body is no longer held."""
    if resp.complete:  # no body to read (204, 304, an answer to HEAD)
        return b"", 0
    if resp.arrived and resp.header(b"content-encoding") is None:
        # The whole body came with the head, as most answers do: no read, no decoder.
        body = resp.take_arrived()
        if len(body) > limit:
            raise too_large()
        budget.take(2 * len(body))
        return body, 2 * len(body)
    decoder = Decoder(resp.header(b"content-encoding"), limit)
    declared = None if decoder.active else _declared_length(resp)
    if declared is not None and declared > limit:
        raise too_large()
    parts: list[bytes] = []
    charged = size = 0
    try:
        if declared is not None:
            budget.take(2 * declared)
            charged = 2 * declared
            # Reads of what is left: a read's buffer is within the charge, and few pieces.
            while chunk := await resp.receive_chunk(declared - size):
                size += len(chunk)
                parts.append(chunk)
        else:
            while chunk := await resp.receive_chunk():
                while True:
                    piece = decoder.step(chunk, READ_SIZE)
                    chunk = b""
                    size += len(piece)
                    if size > limit:
                        raise too_large()
                    if piece:
                        budget.take(2 * len(piece))
                        charged += 2 * len(piece)
                        parts.append(piece)
                    if not decoder.more:
                        break
            if tail := decoder.finish():
                size += len(tail)
                if size > limit:
                    raise too_large()
                budget.take(2 * len(tail))
                charged += 2 * len(tail)
                parts.append(tail)
    except BaseException:
        budget.give(charged)
        raise
    return (parts[0] if len(parts) == 1 else b"".join(parts)), charged


def _declared_length(resp: Response) -> int | None:
    """The body's length when a Content-Length frames it (no Transfer-Encoding beside it:
    then the chunks do, RFC 9112 §6.3)."""
    if resp.header(b"transfer-encoding") is not None:
        return None
    value = resp.header(b"content-length")
    return int(value) if value is not None and value.isdigit() else None


def scrub(data: bytes, secret: bytes | None) -> bytes:
    """`data` without the provider's key in it."""
    if secret and data.find(secret) != -1:  # find: edgegw.octets
        return data.replace(secret, REDACTED)
    return data


class Scrubber:
    """`scrub` for a body relayed piece by piece: the last len(secret) - 1 bytes of each
    piece wait for the next, so a key split across two pieces is caught too."""

    __slots__ = ("secret", "held")

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.held = b""

    def feed(self, piece: bytes) -> bytes:
        data = scrub(self.held + piece if self.held else piece, self.secret)
        keep = len(self.secret) - 1
        self.held = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep] if keep else data

    def finish(self) -> bytes:
        held, self.held = self.held, b""
        return held


def stream_decoder(encoding: bytes | None) -> Decoder:
    """A decoder for a stream: no total bound, but one compressed piece never expands
    past STREAM_PIECE_LIMIT (a stream is relayed piece by piece)."""
    return Decoder(encoding, STREAM_PIECE_LIMIT, per_piece=True)
