"""A chat answer rewritten into another API's as it is sent: the ASGI `send` a translated
request's chat path writes into (`TranslatedSend`).

The chat path (edgegw.routes.generation: remote providers, local models, routing aliases,
their fallbacks, the guardrails, the MCP loop) writes its answer as it always does; this
send rewrites each piece on its way to the client. That is the one place every kind of
chat answer passes (a remote stream through edgegw.pump, a local one through
edgegw.local.serve's own loop), so the translation sits there rather than in each.
A stream's whole chat events go through the API's stream translation; a whole answer is
held until its last byte and translated once; an error answer or a stream's error event
is written again in the API's error shape. Everything else of the head (status, X-SIE-*,
X-Selected-*, the guardrails' warning) is kept.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from edgegw._core import SseSplitter
from edgegw.asgi import Send
from edgegw.errors import CATALOGUE, ErrorShape, GatewayError, render_error


class StreamTranslation(Protocol):
    ended: bool

    def chunk(self, doc: dict[str, Any]) -> bytes: ...

    def done(self) -> bytes: ...

    def error(self, status: int, code: str, message: str) -> bytes: ...


class Translation(Protocol):
    """An API's side of a translated request (edgegw.translate.messages / responses)."""

    @property
    def shape(self) -> ErrorShape: ...

    def answer(self, chat: Any) -> dict[str, Any]: ...

    def stream(self) -> StreamTranslation: ...


class TranslatedSend:
    """The `send` a translated request's chat answer is written into (module doc)."""

    __slots__ = ("_send", "_api", "_stream", "_splitter", "_head", "_held")

    def __init__(self, send: Send, api: Translation) -> None:
        self._send = send
        self._api = api
        self._stream: StreamTranslation | None = None
        self._splitter = SseSplitter()
        self._head: dict[str, Any] | None = None
        self._held: list[bytes] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status = message["status"]
            ctype = _header(message["headers"], b"content-type") or b""
            if 200 <= status < 300 and ctype.startswith(b"text/event-stream"):
                self._stream = self._api.stream()
                await self._send(message)
            else:
                self._head = message
            return
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        if self._stream is not None:
            await self._send(
                {"type": "http.response.body", "body": self._events(body, more), "more_body": more}
            )
            return
        self._held.append(body)
        if not more:
            await self._whole(b"".join(self._held))

    def _events(self, body: bytes, more: bool) -> bytes:
        stream = self._stream
        assert stream is not None
        if stream.ended:
            return b""  # after an error event (SIE's ends with [DONE] too): nothing more
        events = self._splitter.feed(body)
        if not events and body.startswith(b":"):
            return body  # a keep-alive comment, which every SSE parser skips
        out = bytearray()
        for event in events:
            if event.is_done:
                out += stream.done()
                break
            try:
                doc = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                out += stream.error(
                    502, "bad_upstream_response", "the model sent an event that is not JSON"
                )
                break
            if not isinstance(doc, dict):
                continue
            if isinstance(err := doc.get("error"), dict):
                code, message, _, _ = _envelope(err)
                out += stream.error(CATALOGUE.get(code, (502, ""))[0], code, message)
                break
            out += stream.chunk(doc)
        if not more and not stream.ended:
            out += stream.error(502, "upstream_stream_truncated", "the answer ended before its end")
        return bytes(out)

    async def _whole(self, body: bytes) -> None:
        head = self._head
        assert head is not None
        status = head["status"]
        extra = [
            (k, v) for k, v in head["headers"] if k not in (b"content-type", b"content-length")
        ]
        if 200 <= status < 300:
            try:
                payload = orjson.dumps(self._api.answer(orjson.loads(body)))
            except orjson.JSONDecodeError:
                status, payload = self._error(
                    502, "bad_upstream_response", "the answer is not JSON"
                )
            except GatewayError as e:
                status, _, payload = render_error(e, self._api.shape)
        else:
            status, payload = self._rewritten_error(status, body)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(payload)),
            *extra,
        ]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": payload})

    def _error(self, status: int, code: str, message: str) -> tuple[int, bytes]:
        type_ = CATALOGUE.get(code, (status, "server_error"))[1]
        return status, self._api.shape.answer(status, type_, None, code, message)

    def _rewritten_error(self, status: int, body: bytes) -> tuple[int, bytes]:
        """An error answer in OpenAI's envelope, in the API's shape."""
        try:
            err = orjson.loads(body).get("error")
        except (orjson.JSONDecodeError, AttributeError):
            err = None
        if not isinstance(err, dict):
            return self._error(status, "upstream_error", f"the model answered with status {status}")
        code, message, type_, param = _envelope(err)
        return status, self._api.shape.answer(status, type_, param, code, message)


def _envelope(err: dict[str, Any]) -> tuple[str, str, str, str | None]:
    """(code, message, type, param) of an error in OpenAI's envelope (or SIE's chunk)."""

    def text(name: str) -> str | None:
        value = err.get(name)
        return value if isinstance(value, str) else None

    code = text("code") or "upstream_error"
    return code, text("message") or code, text("type") or "server_error", text("param")


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for k, v in headers:
        if k == name:
            return bytes(v)
    return None
