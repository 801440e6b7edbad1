"""ASGI plumbing shared by the handlers: the callable types, JSON answers, request bodies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from edgegw.errors import GatewayError

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class ClientGone(Exception):
    """The client disconnected before its request was read; there is nobody to answer."""


async def respond_json(
    send: Send, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    # A known length spares Hypercorn the chunked framing (one socket send fewer).
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_body(scope: dict[str, Any], receive: Receive, limit: int) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise GatewayError(400, "invalid_request", "invalid Content-Length") from None
            if declared > limit:
                raise _too_large(limit)
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, "payload_too_large", f"request body exceeds {limit} bytes")
