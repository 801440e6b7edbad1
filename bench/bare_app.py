"""The ceiling of edgegw's server stack: a bare Hypercorn-Trio ASGI app that reads the
request and answers the mock's chat completion JSON itself, with no upstream.

    python -m bench.bare_app --port 9100
"""

from __future__ import annotations

import argparse

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

CANNED = (
    b'{"id":"chatcmpl-mock","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"Hello! This is a canned mock response."},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":14,"total_tokens":26}}'
)
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(CANNED))]


async def app(scope, receive, send) -> None:
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
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": CANNED})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    ns = parser.parse_args()
    config = Config()
    config.bind = [f"127.0.0.1:{ns.port}"]
    config.accesslog = None
    config.read_timeout = None
    trio.run(serve, app, config)


if __name__ == "__main__":
    main()
