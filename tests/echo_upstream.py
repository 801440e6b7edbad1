"""A fake provider for the passthrough endpoints: any method and path, records exactly
what arrived (headers, body bytes), answers what the test scripted (status, headers,
a body or a sequence of chunks)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from edgegw import plainhttp


@dataclass(frozen=True)
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    headers: list[tuple[str, str]] = field(
        default_factory=lambda: [("content-type", "application/json")]
    )
    body: bytes = b'{"ok":true}'
    # When set, sent chunked, one piece at a time, `gap_s` apart.
    chunks: list[bytes] | None = None
    gap_s: float = 0.0


class EchoUpstream:
    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.answer: Callable[[Seen], Answer] = lambda seen: Answer()
        self.port = 0

    async def serve(
        self,
        ssl_context: ssl.SSLContext | None = None,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve plain HTTP, or HTTPS with `ssl_context`."""
        listeners: list = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        if ssl_context is not None:
            listeners = [trio.SSLListener(x, ssl_context, https_compatible=True) for x in listeners]
        task_status.started(self.port)
        server = plainhttp.Server("echo upstream", self._answer)
        await trio.serve_listeners(server.serve_connection, listeners)

    async def _answer(self, request: plainhttp.Request, out: plainhttp.Responder) -> None:
        seen = Seen(request.method, request.target, request.headers, request.body or b"")
        self.seen.append(seen)
        answer = self.answer(seen)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
        if answer.chunks is None:
            await out.send(answer.status, headers, answer.body)
            return
        await out.start(answer.status, headers)
        for piece in answer.chunks:
            await trio.sleep(answer.gap_s)
            await out.send_data(piece)
        await out.end()
