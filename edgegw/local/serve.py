"""Serving a local model: the SIE request contract on top of an SGLang worker.

Pipeline, after the Rust core has validated the body against the SIE allow-list:
  1. `X-SIE-Remote` (only one field, exactly `forbid`), `X-SIE-Pool`,
     `X-SIE-MACHINE-PROFILE`, `X-SIE-SDK-Version`;
  2. the profile's rules: LoRA adapter names, the output cap (default
     SIE_GATEWAY_DEFAULT_MAX_TOKENS, at most the profile's max_output_tokens), min_tokens,
     image inputs (base64 `data:` URIs only, and only for `inputs.image` profiles),
     logit_bias token ids below the vocabulary size, the context window (with a tokenizer);
  3. the body for SGLang's OpenAI-compatible endpoint: `lora_adapter` → `lora_path`,
     `chat_template_kwargs` merged with the profile's (the profile wins on a conflict),
     the profile's default sampling under the request's, `developer` → `system`, regex and
     grammar formats → SGLang's `regex` / `ebnf`, `best_of` → `n` candidates with logprobs,
     a request id (`rid`) so a disconnect can abort the generation;
  4. a worker: healthy, in the pool, affinity by rendezvous hashing or least loaded; a
     failure before the first byte is retried on another worker, never after;
  5. the answer in the SIE shapes: ids `chatcmpl-<rid>`, `delta.role` once per choice,
     one closing chunk per choice with its finish_reason, the usage chunk when asked, one
     `[DONE]`; best_of ranked by cumulative logprob; a missing usage fails closed;
  6. with no local worker able to serve, the profile's `remote_fallback` (unless
     `X-SIE-Remote: forbid`), said in `X-SIE-Served-By` and `X-SIE-Fallback-Reason`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any

import orjson
import trio

from edgegw._core import ParsedRequest, SseSplitter
from edgegw.asgi import Receive, Send, respond_json
from edgegw.errors import GatewayError, envelope
from edgegw.local.fleet import LocalRuntime, WorkerState
from edgegw.upstream import Response

if TYPE_CHECKING:
    from edgegw.app import App

log = logging.getLogger("edgegw.local")

# Fields of the SIE contract that SGLang does not take: refused for local targets.
LOCAL_UNSUPPORTED = ("reasoning_effort", "reasoning_format")
MAX_IMAGES = 16
ABORT_TIMEOUT_S = 1.5
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})
PASS_FINISH = frozenset({"length", "tool_calls", "content_filter", "function_call"})
SDK_MIN_VERSION = (0, 1)
SDK_LOG_LIMIT = 1024


class WorkerFailure(Exception):
    """A worker failed after the response began; the stream ends with an error event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _header_values(scope: dict[str, Any], name: bytes) -> list[bytes]:
    return [v for k, v in scope["headers"] if k == name]


def remote_forbidden(scope: dict[str, Any]) -> bool:
    """`X-SIE-Remote`: absent, or exactly one field whose value is exactly `forbid`."""
    values = _header_values(scope, b"x-sie-remote")
    if not values:
        return False
    if len(values) != 1 or values[0] != b"forbid":
        # The offending value is never echoed.
        raise GatewayError(
            400,
            "INVALID_INPUT",
            "X-SIE-Remote accepts only one value: 'forbid'",
            param="X-SIE-Remote",
        )
    return True


def _one_header(scope: dict[str, Any], name: bytes, label: str) -> str | None:
    values = _header_values(scope, name)
    if not values:
        return None
    if len(values) > 1:
        raise GatewayError(400, "invalid_request", f"{label} may be sent once", param=label)
    try:
        text = values[0].decode("ascii").strip()
    except UnicodeDecodeError:
        raise GatewayError(400, "invalid_request", f"invalid {label}", param=label) from None
    return text or None


class SdkVersionLog:
    """Logs each too-old X-SIE-SDK-Version once; remembers at most SDK_LOG_LIMIT versions."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def note(self, version: str | None) -> None:
        if version is None or version in self.seen or len(self.seen) >= SDK_LOG_LIMIT:
            return
        parts = version.split(".")[:2]
        try:
            numbers = tuple(int(p) for p in parts)
        except ValueError:
            return
        if numbers < SDK_MIN_VERSION:
            self.seen.add(version)
            log.warning("client SDK version %s is older than the supported range", version[:32])


def _check_images(doc: dict[str, Any], rt: LocalRuntime) -> list[str]:
    images = []
    for i, message in enumerate(doc.get("messages") or ()):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if part.get("type") not in ("image_url", "input_image"):
                continue
            if not rt.profile.image_inputs:
                raise GatewayError(
                    400,
                    "unsupported_field",
                    f"model '{rt.profile.name}' does not take image inputs",
                    param="messages",
                )
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if (
                not isinstance(url, str)
                or not url.startswith("data:image/")
                or ";base64," not in url[:64]
            ):
                raise GatewayError(
                    400,
                    "invalid_request",
                    "only base64 data:image/... URIs are accepted; remote image URLs are not fetched",
                    param=f"messages[{i}].content[{j}].image_url",
                )
            images.append(url)
    if len(images) > MAX_IMAGES:
        raise GatewayError(
            400, "invalid_request", f"at most {MAX_IMAGES} images per request", param="messages"
        )
    return images


def _output_cap(
    app: App, req: ParsedRequest, rt: LocalRuntime, doc: dict[str, Any], chat: bool
) -> int:
    cap = rt.profile.max_output_tokens
    if req.max_tokens is not None:
        if cap is not None and req.max_tokens > cap:
            raise GatewayError(
                400,
                "invalid_request",
                f"the output cap is above this model's max_output_tokens ({cap})",
                param="max_completion_tokens" if chat else "max_tokens",
            )
        effective = req.max_tokens
    else:
        effective = app.settings.default_max_tokens if chat else 16
        if cap is not None:
            effective = min(effective, cap)
    min_tokens = doc.get("min_tokens")
    if isinstance(min_tokens, int) and min_tokens > effective:
        raise GatewayError(
            400, "invalid_request", "'min_tokens' is above the output cap", param="min_tokens"
        )
    return effective


def _check_logit_bias(doc: dict[str, Any], rt: LocalRuntime) -> None:
    vocab = rt.vocab_size or _tokenizer_vocab(rt)
    bias = doc.get("logit_bias")
    if not vocab or not isinstance(bias, dict):
        return
    for key in bias:
        if int(key) >= vocab:
            raise GatewayError(
                400,
                "invalid_request",
                f"'logit_bias' token ids must be below the vocabulary size ({vocab})",
                param="logit_bias",
            )


def _tokenizer_vocab(rt: LocalRuntime) -> int | None:
    tok = rt.tokenizer
    return tok.get_vocab_size() if tok is not None else None


def _check_context(doc: dict[str, Any], rt: LocalRuntime, cap: int, chat: bool) -> None:
    window = rt.context_window
    tok = rt.tokenizer
    if not window or tok is None:
        return
    if chat:
        texts = []
        for message in doc.get("messages") or ():
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts += [p.get("text", "") for p in content if isinstance(p.get("text"), str)]
        # Content tokens plus a few per message for the chat template's role markers: a
        # lower bound of what the worker will see, so nothing that fits is refused.
        prompt_tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
        prompt_tokens += 3 * len(doc.get("messages") or ())
    else:
        prompt = doc.get("prompt")
        text = prompt if isinstance(prompt, str) else prompt[0]
        prompt_tokens = len(tok.encode(text, add_special_tokens=False).ids)
    if prompt_tokens + cap > window:
        raise GatewayError(
            400,
            "context_length_exceeded",
            f"the prompt ({prompt_tokens} tokens) and the output cap ({cap}) exceed the context window ({window})",
            param="messages" if chat else "prompt",
        )


def sglang_chat_body(
    doc: dict[str, Any], rt: LocalRuntime, cap: int, rid: str, stream: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for key, value in doc.items():
        if value is None or key in (
            "user",
            "safety_identifier",
            "prompt_cache_key",
            "routing_key",
            "best_of",
            "max_tokens",
            "stream_options",
            "lora_adapter",
            "response_format",
        ):
            continue
        body[key] = value
    body["model"] = rt.profile.name
    body["messages"] = [
        ({**m, "role": "system"} if m.get("role") == "developer" else m) for m in doc["messages"]
    ]
    body["max_completion_tokens"] = cap
    if (lora := doc.get("lora_adapter")) is not None:
        body["lora_path"] = lora
    profile_kwargs = dict(rt.profile.chat_template_kwargs)
    if profile_kwargs or doc.get("chat_template_kwargs"):
        body["chat_template_kwargs"] = {**(doc.get("chat_template_kwargs") or {}), **profile_kwargs}
    for key, value in rt.profile.default_sampling.items():
        body.setdefault(key, value)
    rf = doc.get("response_format")
    if isinstance(rf, dict):
        kind = rf.get("type")
        if kind == "regex":
            body["regex"] = rf["regex"]
        elif kind == "grammar":
            body["ebnf"] = rf["grammar"]
        elif kind in ("json_object", "json_schema"):
            body["response_format"] = rf
    best_of = doc.get("best_of")
    if isinstance(best_of, int) and best_of > 1:
        body["n"] = best_of
        body["logprobs"] = True
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    body["rid"] = rid
    return body


def sglang_completions_body(
    doc: dict[str, Any], rt: LocalRuntime, cap: int, rid: str, stream: bool
) -> dict[str, Any]:
    body = {k: v for k, v in doc.items() if v is not None}
    body["model"] = rt.profile.name
    body["max_tokens"] = cap
    if isinstance(body.get("prompt"), list):
        body["prompt"] = body["prompt"][0]
    for key, value in rt.profile.default_sampling.items():
        body.setdefault(key, value)
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    body["rid"] = rid
    return body


def _finish(reason: object, made_tool_call: bool) -> str:
    if reason == "abort" or (isinstance(reason, dict) and reason.get("type") == "abort"):
        raise WorkerFailure("inference_error", "the worker aborted the generation")
    if reason == "length" and made_tool_call:
        return "tool_calls"
    return reason if reason in PASS_FINISH else "stop"


def _worker_error(status: int, payload: bytes) -> GatewayError:
    """SGLang's error answers (native `{"error":{"message"}}` or flat OpenAI-style) in the envelope."""
    message = f"the worker answered with status {status}"
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            message = err["message"]
        elif isinstance(doc.get("detail"), str):
            message = doc["detail"]
    if status == 400:
        return GatewayError(400, "invalid_request", message[:2000])
    if status == 404:
        return GatewayError(404, "model_not_found", message[:2000], type="model_not_found")
    return GatewayError(502, "inference_error", message[:2000], type="server_error")


class ChatStream:
    """SGLang's OpenAI stream chunks → the SIE chunk sequence."""

    def __init__(
        self, rid: str, model: str, n: int, include_usage: bool, logprobs: bool, completions: bool
    ) -> None:
        self.id = ("cmpl-" if completions else "chatcmpl-") + rid
        self.object = "text_completion" if completions else "chat.completion.chunk"
        self.model = model
        self.created = int(time.time())
        self.n = n
        self.include_usage = include_usage
        self.logprobs = logprobs
        self.completions = completions
        self.started: set[int] = set()
        self.finished: set[int] = set()
        self.tool_call: set[int] = set()
        self.usage: dict[str, Any] | None = None

    def _event(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        doc: dict[str, Any] = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            doc["usage"] = usage
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    def feed(self, data: bytes) -> list[bytes]:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise WorkerFailure(
                "malformed_worker_response", "the worker sent a malformed chunk"
            ) from None
        if not isinstance(doc, dict):
            raise WorkerFailure("malformed_worker_response", "the worker sent a malformed chunk")
        if "error" in doc:
            raise WorkerFailure("inference_error", "the worker reported an error mid-stream")
        if isinstance(doc.get("usage"), dict):
            self.usage = doc["usage"]
        out = []
        for ch in doc.get("choices") or ():
            i = ch.get("index", 0)
            if not isinstance(i, int) or not 0 <= i < self.n or i in self.finished:
                raise WorkerFailure(
                    "malformed_worker_response",
                    "the worker sent a chunk for an unknown or finished choice",
                )
            if self.completions:
                text = ch.get("text") or ""
                if text:
                    out.append(self._event([{"index": i, "text": text, "finish_reason": None}]))
            else:
                if i not in self.started:
                    self.started.add(i)
                    out.append(
                        self._event(
                            [
                                {
                                    "index": i,
                                    "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None,
                                    "finish_reason": None,
                                }
                            ]
                        )
                    )
                delta_in = ch.get("delta") or {}
                delta: dict[str, Any] = {}
                if delta_in.get("content"):
                    delta["content"] = delta_in["content"]
                if delta_in.get("tool_calls"):
                    delta["tool_calls"] = delta_in["tool_calls"]
                    self.tool_call.add(i)
                lp = ch.get("logprobs") if self.logprobs else None
                if delta or lp:
                    out.append(
                        self._event(
                            [{"index": i, "delta": delta, "logprobs": lp, "finish_reason": None}]
                        )
                    )
            reason = ch.get("finish_reason")
            if reason:
                self.finished.add(i)
                mapped = _finish(reason, i in self.tool_call)
                if self.completions:
                    out.append(self._event([{"index": i, "text": "", "finish_reason": mapped}]))
                else:
                    out.append(
                        self._event(
                            [{"index": i, "delta": {}, "logprobs": None, "finish_reason": mapped}]
                        )
                    )
        return out

    def close(self) -> list[bytes]:
        if len(self.finished) < self.n:
            raise WorkerFailure(
                "malformed_worker_response", "the stream ended before every choice finished"
            )
        if self.usage is None:
            raise WorkerFailure("malformed_worker_response", "the worker sent no usage")
        out = [self._event([], self.usage)] if self.include_usage else []
        out.append(b"data: [DONE]\n\n")
        return out


def normalize_answer(
    doc: object,
    rid: str,
    model: str,
    n: int,
    best_of: int | None,
    logprobs: bool,
    completions: bool,
) -> dict[str, Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("choices"), list):
        raise GatewayError(
            502,
            "malformed_worker_response",
            "the worker sent a malformed answer",
            type="server_error",
        )
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        raise GatewayError(
            500, "malformed_worker_response", "the worker sent no usage", type="server_error"
        )
    choices = [c for c in doc["choices"] if isinstance(c, dict)]
    if best_of and best_of > 1:
        choices.sort(key=_cumulative_logprob, reverse=True)
        choices = choices[:n]
    out = []
    for i, ch in enumerate(choices):
        made_call = bool((ch.get("message") or {}).get("tool_calls"))
        try:
            reason = _finish(ch.get("finish_reason"), made_call)
        except WorkerFailure as e:
            raise GatewayError(502, e.code, str(e), type="server_error") from None
        item: dict[str, Any] = {
            "index": i,
            "finish_reason": reason,
            "logprobs": ch.get("logprobs") if logprobs else None,
        }
        if completions:
            item["text"] = ch.get("text") or ""
            item.pop("logprobs")
        else:
            message = ch.get("message") or {}
            item["message"] = {
                "role": "assistant",
                "content": None
                if made_call and not message.get("content")
                else message.get("content"),
            }
            if made_call:
                item["message"]["tool_calls"] = message["tool_calls"]
        out.append(item)
    return {
        "id": ("cmpl-" if completions else "chatcmpl-") + rid,
        "object": "text_completion" if completions else "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": out,
        "usage": usage,
    }


def _cumulative_logprob(choice: dict[str, Any]) -> float:
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        return -math.inf
    return sum(t.get("logprob", -math.inf) for t in content if isinstance(t, dict))


async def serve(
    app: App,
    scope: dict[str, Any],
    receive: Receive,
    send: Send,
    req: ParsedRequest,
    rt: LocalRuntime,
    *,
    chat: bool,
) -> None:
    forbid = remote_forbidden(scope)
    pool_name = _one_header(scope, b"x-sie-pool", "X-SIE-Pool")
    machine = _one_header(scope, b"x-sie-machine-profile", "X-SIE-MACHINE-PROFILE")
    app.sdk_versions.note(_one_header(scope, b"x-sie-sdk-version", "X-SIE-SDK-Version"))
    for name in LOCAL_UNSUPPORTED:
        if name in req.fields:
            raise GatewayError(
                400, "unsupported_field", f"'{name}' is not supported by this endpoint", param=name
            )
    doc = orjson.loads(req.body)
    if (lora := doc.get("lora_adapter")) is not None and lora not in rt.profile.lora_adapters:
        raise GatewayError(
            400, "unknown_lora_adapter", "unknown LoRA adapter for this model", param="lora_adapter"
        )
    cap = _output_cap(app, req, rt, doc, chat)
    if chat:
        _check_images(doc, rt)
    _check_logit_bias(doc, rt)
    _check_context(doc, rt, cap, chat)

    candidates = app.fleet.candidates(rt, pool_name, machine)
    if (pool_name or machine) and not candidates:
        if machine:
            raise GatewayError(
                503,
                "transport_failure",
                f"machine profile is not configured for model '{rt.profile.name}'",
                param="X-SIE-MACHINE-PROFILE",
                headers=((b"retry-after", b"5"),),
            )
        raise GatewayError(
            400, "invalid_request", "no such pool for this model", param="X-SIE-Pool"
        )
    rid = os.urandom(12).hex()
    stream = req.stream
    body = orjson.dumps(
        sglang_chat_body(doc, rt, cap, rid, stream)
        if chat
        else sglang_completions_body(doc, rt, cap, rid, stream)
    )
    key = doc.get("routing_key") or doc.get("prompt_cache_key")
    key = key if isinstance(key, str) else None
    path = b"/v1/chat/completions" if chat else b"/v1/completions"
    timeouts = rt.profile.timeouts
    deadline = trio.current_time() + timeouts.overall_s
    worker, resp, reason, first = await _open(
        app, candidates, key, path, body, stream, min(timeouts.first_chunk_s, timeouts.overall_s)
    )
    if resp is None:
        await _no_local_worker(app, scope, receive, send, req, rt, forbid, reason)
        return
    assert worker is not None
    extra = ((b"x-sie-served-by", b"local"), (b"x-sie-request-id", rid.encode()))
    w = app.watch.register(receive)
    w.scope.deadline = deadline
    finished = False
    head_sent: list[bool] = []
    try:
        with w.scope:
            try:
                if stream:
                    finished = await _stream(
                        app,
                        send,
                        resp,
                        rt,
                        req,
                        rid,
                        chat,
                        timeouts.first_chunk_s,
                        timeouts.inter_chunk_s,
                        extra,
                        head_sent,
                        first,
                    )
                else:
                    w.scope.deadline = min(deadline, trio.current_time() + timeouts.overall_s)
                    payload = await resp.read(app.settings.max_response_bytes)
                    answer = normalize_answer(
                        _loads(payload),
                        rid,
                        rt.profile.name,
                        req.n,
                        req.best_of,
                        "logprobs" in req.fields,
                        not chat,
                    )
                    await respond_json(send, 200, orjson.dumps(answer), extra)
                    finished = True
            finally:
                await resp.aclose()
    finally:
        app.watch.release(w)
        worker.in_flight -= 1
        if not finished:
            # The worker may still be generating for nobody: abort it by request id.
            with trio.move_on_after(ABORT_TIMEOUT_S, shield=True):
                await _abort(app, worker, rid)
    if w.drained and not w.client_gone:
        if head_sent and not finished:
            event = envelope("the gateway is shutting down", "server_error", None, "shutting_down")
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + event + b"\n\n",
                    "more_body": False,
                }
            )
            return
        if not head_sent:
            raise GatewayError(
                503,
                "shutting_down",
                "The gateway is shutting down.",
                type="server_error",
                headers=((b"connection", b"close"),),
            )
    if w.scope.cancelled_caught and not w.client_gone and not stream:
        raise GatewayError(
            504, "overall_timeout", "the model did not finish in time", type="server_error"
        )


def _first_chunk_timeout() -> GatewayError:
    # SIE: a first-chunk timeout is a 504, not a reason to try another worker.
    return GatewayError(
        504, "first_chunk_timeout", "the model did not start answering in time", type="server_error"
    )


def _overloaded(first: bytes) -> bool:
    """A stream that opens with SGLang's queue-full error (status 503), possibly after the
    role chunk, before any generated content."""
    for event in SseSplitter().feed(first):
        try:
            doc = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(doc, dict):
            return False
        err = doc.get("error")
        if isinstance(err, dict):
            return err.get("code") in (503, "503")
        for choice in doc.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict) or delta.get("content") or delta.get("tool_calls"):
                return False
    return False


def _loads(payload: bytes) -> object:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise GatewayError(
            502,
            "malformed_worker_response",
            "the worker sent a malformed answer",
            type="server_error",
        ) from None


async def _open(
    app: App,
    candidates: list[WorkerState],
    key: str | None,
    path: bytes,
    body: bytes,
    stream: bool,
    first_chunk_s: float,
) -> tuple[WorkerState | None, Response | None, str, bytes]:
    """A worker's response head (and for a stream its first piece), trying the next worker
    on a failure before any byte reached the client. Returns (worker, response, "", first
    bytes) or (None, None, why no local worker could serve, b"")."""
    exclude: set[int] = set()
    reason = "provisioning" if not candidates else "unhealthy"
    if (
        candidates
        and all(w.saturated for w in candidates if w.healthy)
        and any(w.healthy for w in candidates)
    ):
        reason = "saturated"
    while (worker := app.fleet.pick(candidates, key, exclude)) is not None:
        exclude.add(id(worker))
        worker.in_flight += 1
        headers = [
            (b"content-type", b"application/json"),
            (b"accept", b"text/event-stream" if stream else b"application/json"),
        ]
        # One deadline for the head and, on a stream, its first piece.
        deadline = trio.current_time() + first_chunk_s
        try:
            with trio.fail_at(deadline):
                resp = await app.pool.send(
                    worker.origin, b"POST", worker.origin.base_path.encode() + path, headers, body
                )
        except trio.TooSlowError:
            worker.in_flight -= 1
            raise _first_chunk_timeout() from None
        except GatewayError as e:
            worker.in_flight -= 1
            log.warning(
                "worker %s failed before the first byte (%s); trying another",
                worker.worker.url,
                e.code,
            )
            worker.healthy = False
            continue
        if resp.status == 200 and not stream:
            return worker, resp, "", b""
        if resp.status == 200:
            # SGLang answers a stream it cannot queue with 200 and then an error event (503):
            # read the first piece before anything reaches the client, so that is retried too.
            try:
                with trio.fail_at(deadline):
                    first = await resp.receive_chunk()
            except trio.TooSlowError:
                await resp.aclose()
                worker.in_flight -= 1
                raise _first_chunk_timeout() from None
            except GatewayError:
                await resp.aclose()
                worker.in_flight -= 1
                log.warning(
                    "worker %s failed before the first chunk; trying another", worker.worker.url
                )
                continue
            if not _overloaded(first):
                return worker, resp, "", first
            await resp.aclose()
            worker.in_flight -= 1
            log.warning("worker %s is overloaded; trying another", worker.worker.url)
            reason = "saturated"
            continue
        try:
            payload = await resp.read(1 << 20)
        finally:
            await resp.aclose()
            worker.in_flight -= 1
        if resp.status in RETRYABLE:
            log.warning(
                "worker %s answered %d before the first byte; trying another",
                worker.worker.url,
                resp.status,
            )
            reason = "saturated" if resp.status in (429, 503) else "unhealthy"
            continue
        raise _worker_error(resp.status, payload)
    return None, None, reason, b""


async def _stream(
    app: App,
    send: Send,
    resp: Response,
    rt: LocalRuntime,
    req: ParsedRequest,
    rid: str,
    chat: bool,
    first_chunk_s: float,
    inter_chunk_s: float,
    extra: tuple[tuple[bytes, bytes], ...],
    head_sent: list[bool],
    first: bytes,
) -> bool:
    """Relay one worker stream in the SIE shape, starting with the `first` piece already
    read; True when it ended cleanly."""
    normalizer = ChatStream(
        rid,
        rt.profile.name,
        req.n,
        req.include_usage,
        "logprobs" in req.fields,
        completions=not chat,
    )
    splitter = SseSplitter()
    headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    head_sent.append(True)
    limit = inter_chunk_s
    pending = first
    try:
        while True:
            try:
                with trio.fail_after(limit):
                    chunk, pending = (
                        (pending, b"") if pending else (await resp.receive_chunk(), b"")
                    )
            except trio.TooSlowError:
                raise WorkerFailure("inter_chunk_timeout", "the worker stopped sending") from None
            if not chunk:
                break
            out: list[bytes] = []
            for event in splitter.feed(chunk):
                if event.is_done:
                    out += normalizer.close()
                    await send(
                        {"type": "http.response.body", "body": b"".join(out), "more_body": False}
                    )
                    return True
                out += normalizer.feed(event.data)
            if out:
                await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
        raise WorkerFailure("transport_failure", "the worker stream ended without [DONE]")
    except (WorkerFailure, GatewayError) as e:
        code = e.code
        event = (
            b"data: "
            + envelope(
                str(e) if isinstance(e, WorkerFailure) else e.message, "server_error", None, code
            )
            + b"\n\n"
        )
        await send({"type": "http.response.body", "body": event, "more_body": False})
        return False


async def _abort(app: App, worker: WorkerState, rid: str) -> None:
    try:
        resp = await app.pool.send(
            worker.origin,
            b"POST",
            worker.origin.base_path.encode() + b"/abort_request",
            [(b"content-type", b"application/json")],
            orjson.dumps({"rid": rid}),
        )
        await resp.aclose()
    except GatewayError:
        log.warning("could not abort request on worker %s", worker.worker.url)


async def _no_local_worker(
    app: App,
    scope: dict[str, Any],
    receive: Receive,
    send: Send,
    req: ParsedRequest,
    rt: LocalRuntime,
    forbid: bool,
    reason: str,
) -> None:
    fallback = rt.profile.remote_fallback
    if fallback is None or forbid:
        raise GatewayError(
            503,
            "provisioning" if reason == "provisioning" else "transport_failure",
            f"no local worker can serve '{rt.profile.name}' now",
            type="server_error",
            headers=((b"retry-after", b"5"), (b"x-sie-served-by", b"local")),
        )
    from edgegw.app import forward_remote

    await forward_remote(
        app,
        scope,
        receive,
        send,
        req,
        fallback,
        fallback=True,
        headers=((b"x-sie-served-by", b"remote"), (b"x-sie-fallback-reason", reason.encode())),
    )
