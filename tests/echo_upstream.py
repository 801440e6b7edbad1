"""A fake provider for the passthrough endpoints: any method and path, records exactly
what arrived (headers, body bytes), answers what the test scripted (status, headers,
a body or a sequence of chunks)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import h11
import trio


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
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = None, b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(65536)
                        conn.receive_data(data)
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += bytes(event.data)
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                assert request is not None
                seen = Seen(
                    request.method.decode(),
                    request.target.decode(),
                    {k.decode(): v.decode() for k, v in request.headers},
                    body,
                )
                self.seen.append(seen)
                answer = self.answer(seen)
                headers = list(answer.headers)
                if answer.chunks is None:
                    headers.append(("content-length", str(len(answer.body))))
                out = conn.send(h11.Response(status_code=answer.status, headers=headers))
                if answer.chunks is None:
                    out += conn.send(h11.Data(data=answer.body)) if answer.body else b""
                    await stream.send_all(out + conn.send(h11.EndOfMessage()))
                else:
                    await stream.send_all(out)
                    for piece in answer.chunks:
                        await trio.sleep(answer.gap_s)
                        await stream.send_all(conn.send(h11.Data(data=piece)))
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                conn.start_next_cycle()
        except (
            h11.ProtocolError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            ssl.SSLError,
        ):
            pass
        finally:
            await stream.aclose()
