"""Request bodies being read, bounded on their own: a body holds no EDGEGW_MAX_IN_FLIGHT
slot until it is whole, so clients that send a head and then stall (or trickle) their
bodies cannot lock out the requests that arrive whole.

While a body arrives it counts against three bounds (EDGEGW_MAX_BODIES_*): bodies in
progress in the process, bodies in progress from one client address (so that one address
cannot take them all), and the bytes they have received so far. Past any of them the
request is answered 503 `overloaded` with Retry-After at once; the connection layer's body
deadlines (SERVER_BODY_IDLE_TIMEOUT, SERVER_BODY_TIMEOUT) end the ones that stall. A body
that came whole with its head (on the plain listener) meets the same bounds but is taken at
once, never in progress.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from edgegw.asgi import Call
from edgegw.errors import GatewayError, fail, payload_too_large

RETRY_AFTER = ((b"retry-after", b"1"),)
TOO_MANY_BYTES = "Too many request body bytes in progress; retry shortly."


@dataclass(slots=True)
class Intake:
    max_bodies: int
    max_per_client: int
    max_bytes: int
    bodies: int = 0
    bytes: int = 0
    # Bodies in progress per client address (absent: none).
    by_client: dict[Hashable, int] = field(default_factory=dict)

    async def read(self, call: Call, limit: int) -> None:
        """Read `call`'s whole body (at most `limit` bytes: 413 beyond) and hold it for the
        route, within the bounds above."""
        client = call.scope.get("client")
        address = client[0] if client else None
        if self.bodies >= self.max_bodies:
            raise _overloaded("Too many request bodies in progress; retry shortly.")
        held = self.by_client.get(address, 0)
        if address is not None and held >= self.max_per_client:
            raise _overloaded("Too many request bodies in progress from this address.")
        call.content_length(limit)
        whole = call.whole_body()
        if whole is not None:  # it came with the head: held across no wait, never in progress
            if len(whole) > limit:
                raise payload_too_large(limit)
            if self.bytes + len(whole) > self.max_bytes:
                raise _overloaded(TOO_MANY_BYTES)
            call.hold_body(whole)
            return
        self.bodies += 1
        self.by_client[address] = held + 1
        charged = 0
        try:
            chunks: list[bytes] = []
            while chunk := await call.next_body_chunk():
                if charged + len(chunk) > limit:
                    raise payload_too_large(limit)
                if self.bytes + len(chunk) > self.max_bytes:
                    raise _overloaded(TOO_MANY_BYTES)
                charged += len(chunk)
                self.bytes += len(chunk)
                chunks.append(chunk)
            call.hold_body(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        finally:
            self.bytes -= charged
            self.bodies -= 1
            left = self.by_client[address] - 1
            if left:
                self.by_client[address] = left
            else:
                del self.by_client[address]


def _overloaded(message: str) -> GatewayError:
    return fail("overloaded", message, headers=RETRY_AFTER)
