"""A mock OpenAI-compatible upstream: raw Trio + h11, no network beyond loopback, no keys.

It backs `edgegw demo`, the benchmarks (so it is a bare h11 loop on edgegw/plainhttp.py,
keep-alive and TCP_NODELAY, not an ASGI server) and the tests (it records every request and
can be scripted to fail). bench/README.md, "The mock upstream", has its endpoints, how it
answers, its shaping (`token_rate`, `first_token_s`, `jitter`, `stamp`) and the scripted
failures chosen by the request's `model` (`mock-error-<status>`, `mock-break-after-<k>`,
`mock-hang`, `mock-slow-first-byte-<ms>`).

Run standalone: ``python -m edgegw.mock --port 9000 --token-rate 50 --tokens 16``.

Longer than the guide because it is a whole peer (routes, scripted failures, streams, its
server loop) that tests and benchmarks start as one thing.
"""

from __future__ import annotations

import argparse
import hmac
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import orjson
import trio

from edgegw import plainhttp
from edgegw.mock_structured import BadField, Structured, requested

# OpenAI rejects bodies well below this; anything larger is a client bug, and the cap bounds what
# one connection can make the mock hold in memory.
MAX_BODY_BYTES = 16 * 1024 * 1024
# Enough history for any test, bounded so a benchmark sending millions of requests stays small.
MAX_RECORDED = 1000
# OpenAI's own upper bound on `n`.
MAX_CHOICES = 128
# Distinctive, so a test can tell the upstream's header was relayed rather than invented.
RETRY_AFTER_S = 7
# `created` of the listed models: fixed, so /v1/models is byte-for-byte stable.
MODEL_CREATED = 1_700_000_000
MODELS = ("mock-small", "mock-large")
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
         "edge", "gateways", "stream", "tokens", "to", "clients")  # fmt: skip

# status -> (type, code) of the error envelope, after OpenAI's; other statuses fall back by class.
_ERROR_KINDS = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "overloaded"),
    504: ("server_error", "timeout"),
}
_JSON = (b"content-type", b"application/json")
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_DONE = b"data: [DONE]\n\n"
_HEALTH_BODY = orjson.dumps({"status": "ok"})


@dataclass(frozen=True)
class MockConfig:
    latency_s: float = 0.0  # delay before the response head (time to first byte)
    token_rate: float = 0.0  # generated tokens per second when streaming; 0 = as fast as possible
    tokens: int = 16  # completion tokens per choice (max_tokens / max_completion_tokens caps it)
    chunk_tokens: int = 1  # tokens per SSE chunk
    error_rate: float = 0.0  # share of completions answered with error_status, deterministic
    error_status: int = 500
    api_key: str | None = None  # when set, require `Authorization: Bearer <key>` on /v1/
    first_token_s: float = 0.0  # streams: after the head, before the first content chunk
    jitter: float = 0.0  # streams: each later content sleep times uniform [1 - J, 1 + J]
    stamp: bool = False  # streams: "x_sent_ns" (perf_counter_ns at the write) in every event
    models: tuple[str, ...] = MODELS  # what GET /v1/models lists

    def __post_init__(self) -> None:
        if not self.latency_s >= 0:
            raise ValueError("latency_s must be >= 0")
        if not self.token_rate >= 0:
            raise ValueError("token_rate must be >= 0")
        if self.tokens < 0:
            raise ValueError("tokens must be >= 0")
        if self.chunk_tokens < 1:
            raise ValueError("chunk_tokens must be >= 1")
        if not 0 <= self.error_rate <= 1:
            raise ValueError("error_rate must be within [0, 1]")
        if not 400 <= self.error_status <= 599:
            raise ValueError("error_status must be within 400..599")
        if not self.first_token_s >= 0:
            raise ValueError("first_token_s must be >= 0")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be within [0, 1]")

    @property
    def nominal_ttft_s(self) -> float:
        """When the first content chunk of a stream is due, from the request's arrival."""
        step = self.chunk_tokens / self.token_rate if self.token_rate else 0.0
        return self.latency_s + self.first_token_s + step

    @property
    def nominal_stream_s(self) -> float:
        """How long a stream of `tokens` tokens lasts, head to [DONE] (jitter averages out)."""
        rest = self.tokens / self.token_rate if self.token_rate else 0.0
        return self.latency_s + self.first_token_s + rest


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # including the query string
    headers: dict[str, str]  # lower-cased names, last value wins
    body: bytes


@dataclass(frozen=True, slots=True)
class _Sse:
    """One stream, fully decided before its head is sent."""

    chat: bool
    head: dict[str, Any]  # id, object, created, model: shared by every chunk
    n: int
    tokens: int
    finish_reason: str
    usage: dict[str, int] | None  # set when the client asked for include_usage
    chunk_tokens: int
    token_rate: float
    break_after: int | None  # mock-break-after-<k>
    first_token_s: float = 0.0
    jitter: float = 0.0
    seed: int = 0
    stamp: bool = False
    structured: Structured | None = None


@dataclass(frozen=True, slots=True)
class _Reply:
    """What to answer one request with, decided before anything is sent."""

    status: int
    body: bytes = b""  # the JSON body, unless sse is set
    headers: tuple[tuple[bytes, bytes], ...] = ()
    delay_s: float = 0.0  # before the head
    hang: bool = False
    sse: _Sse | None = None


class MockUpstream:
    """State shared by the server and the tests that drive it."""

    def __init__(self, config: MockConfig = MockConfig()) -> None:  # noqa: B008 (frozen)
        self.config = config  # tests may replace it between requests
        self.requests: list[RecordedRequest] = []
        self.stream_disconnects = 0
        self._server = plainhttp.Server(
            "mock upstream",
            self._answer,
            limits=plainhttp.Limits(max_body_bytes=MAX_BODY_BYTES),
            render_error=_render_error,
        )
        self._served = 0  # ids of completions
        self._error_debt = 0.0  # the error_rate accumulator
        self._routes: dict[tuple[str, str], Callable[[dict[str, str], bytes], _Reply]] = {
            ("POST", "/v1/chat/completions"): partial(self._answer_completion, True),
            ("POST", "/v1/completions"): partial(self._answer_completion, False),
            ("GET", "/v1/models"): lambda _h, _b: _Reply(200, _models_body(self.config.models)),
            ("GET", "/health"): lambda _h, _b: _Reply(200, _HEALTH_BODY),
        }
        self._paths = {path for _, path in self._routes}

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen and serve forever; task_status.started(port) once listening.

        Give an IP address: with port 0, a name resolving to several addresses would get one
        port per address, and only the first is reported.
        """
        await self._server.serve_tcp(host, port, task_status=task_status)

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def open_connections(self) -> int:
        return self._server.open_connections

    async def _answer(self, request: plainhttp.Request, out: plainhttp.Responder) -> None:
        self._record(
            RecordedRequest(request.method, request.target, request.headers, request.body or b"")
        )
        if request.body is None:
            await _send(out, _error(413, "body too large"))
            return
        reply = self._route(request.method, request.path, request.headers, request.body)
        if not reply.delay_s and not reply.hang and reply.sse is None:
            await _send(out, reply)
            return
        # It waits or streams: the client may go away meanwhile.
        complete = await out.watch_client(partial(_send_reply, out, reply))
        if complete is None and reply.sse is not None:
            self.stream_disconnects += 1

    def _record(self, request: RecordedRequest) -> None:
        if len(self.requests) >= MAX_RECORDED:
            del self.requests[: len(self.requests) - MAX_RECORDED + 1]
        self.requests.append(request)

    def _route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> _Reply:
        answer = self._routes.get((method, path))
        if answer is None:
            if path in self._paths:
                return _error(405, f"{method} is not allowed on {path}")
            return _error(404, f"unknown path {path}")
        key = self.config.api_key
        if key is not None and path.startswith("/v1/"):
            given = headers.get("authorization", "").encode("latin-1")
            if not hmac.compare_digest(given, b"Bearer " + key.encode("latin-1")):
                return _error(401, "missing or wrong API key")
        return answer(headers, body)

    def _answer_completion(self, chat: bool, headers: dict[str, str], body: bytes) -> _Reply:
        config = self.config  # one snapshot per request: tests replace it between requests
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _error(400, "request body is not valid JSON", code="invalid_json")
        if not isinstance(payload, dict):
            return _error(400, "request body must be a JSON object", code="invalid_json")
        model = payload.get("model", MODELS[0])
        if not isinstance(model, str):
            return _error(400, "model must be a string", param="model")
        n = payload.get("n", 1)
        if n is None:
            n = 1
        if not _is_int(n) or not 1 <= n <= MAX_CHOICES:
            return _error(400, f"n must be an integer in 1..{MAX_CHOICES}", param="n")
        cap_name = "max_completion_tokens" if "max_completion_tokens" in payload else "max_tokens"
        cap = payload.get(cap_name)
        if cap is not None and (not _is_int(cap) or cap < 0):
            return _error(400, f"{cap_name} must be a non-negative integer", param=cap_name)
        stream = payload.get("stream") is True
        words = partial(_text, 0, config.tokens, 0)  # the json_object answer's, if asked
        try:
            structured = requested(payload, words) if chat else None
        except BadField as e:
            return _error(400, str(e), param=e.param)

        delay_s, hang, break_after = config.latency_s, False, None
        script = _parse_script(model)
        if script is not None:
            kind, arg = script
            if kind == "error":
                if not 400 <= arg <= 599:
                    return _error(400, "mock-error-<status> wants 400..599", param="model")
                return _error(arg, f"scripted failure ({model})")
            if kind == "invalid":
                return _error(400, f"malformed mock script {model!r}", param="model")
            hang = kind == "hang"
            if kind == "slow":
                delay_s = arg / 1000
            if kind == "break" and stream:
                break_after = arg
        elif config.error_rate:
            self._error_debt += config.error_rate
            if self._error_debt >= 1 - 1e-9:  # the epsilon absorbs float drift (10 x 0.1 < 1)
                self._error_debt -= 1
                failed = _error(config.error_status, "injected failure (error_rate)")
                return _Reply(failed.status, failed.body, failed.headers, delay_s=delay_s)

        whole = config.tokens if structured is None else structured.tokens
        tokens = whole if cap is None else min(whole, cap)
        finish_reason = "length" if tokens < whole else "stop"
        if structured is not None and structured.tool is not None and tokens == whole:
            finish_reason = "tool_calls"
        prompt_tokens = _count_prompt_words(payload, chat)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": tokens * n,
            "total_tokens": prompt_tokens + tokens * n,
        }
        self._served += 1
        head = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-mock{self._served}",
            "object": ("chat.completion.chunk" if stream else "chat.completion")
            if chat
            else "text_completion",
            "created": int(time.time()),
            "model": model,
        }
        if structured is not None and structured.tool is not None:
            structured = replace(structured, call_id=f"call_mock{self._served}")
        if stream:
            options = payload.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            sse = _Sse(
                chat,
                head,
                n,
                tokens,
                finish_reason,
                usage if include_usage else None,
                config.chunk_tokens,
                config.token_rate,
                break_after,
                config.first_token_s,
                config.jitter,
                self._served,
                config.stamp,
                structured,
            )
            return _Reply(200, delay_s=delay_s, hang=hang, sse=sse)
        choices = [
            {
                "index": j,
                "message": {"role": "assistant", "content": _text(0, tokens, j), "refusal": None}
                if structured is None
                else structured.message(tokens, j),
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            if chat
            else {
                "text": _text(0, tokens, j),
                "index": j,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            for j in range(n)
        ]
        body_out = orjson.dumps({**head, "choices": choices, "usage": usage})
        return _Reply(200, body_out, delay_s=delay_s, hang=hang)


async def _send_reply(out: plainhttp.Responder, reply: _Reply) -> bool:
    """Wait, then send; return False when a script broke the stream on purpose."""
    if reply.delay_s:
        await trio.sleep(reply.delay_s)
    if reply.hang:
        await trio.sleep_forever()
    sse = reply.sse
    if sse is None:
        await _send(out, reply)
        return True
    await out.start(200, _SSE_HEADERS)
    # Paced against absolute times, so timer rounding does not add up over a stream.
    due = trio.current_time()
    for delay_s, event in _sse_events(sse):
        if delay_s:
            due += delay_s
            await trio.sleep_until(due)
        if sse.stamp and event.startswith(b"data: {"):
            event = b'data: {"x_sent_ns":%d,%b' % (time.perf_counter_ns(), event[7:])
        await out.send_data(event)
    if sse.break_after is not None:
        return False
    await out.end()
    return True


def _sse_events(sse: _Sse) -> Iterator[tuple[float, bytes]]:
    """(sleep first, `data: ...` event) pairs of one stream, in order."""
    tail = {"usage": None} if sse.usage is not None else {}

    def event(choices: list[dict[str, Any]]) -> bytes:
        return b"data: " + orjson.dumps({**sse.head, "choices": choices, **tail}) + b"\n\n"

    structured = sse.structured
    if sse.chat:
        for j in range(sse.n):
            delta = (
                {"role": "assistant", "content": ""}
                if structured is None
                else structured.first_delta(j)
            )
            yield (
                0.0,
                event([{"index": j, "delta": delta, "logprobs": None, "finish_reason": None}]),
            )
    rng = random.Random(sse.seed) if sse.jitter else None
    for step, start in enumerate(range(0, sse.tokens, sse.chunk_tokens)):
        if step == sse.break_after:
            return
        stop = min(start + sse.chunk_tokens, sse.tokens)
        delay_s = (stop - start) / sse.token_rate if sse.token_rate else 0.0
        if step == 0:
            delay_s += sse.first_token_s
        elif rng is not None:
            delay_s *= 1 + sse.jitter * rng.uniform(-1.0, 1.0)
        for j in range(sse.n):
            text = _text(start, stop, j) if structured is None else structured.piece(start, stop)
            delta = {"content": text} if structured is None else structured.delta(text)
            choice: dict[str, Any] = (
                {"index": j, "delta": delta, "logprobs": None, "finish_reason": None}
                if sse.chat
                else {"text": text, "index": j, "logprobs": None, "finish_reason": None}
            )
            yield (delay_s if j == 0 else 0.0), event([choice])
    if sse.break_after is not None:
        return
    for j in range(sse.n):
        choice = (
            {"index": j, "delta": {}, "logprobs": None, "finish_reason": sse.finish_reason}
            if sse.chat
            else {"text": "", "index": j, "logprobs": None, "finish_reason": sse.finish_reason}
        )
        yield 0.0, event([choice])
    if sse.usage is not None:
        yield (
            0.0,
            b"data: " + orjson.dumps({**sse.head, "choices": [], "usage": sse.usage}) + b"\n\n",
        )
    yield 0.0, _DONE


def _models_body(models: tuple[str, ...]) -> bytes:
    data = [
        {"id": m, "object": "model", "created": MODEL_CREATED, "owned_by": "edgegw-mock"}
        for m in models
    ]
    return orjson.dumps({"object": "list", "data": data})


async def _send(out: plainhttp.Responder, reply: _Reply) -> None:
    """A whole JSON reply."""
    await out.send(reply.status, [_JSON, *reply.headers], reply.body)


def _render_error(status: int) -> tuple[plainhttp.Headers, bytes]:
    """The answer to a malformed request (its status) or to a bug in the mock (500)."""
    reply = _error(
        status, "internal error in the mock" if status == 500 else "malformed HTTP request"
    )
    return [_JSON, *reply.headers], reply.body


def _error(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> _Reply:
    kind, default_code = _ERROR_KINDS.get(
        status,
        ("server_error", "mock_error")
        if status >= 500
        else ("invalid_request_error", "mock_error"),
    )
    body = orjson.dumps(
        {
            "error": {
                "message": f"mock upstream: {message}",
                "type": kind,
                "param": param,
                "code": code or default_code,
            }
        }
    )
    headers = ((b"retry-after", b"%d" % RETRY_AFTER_S),) if status == 429 else ()
    return _Reply(status, body, headers)


def _parse_script(model: str) -> tuple[str, int] | None:
    """("error"|"break"|"slow"|"hang"|"invalid", number) for a scripted model, else None."""
    if model == "mock-hang":
        return "hang", 0
    for prefix, kind in (
        ("mock-error-", "error"),
        ("mock-break-after-", "break"),
        ("mock-slow-first-byte-", "slow"),
    ):
        if model.startswith(prefix):
            suffix = model[len(prefix) :]
            if suffix.isascii() and suffix.isdigit():
                return kind, int(suffix)
            return "invalid", 0
    return None


def _text(start: int, stop: int, choice: int) -> str:
    """Tokens start..stop of a choice; concatenating consecutive ranges gives the whole text."""
    text = " ".join(WORDS[(i + choice) % len(WORDS)] for i in range(start, stop))
    return " " + text if start and text else text


def _count_prompt_words(payload: dict[str, Any], chat: bool) -> int:
    """A rough prompt token count: whitespace-separated words (token ids count one each)."""
    words = 0
    if chat:
        messages = payload.get("messages")
        for message in messages if isinstance(messages, list) else ():
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                words += len(content.split())
            elif isinstance(content, list):
                for part in content:
                    text = part.get("text") if isinstance(part, dict) else None
                    words += len(text.split()) if isinstance(text, str) else 0
        return words
    prompt = payload.get("prompt")
    for item in [prompt] if isinstance(prompt, str) else prompt if isinstance(prompt, list) else ():
        if isinstance(item, str):
            words += len(item.split())
        elif isinstance(item, list):
            words += len(item)
        elif _is_int(item):
            words += 1
    return words


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


async def run_mock(host: str, port: int, config: MockConfig) -> None:
    """Serve a mock upstream forever; print nothing."""
    await MockUpstream(config).serve(host, port)


async def _serve_announced(host: str, port: int, config: MockConfig) -> None:
    """run_mock, plus one line on stdout once listening (for scripts waiting on it)."""
    mock = MockUpstream(config)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(mock.serve, host, port)
        shown = f"[{host}]" if ":" in host else host
        print(f"mock upstream listening on http://{shown}:{port}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m edgegw.mock", description="A mock OpenAI-compatible upstream."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before each head")
    parser.add_argument("--token-rate", type=float, default=0.0, help="tokens/s; 0 = unpaced")
    parser.add_argument("--tokens", type=int, default=16, help="completion tokens per choice")
    parser.add_argument("--chunk-tokens", type=int, default=1, help="tokens per SSE chunk")
    parser.add_argument("--error-rate", type=float, default=0.0, help="share answered in error")
    parser.add_argument("--error-status", type=int, default=500)
    parser.add_argument("--api-key", default=None, help="require this bearer key on /v1/")
    parser.add_argument("--first-token-ms", type=float, default=0.0, help="wait before token 1")
    parser.add_argument("--jitter", type=float, default=0.0, help="token gap spread, 0..1")
    parser.add_argument("--stamp", action="store_true", help='"x_sent_ns" in every event')
    ns = parser.parse_args(argv)
    try:
        config = MockConfig(
            latency_s=ns.latency_ms / 1000,
            token_rate=ns.token_rate,
            tokens=ns.tokens,
            chunk_tokens=ns.chunk_tokens,
            error_rate=ns.error_rate,
            error_status=ns.error_status,
            api_key=ns.api_key,
            first_token_s=ns.first_token_ms / 1000,
            jitter=ns.jitter,
            stamp=ns.stamp,
        )
    except ValueError as exc:
        parser.error(str(exc))
    try:
        trio.run(_serve_announced, ns.host, ns.port, config)
    except* KeyboardInterrupt:  # Ctrl-C is how a standalone mock stops; it may come in a group
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
