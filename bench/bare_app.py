"""The ceiling of edgegw's server stack: a bare ASGI app on edgegw's own HTTP/1.1 layer
(edgegw.http1, what `edgegw serve` runs) that reads the request and answers the mock's chat
completion itself, with no upstream. A request with ``"stream":true`` gets a canned SSE stream
shaped like the mock's (a role chunk, ``--tokens`` content chunks, a finish chunk,
``data: [DONE]``), one ASGI body message per event, unpaced.

With ``--upstream URL`` (the paced mock) a streaming request is passed through instead: its
body is POSTed to ``URL``/chat/completions with edgegw's upstream pool and every piece of the
answer is sent on as one ASGI body message, untouched (no parsing, no tap, no limits): the
ceiling of a relay on this server stack.

    python -m bench.bare_app --port 9100 [--tokens 16] [--upstream http://127.0.0.1:9000/v1]
"""

from __future__ import annotations

import argparse
from typing import Any

import trio

from edgegw.http1.limits import ConnectionLimits
from edgegw.http1.server import open_listener, serve_http1
from edgegw.upstream import Origin, UpstreamPool

CANNED = (
    b'{"id":"chatcmpl-mock","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"Hello! This is a canned mock response."},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":14,"total_tokens":26}}'
)
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(CANNED))]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_CHUNK = (
    b'data: {"id":"chatcmpl-mock","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"gpt-4o-mini","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}\n\n'
)
WORDS = (b"the", b"quick", b"brown", b"fox", b"jumps", b"over", b"a", b"lazy", b"dog", b"while")


def sse_events(tokens: int) -> list[bytes]:
    events = [_CHUNK % (b'{"role":"assistant","content":""}', b"null")]
    for i in range(tokens):
        word = WORDS[i % len(WORDS)] if i == 0 else b" " + WORDS[i % len(WORDS)]
        events.append(_CHUNK % (b'{"content":"%s"}' % word, b"null"))
    events.append(_CHUNK % (b"{}", b'"stop"'))
    events.append(b"data: [DONE]\n\n")
    return events


def make_app(tokens: int, upstream: str | None = None) -> Any:
    events = sse_events(tokens)
    origin = Origin.from_url(upstream) if upstream else None
    pool = UpstreamPool(idle_per_host=4096)
    target = (origin.base_path + "/chat/completions").encode() if origin else b""
    up_headers = [(b"content-type", b"application/json"), (b"accept", b"text/event-stream")]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while True:
                    message = await receive()
                    if message["type"] == "lifespan.startup":
                        await send({"type": "lifespan.startup.complete"})
                    else:
                        await send({"type": "lifespan.shutdown.complete"})
                        return
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if b'"stream":true' not in body:
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            await send({"type": "http.response.body", "body": CANNED})
            return
        if origin is not None:
            resp = await pool.send(origin, b"POST", target, up_headers, body)
            try:
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                while chunk := await resp.receive_chunk():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            finally:
                await resp.aclose()
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=16, help="content chunks per SSE stream")
    parser.add_argument("--upstream", help="pass streams through to this base URL (.../v1)")
    ns = parser.parse_args()
    app = make_app(ns.tokens, ns.upstream)
    trio.run(serve_http1, app, open_listener(f"127.0.0.1:{ns.port}"), ConnectionLimits())


if __name__ == "__main__":
    main()
