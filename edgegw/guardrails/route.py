"""The guardrails as a route applies them: `guard_request()` binds them to one request of
one API (edgegw.guardrails.apis), and every route that sends a client's content to a model
asks it for the same phases, whatever its URL:

  - `pre_call(body)` once the body is read and checked, before the target is resolved;
  - `post_call(payload)`: a whole 2xx answer before the client gets it (an Inspect);
  - `stream()`: a StreamGuard, which judges a streamed answer as it passes;
  - `tool(...)`: MCP's tool_args and tool_output.

What the policy reads as `request.body`: a JSON body as sent (or any other body, as
text); a multipart form (the Images API's edits and variations) as a JSON object of its
text fields, its image files left out (`form_fields`), redacted field by field; a whole
answer as sent; a stream as the text its events carried so far.

A stream is judged at event boundaries, before the events are relayed: once at least
STREAM_CHECK_MIN_CHARS new characters came and the text grew by a STREAM_CHECK_GROWTH-th
of what was last judged, at every event without text that follows text (the event that
closes a piece of text: chat's finish chunk and `[DONE]`, `content_block_stop`,
`response.output_text.done`), and at the stream's end. So no text goes unjudged before the
stream's last event, the number of checks grows with the logarithm of the text (plus one
per piece of text), and their total cost with its length. What is relayed before a check
is out: a block ends the stream with the API's error event (nothing more is relayed), and
so does a redact (the text already sent cannot be taken back; withholding the rest is all
that is left); a warn is logged and counted, its header too late for the head.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson

from edgegw._core import SseSplitter, redact_text
from edgegw.asgi import Call
from edgegw.errors import GatewayError, Headers, fail
from edgegw.guardrails.apis import GuardedApi
from edgegw.guardrails.check import Guardrails, blocked

log = logging.getLogger("edgegw.guardrails")

# A stream is judged again once this many characters came since the last check...
STREAM_CHECK_MIN_CHARS = 256
# ...and its text grew by this fraction (1/n) of what was judged: a geometric schedule, so
# the checks of a long answer cost a few times its length, however long.
STREAM_CHECK_GROWTH = 4
# The policy reads at most the last this many characters of a streamed answer (one text
# piece, and all of them joined): a stream's memory and a check's cost are bounded.
MAX_STREAM_TEXT_CHARS = 1 << 20

# A text field of a multipart form: (name, value's start, value's end) in the body.
FormField = tuple[str, int, int]


def guard_request(
    guardrails: Guardrails | None, call: Call, api: GuardedApi, model: str | None
) -> RequestGuard | None:
    """The guardrails of this request (None when GUARDRAILS_ENABLED is off)."""
    if guardrails is None:
        return None
    return RequestGuard(guardrails, call, api, model or "")


class RequestGuard:
    """The guardrails bound to one request: its method, path, API, model and identity."""

    __slots__ = ("guardrails", "api", "method", "path", "model", "identity")

    def __init__(self, guardrails: Guardrails, call: Call, api: GuardedApi, model: str) -> None:
        self.guardrails = guardrails
        self.api = api
        self.method, self.path, self.identity = call.method, call.path, call.identity
        self.model = model

    async def pre_call(
        self, body: bytes, form: Sequence[FormField] | None = None
    ) -> tuple[bytes, Headers]:
        """The body to forward and the headers the decision adds; a block is raised.
        `form`: the body is a multipart form whose text fields these are."""
        shown: dict[str, Any] = (
            {}
            if form is None
            else {"shown": _form_text(body, form), "redact": lambda b: _form_redacted(b, form)}
        )
        return await self.guardrails.pre_call(
            method=self.method,
            path=self.path,
            body=body,
            model=self.model,
            identity=self.identity,
            api=self.api.name,
            **shown,
        )

    async def post_call(self, payload: bytes) -> tuple[bytes, Headers]:
        return await self.guardrails.post_call(
            method=self.method,
            path=self.path,
            payload=payload,
            model=self.model,
            identity=self.identity,
            api=self.api.name,
        )

    def stream(self) -> StreamGuard:
        return StreamGuard(self)

    async def tool(self, phase: str, tool: str, text: str) -> tuple[str | None, str]:
        return await self.guardrails.tool(phase, tool, text, self.identity)

    async def judge_streamed(self, text: str) -> GatewayError | None:
        """post_call on the text a stream carried so far: the error that ends it, or None."""
        verdict = await self.guardrails.decide(
            "post_call",
            method=self.method,
            path=self.path,
            body=text,
            model=self.model,
            identity=self.identity,
            api=self.api.name,
        )
        if verdict.action == "redact":
            log.info("guardrails: post_call on a stream of %s: redact ends it", self.api.name)
            return fail(
                "guardrails_blocked",
                "The rest of the response was withheld by guardrails: streamed text "
                "cannot be redacted.",
            )
        return blocked(verdict, "response")


class StreamGuard:
    """One stream's text, accumulated event by event, judged as the module says."""

    __slots__ = ("guard", "pieces", "size", "judged")

    def __init__(self, guard: RequestGuard) -> None:
        self.guard = guard
        # Each channel's text (a choice, a content block, an output item), in order.
        self.pieces: dict[object, list[str]] = {}
        self.size = 0  # characters accumulated
        self.judged = 0  # ...of which the last check read

    async def events(self, data: bytes) -> GatewayError | None:
        """Whole events about to be relayed: None to relay them, or the error that ends
        the stream instead."""
        closes = False
        tap = self.guard.api.text
        for event in SseSplitter().feed(data):
            found = () if event.is_done else tap(event.data)
            if not found:
                closes = True
            for channel, text in found:
                self.pieces.setdefault(channel, []).append(text)
                self.size += len(text)
        fresh = self.size - self.judged
        step = max(
            STREAM_CHECK_MIN_CHARS, min(self.judged, MAX_STREAM_TEXT_CHARS) // STREAM_CHECK_GROWTH
        )
        if fresh and (closes or fresh >= step):
            return await self._judge()
        return None

    async def end(self) -> GatewayError | None:
        """The upstream ended the stream: its last text judged, if not yet."""
        if self.size > self.judged:
            return await self._judge()
        return None

    async def _judge(self) -> GatewayError | None:
        self.judged = self.size
        texts = []
        for channel, parts in self.pieces.items():
            text = "".join(parts)[-MAX_STREAM_TEXT_CHARS:]
            self.pieces[channel] = [text]
            texts.append(text)
        return await self.guard.judge_streamed("\n".join(texts)[-MAX_STREAM_TEXT_CHARS:])


def _form_text(body: bytes, fields: Sequence[FormField]) -> str:
    """The text fields as a JSON object (a name sent twice: a list of its values)."""
    doc: dict[str, Any] = {}
    for name, start, end in fields:
        value = body[start:end].decode("utf-8", "replace")
        if name not in doc:
            doc[name] = value
        elif isinstance(doc[name], list):
            doc[name].append(value)
        else:
            doc[name] = [doc[name], value]
    return orjson.dumps(doc).decode()


def _form_redacted(body: bytes, fields: Sequence[FormField]) -> bytes:
    """The form with its text fields' secrets redacted; every other byte as sent."""
    out: list[bytes] = []
    pos = 0
    for _, start, end in sorted(fields, key=lambda f: f[1]):
        value = body[start:end].decode("utf-8", "replace")
        redacted = redact_text(value)
        if redacted != value:
            out += (body[pos:start], redacted.encode())
            pos = end
    out.append(body[pos:])
    return b"".join(out)
