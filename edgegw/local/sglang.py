"""SGLang's side of local serving, as pure functions over bytes and documents: the request
body for its OpenAI-compatible endpoints, and its answers and stream chunks turned into the
SIE shapes. No I/O here (edgegw.local.serve does that).

Request: `lora_adapter` -> `lora_path`, `chat_template_kwargs` merged with the profile's
(the profile wins on a conflict), the profile's default sampling under the request's,
`developer` -> `system`, regex and grammar formats -> SGLang's `regex` / `ebnf`, `best_of`
-> `n` candidates with logprobs, a request id (`rid`) so a disconnect can abort it.
Answer: ids `chatcmpl-<rid>`, `system_fingerprint` on the answer and every chunk,
`delta.role` once per choice, one closing chunk per choice with its finish_reason, the usage
chunk when asked, one `[DONE]`; `usage` exactly {prompt_tokens, completion_tokens,
total_tokens}; `logprobs` as {content, refusal: null}; best_of ranked by cumulative logprob;
a missing usage fails closed.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import orjson
import xxhash

from edgegw._core import SseSplitter, UpstreamProtocolError
from edgegw.errors import GatewayError, fail
from edgegw.local.fleet import LocalRuntime

PASS_FINISH = frozenset({"length", "tool_calls", "content_filter", "function_call"})


@functools.cache
def gateway_version() -> str:
    """edgegw's version, read when first needed (importlib.metadata costs a start 1.3 MiB)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edgegw")
    except PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1024)
def system_fingerprint(model: str) -> str:
    """SIE's `fp_` + xxh3 (64-bit, hex) of the model, a NUL and the gateway's version."""
    return "fp_" + xxhash.xxh3_64_hexdigest(f"{model}\0{gateway_version()}".encode())


def normalize_usage(usage: object) -> dict[str, int]:
    """Exactly {prompt_tokens, completion_tokens, total_tokens}; a worker's usage without
    integer counts fails closed (SIE never synthesises them)."""
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (prompt, completion)):
        raise WorkerFailure("malformed_worker_response", "the worker sent no usage")
    assert isinstance(prompt, int) and isinstance(completion, int)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def chat_logprobs(lp: object) -> dict[str, Any] | None:
    """A choice's logprobs in the chat shape, {content, refusal: null}."""
    if not isinstance(lp, dict):
        return None
    return {"content": lp.get("content"), "refusal": None}


class WorkerFailure(Exception):
    """A worker failed after the response began; the stream ends with an error event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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
    body["model"] = rt.profile.served_name
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
    _add_stop_tokens(body, rt)
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
    body["model"] = rt.profile.served_name
    body["max_tokens"] = cap
    if isinstance(body.get("prompt"), list):
        body["prompt"] = body["prompt"][0]
    for key, value in rt.profile.default_sampling.items():
        body.setdefault(key, value)
    _add_stop_tokens(body, rt)
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    body["rid"] = rid
    return body


def _add_stop_tokens(body: dict[str, Any], rt: LocalRuntime) -> None:
    """The profile's stop_tokens after the request's stop strings, deduplicated (SIE)."""
    if not rt.profile.stop_tokens:
        return
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    body["stop"] = list(dict.fromkeys([*stops, *rt.profile.stop_tokens]))


def _finish(reason: object, made_tool_call: bool) -> str:
    if reason == "abort" or (isinstance(reason, dict) and reason.get("type") == "abort"):
        raise WorkerFailure("inference_error", "the worker aborted the generation")
    if reason == "length" and made_tool_call:
        return "tool_calls"
    return reason if reason in PASS_FINISH else "stop"


def worker_error(status: int, payload: bytes) -> GatewayError:
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
        return fail("invalid_request", message[:2000])
    if status == 404:
        return fail("model_not_found", message[:2000])
    return fail("inference_error", message[:2000])


class ChatStream:
    """SGLang's OpenAI stream chunks → the SIE chunk sequence."""

    def __init__(
        self, rid: str, model: str, n: int, include_usage: bool, logprobs: bool, completions: bool
    ) -> None:
        self.rid = rid
        self.id = ("cmpl-" if completions else "chatcmpl-") + rid
        self.fingerprint = system_fingerprint(model)
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
        # The worker's ids of the candidates (SGLang re-ids each of n > 1 and writes the
        # candidate's id as the chunk's `id`): what an abort must name.
        self.worker_ids: set[str] = set()
        # Names of the tools the model called (streamed calls name the function once).
        self.tool_names: list[str] = []
        self.finish_reasons: list[str] = []  # as the client got them, in finishing order

    def _event(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        return b"data: " + orjson.dumps(self._doc(choices, usage)) + b"\n\n"

    def _doc(
        self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        }
        if usage is not None:
            doc["usage"] = usage
        return doc

    def error_event(
        self, code: str, message: str, type_: str, retry_after_s: float | None
    ) -> bytes:
        """SIE's final chunk of a stream that failed after its first byte: each unfinished
        choice with finish_reason null, a top-level `error` and `request_id`."""
        error: dict[str, Any] = {"message": message, "type": type_, "param": None, "code": code}
        if retry_after_s is not None:
            error["retry_after_s"] = retry_after_s
        open_choices = [i for i in range(self.n) if i not in self.finished] or [0]
        choices: list[dict[str, Any]]
        if self.completions:
            choices = [{"index": i, "text": "", "finish_reason": None} for i in open_choices]
        else:
            choices = [
                {"index": i, "delta": {}, "logprobs": None, "finish_reason": None}
                for i in open_choices
            ]
        doc = self._doc(choices)
        doc["error"] = error
        doc["request_id"] = self.rid
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
            self.usage = normalize_usage(doc["usage"])
        wid = doc.get("id")
        if isinstance(wid, str) and len(self.worker_ids) < self.n and len(wid) <= 128:
            self.worker_ids.add(wid)
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
                    self.tool_names += _tool_names(delta_in["tool_calls"])
                lp = chat_logprobs(ch.get("logprobs")) if self.logprobs else None
                if delta or lp:
                    out.append(
                        self._event(
                            [{"index": i, "delta": delta, "logprobs": lp, "finish_reason": None}]
                        )
                    )
            reason = ch.get("finish_reason")
            if reason:
                self.finished.add(i)
                self.finish_reasons.append(mapped := _finish(reason, i in self.tool_call))
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
        raise fail("malformed_worker_response", "the worker sent a malformed answer")
    try:
        usage = normalize_usage(doc.get("usage"))
    except WorkerFailure:
        # SIE: a missing final usage is a 500, never synthesised.
        raise fail("malformed_worker_response", "the worker sent no usage", status=500) from None
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
            raise fail(e.code, str(e)) from None
        item: dict[str, Any] = {
            "index": i,
            "finish_reason": reason,
            "logprobs": chat_logprobs(ch.get("logprobs")) if logprobs else None,
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
        "system_fingerprint": system_fingerprint(model),
        "choices": out,
        "usage": usage,
    }


def _cumulative_logprob(choice: dict[str, Any]) -> float:
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        return -math.inf
    return float(sum(t.get("logprob", -math.inf) for t in content if isinstance(t, dict)))


def overloaded(first: bytes) -> bool:
    """A stream that opens with SGLang's queue-full error (status 503), possibly after the
    role chunk, before any generated content."""
    try:
        events = SseSplitter().feed(first)
    except UpstreamProtocolError:
        return False  # not SGLang's overload answer; the relay ends the stream with it
    for event in events:
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


def loads_answer(payload: bytes) -> object:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise fail("malformed_worker_response", "the worker sent a malformed answer") from None


def _tool_names(calls: object) -> list[str]:
    names = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names


def answer_tool_names(answer: dict[str, Any]) -> list[str]:
    """The tools called in a normalised non-streaming answer."""
    names = []
    for choice in answer.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            names += _tool_names(message.get("tool_calls"))
    return names
