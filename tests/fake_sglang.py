"""A fake of ONE SGLang worker (``python -m sglang.launch_server``): raw Trio + h11 on loopback,
scriptable, recording. Served as edgegw/mock.py is, by edgegw/plainhttp.py: one
``h11.Connection`` per socket, one task per connection, bounded bodies, a watcher task that
notices a client going away mid-response.

Start it with ``port = await nursery.start(fake.serve)``; change ``fake.script`` (a mutable
``Script``) between requests; read ``fake.requests`` (``Recorded``: method, path with query,
lower-cased headers, ``body`` = the parsed JSON or the raw bytes, ``raw``; recorded before the
answer), ``fake.aborted_rids``, ``fake.active_rids`` and the counters (``disconnects``,
``crashes``, ``generations``, ``open_connections``).

Endpoints (shapes of SGLang ~0.5.x, see ../shared/notes/sglang-api.md):

    GET  /health, /health_generate      200 empty body; 503 empty body when not script.healthy
    GET  /get_model_info                {model_path, tokenizer_path, is_generation,
                                         preferred_sampling_params, weight_version}
    GET  /get_server_info, /server_info server args FLAT at the top level (context_length,
                                         served_model_name, lora_paths, ...), scheduler info,
                                         internal_states, version (SGLang merges them this way)
    GET  /v1/models, /v1/models/{id}    ModelCard{id, object, created, owned_by: "sglang", root,
                                         parent, max_model_len}; unknown id: 404 nested error
    POST /abort_request                 {rid, abort_all}: 200 empty body
    POST|PUT /generate                  native generation
    POST /v1/chat/completions, /v1/completions   OpenAI-compatible, basic
    POST /v1/embeddings                 ``EmbeddingRequest``: ``input`` a string, strings, token
                                        ids or lists of them; ``dimensions`` cuts the vector;
                                        {data: [{embedding: [floats], index, object}], model,
                                        object: "list", usage} (floats whatever
                                        ``encoding_format`` says, as SGLang's serving writes)
    POST /v1/rerank                     ``V1RerankReqInput`` {query, documents, top_n,
                                        return_documents (default true)}: a JSON LIST of
                                        {score, document?, index, meta_info}, best first

Embeddings and rerank need ``script.is_embedding`` (SGLang's ``--is-embedding``); without it
they are the tokenizer manager's ValueError, 400 flat ("not an embedding model"), and with it
/generate and the generation endpoints are the same 400 the other way round. The vector of an
input is ``embedding_of(input, script.embedding_dim)`` (deterministic, from a hash of the text
or the ids); a rerank score is ``relevance_of(query, document)`` (shared words, hash-broken
ties). ``prompt_tokens`` counts words (or ids), as generation does. The answer waits
``first_chunk_delay_s``; a client gone meanwhile is counted in ``disconnects``.

Generation. The prompt counts one token per whitespace-separated word of ``text`` (or one per
``input_ids`` entry; chat: words of the message contents). Token ``i`` of candidate ``j`` is
``WORDS[(i + j) % len(WORDS)]`` with id ``WORD_ID_BASE + word index``; its text is the word,
preceded by a space except for the first token, so the text is the words joined by spaces.
A candidate writes ``max(script.tokens, min_new_tokens)`` words, then the EOS token
(``script.eos_token_id``: no text, but counted in ``completion_tokens`` as SGLang counts it) and
ends with ``{"type": "stop", "matched": <eos id>}``; when ``max_new_tokens`` (default 128; null
means "up to the context length") comes first it ends with ``{"type": "length", "length": N}``;
``ignore_eos`` writes until the cap. A ``stop`` string found in the text (once ``min_new_tokens``
are out) ends it with ``{"type": "stop", "matched": "<string>"}`` and the final text is cut
before the string (``no_stop_trim`` keeps it); a ``stop_token_ids`` hit ends it with the id as
``matched`` and drops that token's text.

Logprobs (``return_logprob``): token ``i`` of candidate ``j`` has logprob
``-(0.5 / (j + 1) + 0.01 * (i % 4))``, so at equal length the candidate with the HIGHER index has
the higher cumulative logprob: with ``n`` candidates, candidate ``n - 1`` ranks best, then
``n - 2``, ..., candidate 0 worst (a gateway that keeps the first ``n`` of ``best_of`` fails).
``output_token_logprobs`` is ``[[logprob, token_id, text|null], ...]`` (text only with
``return_text_in_logprobs``); ``output_top_logprobs`` (when ``top_logprobs_num`` > 0) holds per
position the chosen token first, then other words, each 1.0 lower. Both are cumulative in streams.

Streams (``stream: true``): the head at once (``text/event-stream; charset=utf-8``, chunked),
then per decode step one ``data: {json}\\n\\n`` event per unfinished candidate, the candidates
interleaved; ``text`` and ``output_ids`` are CUMULATIVE (SGLang's default); ``meta_info`` has
``finish_reason: null`` until the candidate's last event (its fields: id, finish_reason,
prompt_tokens, weight_version, completion_tokens, cached_tokens, e2e_latency, and the logprob
lists when asked for); with ``n > 1`` every event carries ``index``. Then ``data: [DONE]``.
The first step waits ``first_chunk_delay_s``, later ones ``token_delay_s``. Without ``stream``
the same time passes, then one JSON object, or a LIST of objects (no ``index``) for ``n > 1``.

Request ids, as SGLang assigns them: with ``n == 1`` the candidate's id (``meta_info.id``) is the
request's ``rid`` (a uuid4 hex when absent). With ``n > 1`` SGLang re-ids every candidate with a
fresh uuid4 hex (``regenerate_rid``) and ``/abort_request`` only matches a running id EXACTLY, so
an abort naming the request's own ``rid`` is silently ignored (200, nothing stops): abort each
``meta_info.id`` seen, or use ``abort_all``. ``active_rids`` holds the ids of running candidates.
On /v1/* streams each candidate's chunks carry its id as ``id`` (SGLang's OpenAI serving writes
``meta_info.id`` there), so a client of the OpenAI endpoints can learn the ids to abort.
An abort ends the candidate with ``{"type": "abort", "message": "Aborted", "status_code": null,
"err_type": null}`` (a non-streaming request then answers 200 with that finish reason).
LoRA: ``lora_path`` (or, on /v1/*, ``model: "<served name>:<adapter>"``) must name one of
``script.lora_adapters``; with none configured every ``lora_path`` is "LoRA is not enabled".

Errors, each in the shape SGLang's code path gives it:
- pydantic-level problems (body not JSON, not an object, a field of the wrong type, a
  non-JSON content type on /v1/*) -> 400 FLAT ``{"object": "error", "message", "type":
  "Bad Request", "param": null, "code": 400}`` (FastAPI's 422 turned into 400).
- ``ValueError``s of the tokenizer manager (neither/both of text and input_ids, unknown LoRA
  adapter, prompt too long for ``context_length``, ``SamplingParams.verify``: temperature >= 0,
  top_p in (0, 1], min_p in [0, 1], top_k -1 or >= 1, penalties, min_new_tokens <=
  max_new_tokens, logit_bias keys in [0, vocab_size), at most one grammar) -> without ``stream``
  400 NATIVE ``{"error": {"message"}}``; with ``stream`` 200, then ``data: {"error":
  {"message"}}`` and ``data: [DONE]``. On /v1/*: 400 flat with ``type: "BadRequestError"``, or in
  a stream ``data: {"error": {flat}}`` then ``[DONE]``.
- an unknown ``sampling_params`` name (or a non-number where a number belongs) is a TypeError in
  SGLang (``SamplingParams(**params)``), which nothing catches: 500 ``text/plain`` "Internal Server
  Error", or with ``stream`` a 200 head and then the connection cut. (Not a 400: SGLang does not
  validate sampling_params names with pydantic or msgspec; this fake follows SGLang.)
- unknown path 404 ``{"detail": "Not Found"}``; known path, other method 405 ``{"detail":
  "Method Not Allowed"}``; with ``script.api_key``, 401 ``{"error": "Unauthorized"}`` (not on
  /health*).

Scripted behaviour (``Script``): ``fail_status`` answers /generate and /v1/* at once with that
status (400: native shape on /generate; 500 on /generate: text/plain; any other status on
/generate and every status on /v1/*: flat, ``type`` "BadRequestError" / "NotFoundError" /
"InternalServerError", else the status as a string, as SGLang's HTTPException handler writes it).
``overloaded`` is SGLang's full request queue: the scheduler aborts with ``status_code`` 503 and
"The request queue is full.": without ``stream`` 503 flat; with ``stream`` a 200 whose event ends
each candidate with ``finish_reason {type: abort, status_code: 503}`` (what a gateway must treat
as a failure before its first byte). ``finish_abort`` (a message) ends every candidate at once as
a bad grammar does: ``{type: abort, message, status_code: 400, err_type: "BadRequestError"}`` in a
stream, 400 native without. ``crash_after_tokens=k`` closes the socket after k decode steps (a
FIN with no chunked terminator; for a non-streaming request, no response at all). A client that
goes away while a response waits or streams is noticed by the watcher, counted in
``disconnects`` and its generation ended, as SGLang aborts a disconnected request.

Simplified: no batches (a list ``text`` or nested ``input_ids`` is a 400 native naming the fake;
a list ``rid``, ``lora_path`` or ``sampling_params`` a flat 400), and on /v1/completions
``prompt`` is a string (or a list of one string); ``n`` is bounded to [1, 1024] and
``top_logprobs_num`` to [0, 1024] (SGLang has no such bounds); no tokenizer (word counts);
/health answers at once (SGLang runs a 1-token generation and takes about a second); the OpenAI
endpoints return no logprobs, no tool calls and no reasoning split (``separate_reasoning``,
``chat_template_kwargs`` and the other SGLang extensions are accepted and recorded); an OpenAI
stream ends with per-choice finish chunks, then the usage chunk if asked for; on /v1/* streams,
``finish_abort`` and ``overloaded`` become an ``error`` event. ``crashes`` also counts streams
cut by the TypeError path.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from typing import Any

import orjson
import trio

from edgegw import plainhttp

# Large enough for data-URI images, small enough that one connection cannot make the fake hold much.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_RECORDED = 1000  # enough history for any test
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
         "edge", "gateways", "stream", "tokens", "to", "clients")  # fmt: skip
WORD_ID_BASE = 1000  # token id of WORDS[k] is WORD_ID_BASE + k
EOS_TEXT = "<|im_end|>"
GENERATE_MAX_NEW_TOKENS = 128  # SamplingParams default on /generate
COMPLETIONS_MAX_TOKENS = 16  # CompletionRequest default
MODEL_CREATED = 1_700_000_000
ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
QUEUE_FULL = "The request queue is full."
_SAMPLING_EPS = 1e-6
# Bounds that keep a silly request from making the fake allocate without limit (SGLang has none).
MAX_CANDIDATES = 1024
MAX_TOP_LOGPROBS = 1024

# SamplingParams' API fields and their defaults (a None value also means the default).
_SAMPLING_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": GENERATE_MAX_NEW_TOKENS, "stop": None, "stop_token_ids": None,
    "stop_regex": None, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
    "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    "min_new_tokens": 0, "n": 1, "json_schema": None, "regex": None, "ebnf": None,
    "structural_tag": None, "ignore_eos": False, "skip_special_tokens": True,
    "spaces_between_special_tokens": True, "no_stop_trim": False, "custom_params": None,
    "stream_interval": None, "logit_bias": None, "sampling_seed": None,
}  # fmt: skip
_OPTIONAL = {k for k, v in _SAMPLING_DEFAULTS.items() if v is None} | {"max_new_tokens"}

_JSON = b"application/json"
_SSE = b"text/event-stream; charset=utf-8"
_TEXT = b"text/plain; charset=utf-8"
_DONE = b"data: [DONE]\n\n"


@dataclass
class Script:
    """What the fake worker is and does; tests change fields between requests."""

    model_path: str = "qwen3-8b"  # also the served model name unless served_model_name is set
    served_model_name: str | None = None
    tokenizer_path: str | None = None  # None: model_path, as SGLang defaults it
    context_length: int = 32768
    vocab_size: int = 151936
    eos_token_id: int = 151645
    healthy: bool = True  # False: /health and /health_generate answer 503
    lora_adapters: list[str] = field(default_factory=list)  # names accepted in lora_path
    tokens: int = 8  # words per candidate before EOS, when max_new_tokens allows
    cached_tokens: int = 0  # meta_info.cached_tokens (capped at the prompt length)
    first_chunk_delay_s: float = 0.0  # before the first decode step
    token_delay_s: float = 0.0  # before each later step
    end_delay_s: float = 0.0  # a stream's chunked terminator this long after its [DONE]
    fail_status: int | None = None  # answer /generate and /v1/* with this status at once
    crash_after_tokens: int | None = None  # cut the connection after k decode steps
    finish_abort: str | None = None  # end every candidate at once: abort, status_code 400
    overloaded: bool = False  # the request queue is full: abort with status_code 503
    api_key: str | None = None  # when set, require `Authorization: Bearer <key>`
    # Chat only: given the request's JSON, the tool calls (name, arguments) to answer with
    # instead of text, or None for the usual text answer (SGLang's tool-call parser output).
    tool_reply: Callable[[dict[str, Any]], list[tuple[str, dict[str, Any]]] | None] | None = None
    weight_version: str = "default"
    version: str = "0.5.4"
    is_embedding: bool = False  # --is-embedding: /v1/embeddings and /v1/rerank, no generation
    embedding_dim: int = 16

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model_path


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str  # with the query string
    headers: dict[str, str]  # lower-cased names, last value wins
    body: Any  # the parsed JSON value, or the raw bytes when they are not JSON (b"" if none)
    raw: bytes


class _Validation(Exception):
    """pydantic rejected the body: flat 400 "Bad Request" before anything streams."""


class _Value(Exception):
    """SGLang raised ValueError: native 400, or an error event in a stream."""


class _Type(Exception):
    """SGLang raised something nobody catches: 500 text/plain, or a cut stream."""


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    body: bytes = b""
    content_type: bytes | None = _JSON
    headers: tuple[tuple[bytes, bytes], ...] = ()


@dataclass(slots=True)
class _Token:
    id: int
    text: str  # what it adds to the output text ("" for EOS)
    logprob: float
    word: int | None  # index in WORDS, None for EOS


@dataclass(eq=False)
class _Candidate:
    index: int
    rid: str
    plan: list[_Token]
    end: dict[str, Any]  # finish_reason once the plan is out
    emitted: int = 0
    finish: dict[str, Any] | None = None
    abort_requested: bool = False


@dataclass(eq=False)
class _Generation:
    candidates: list[_Candidate]
    prompt_tokens: int
    cached_tokens: int
    stream: bool
    return_logprob: bool
    top_logprobs_num: int
    return_text: bool
    no_stop_trim: bool
    weight_version: str
    first_delay_s: float
    token_delay_s: float
    crash_after: int | None
    early: dict[str, Any] | None  # finish_abort / overloaded: the abort every candidate ends with
    started: float = field(default_factory=time.monotonic)
    changed: trio.Event = field(default_factory=trio.Event)  # set (and replaced) on an abort

    @property
    def done(self) -> bool:
        return all(c.finish is not None for c in self.candidates)

    def wake(self) -> None:
        event, self.changed = self.changed, trio.Event()
        event.set()


# Delivers a generation. True: delivered; False: the connection must be cut.
Work = Callable[[plainhttp.Responder], Awaitable[bool]]


class FakeSGLang:
    """One fake SGLang worker: state shared by its server and the tests that drive it."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script if script is not None else Script()
        self.requests: list[Recorded] = []
        self.aborted_rids: list[str] = []  # the rid of every /abort_request, matched or not
        self.active_rids: set[str] = set()  # ids of the candidates generating now
        self.disconnects = 0  # responses the client left before their last byte
        self.crashes = 0  # connections cut: crash_after_tokens, or a stream's TypeError path
        self.generations = 0  # generations started (/generate and /v1/*)
        self._server = plainhttp.Server(
            "fake SGLang",
            self._answer,
            limits=plainhttp.Limits(max_head_bytes=64 * 1024, max_body_bytes=MAX_BODY_BYTES),
            render_error=_render_error,
        )
        self._running: dict[str, _Candidate] = {}
        self._generations: dict[_Candidate, _Generation] = {}
        self._routes: dict[tuple[str, str], Callable[[dict[str, str], bytes], Any]] = {
            ("GET", "/health"): self._health,
            ("GET", "/health_generate"): self._health,
            ("GET", "/get_model_info"): self._model_info,
            ("GET", "/get_server_info"): self._server_info,
            ("GET", "/server_info"): self._server_info,
            ("GET", "/v1/models"): self._models,
            ("POST", "/abort_request"): self._abort,
            ("POST", "/generate"): self._generate,
            ("PUT", "/generate"): self._generate,
            ("POST", "/v1/chat/completions"): lambda h, b: self._openai(True, h, b),
            ("POST", "/v1/completions"): lambda h, b: self._openai(False, h, b),
            ("POST", "/v1/embeddings"): self._embeddings,
            ("POST", "/v1/rerank"): self._rerank,
        }
        self._paths = {path for _, path in self._routes}

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on a free port of 127.0.0.1 and serve forever; task_status.started(port)."""
        await self._server.serve_tcp("127.0.0.1", 0, task_status=task_status)

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def open_connections(self) -> int:
        return self._server.open_connections

    # ---- requests ----------------------------------------------------------------------------

    async def _answer(self, request: plainhttp.Request, out: plainhttp.Responder) -> None:
        raw = request.body
        self._record(request.method, request.target, request.headers, raw or b"")
        if raw is None:
            await _send(out, _detail(413, "Request Entity Too Large"))
            return
        answer = self._route(request.method, request.path, request.headers, raw)
        if isinstance(answer, _Reply):
            await _send(out, answer)
            return
        outcome = await out.watch_client(partial(answer, out))
        if outcome is None:  # the client went away first
            self.disconnects += 1
        elif not outcome:
            self.crashes += 1

    def _record(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> None:
        try:
            body: Any = orjson.loads(raw) if raw else b""
        except orjson.JSONDecodeError:
            body = raw
        if len(self.requests) >= MAX_RECORDED:
            del self.requests[: len(self.requests) - MAX_RECORDED + 1]
        self.requests.append(Recorded(method, target, headers, body, raw))

    def _route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Any:
        script = self.script
        if script.api_key is not None and not path.startswith("/health"):
            if headers.get("authorization") != f"Bearer {script.api_key}":
                return _json(401, {"error": "Unauthorized"})
        handler = self._routes.get((method, path))
        if handler is None and method == "GET" and path.startswith("/v1/models/"):
            return self._model_card(path[len("/v1/models/") :])
        if handler is None:
            if path in self._paths:
                return _detail(405, "Method Not Allowed")
            return _detail(404, "Not Found")
        return handler(headers, raw)

    # ---- simple endpoints --------------------------------------------------------------------

    def _health(self, _h: dict[str, str], _b: bytes) -> _Reply:
        return _Reply(200 if self.script.healthy else 503, content_type=None)

    def _model_info(self, _h: dict[str, str], _b: bytes) -> _Reply:
        s = self.script
        return _json(
            200,
            {
                "model_path": s.model_path,
                "tokenizer_path": s.tokenizer_path or s.model_path,
                "is_generation": not s.is_embedding,
                "preferred_sampling_params": None,
                "weight_version": s.weight_version,
            },
        )

    def _server_info(self, _h: dict[str, str], _b: bytes) -> _Reply:
        s = self.script
        lora = [
            {"lora_id": uuid.uuid5(uuid.NAMESPACE_URL, n).hex, "lora_name": n,
             "lora_path": f"/models/lora/{n}", "pinned": False}
            for n in s.lora_adapters
        ]  # fmt: skip
        server_args = {
            "model_path": s.model_path, "tokenizer_path": s.tokenizer_path or s.model_path,
            "served_model_name": s.served_name, "context_length": s.context_length,
            "host": "127.0.0.1", "port": self.port, "skip_tokenizer_init": False,
            "dtype": "auto", "tp_size": 1, "dp_size": 1, "mem_fraction_static": 0.88,
            "max_running_requests": None, "max_queued_requests": None,
            "chunked_prefill_size": 8192, "stream_interval": 1,
            "incremental_streaming_output": False, "enable_lora": bool(s.lora_adapters),
            "lora_paths": lora or None, "max_loras_per_batch": 8, "max_lora_rank": None,
            "api_key": None, "enable_metrics": False, "enable_cache_report": False,
            "reasoning_parser": None, "tool_call_parser": None, "allow_auto_truncate": False,
            "preferred_sampling_params": None, "weight_version": s.weight_version,
        }  # fmt: skip
        scheduler_info = {"max_total_num_tokens": 4 * s.context_length,
                          "max_req_input_len": s.context_length - 5}  # fmt: skip
        internal = [{"last_gen_throughput": 0.0, "memory_usage": {"weight": 15.3, "kvcache": 40.0}}]
        return _json(
            200,
            {**server_args, **scheduler_info, "internal_states": internal, "version": s.version},
        )

    def _card(self) -> dict[str, Any]:
        s = self.script
        return {
            "id": s.served_name,
            "object": "model",
            "created": MODEL_CREATED,
            "owned_by": "sglang",
            "root": s.served_name,
            "parent": None,
            "max_model_len": s.context_length,
        }

    def _models(self, _h: dict[str, str], _b: bytes) -> _Reply:
        return _json(200, {"object": "list", "data": [self._card()]})

    def _model_card(self, model: str) -> _Reply:
        if model != self.script.served_name:
            error = {
                "message": f"The model '{model}' does not exist",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }
            return _json(404, {"error": error})
        return _json(200, self._card())

    def _abort(self, _h: dict[str, str], raw: bytes) -> _Reply:
        try:
            payload = _parse_object(raw)
            rid = payload.get("rid", "")
            abort_all = payload.get("abort_all", False)
            if not isinstance(rid, str) or not isinstance(abort_all, bool):
                raise _Validation("rid must be a string and abort_all a boolean")
        except _Validation as exc:
            return _flat(400, str(exc), "Bad Request")
        self.aborted_rids.append(rid)
        if abort_all:
            victims = list(self._running.values())
        else:
            victim = self._running.get(rid)  # SGLang matches the running id exactly
            victims = [victim] if victim is not None else []
        for candidate in victims:
            candidate.abort_requested = True
            self._generations[candidate].wake()
        return _Reply(200, content_type=None)

    # ---- /v1/embeddings, /v1/rerank ----------------------------------------------------------

    def _embeddings(self, headers: dict[str, str], raw: bytes) -> _Reply:
        script = self.script
        if script.fail_status is not None:
            return _flat(script.fail_status, "scripted failure", _openai_type(script.fail_status))
        if not headers.get("content-type", "").startswith("application/json"):
            return _flat(400, "Content-Type must be application/json", "Bad Request")
        try:
            payload = _parse_object(raw)
            items = _embedding_inputs(payload.get("input"))
            dims = payload.get("dimensions")
            if dims is not None and (not _is_int(dims) or dims < 1):
                raise _field_error("dimensions", "integer")
        except _Validation as exc:
            return _flat(400, str(exc), "Bad Request")
        if not script.is_embedding:
            return _flat(400, NOT_EMBEDDING, "BadRequestError")
        if dims is not None and dims > script.embedding_dim:
            return _flat(
                400, f"dimensions {dims} exceeds {script.embedding_dim}", "BadRequestError"
            )
        tokens = 0
        for item in items:
            n = len(item.split()) if isinstance(item, str) else len(item)
            if n > script.context_length:
                return _flat(400, "The input is longer than the context length", "BadRequestError")
            tokens += n
        size = dims or script.embedding_dim
        data = [
            {"embedding": embedding_of(item, script.embedding_dim)[:size], "index": i,
             "object": "embedding"}
            for i, item in enumerate(items)
        ]  # fmt: skip
        usage = {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                 "prompt_tokens_details": None}  # fmt: skip
        model = payload.get("model", "default")
        self.generations += 1
        return self._delayed(
            _json(200, {"data": data, "model": model, "object": "list", "usage": usage})
        )

    def _rerank(self, headers: dict[str, str], raw: bytes) -> _Reply:
        script = self.script
        if script.fail_status is not None:
            return _flat(script.fail_status, "scripted failure", _openai_type(script.fail_status))
        try:
            payload = _parse_object(raw)
            query, documents = payload.get("query"), payload.get("documents")
            if not isinstance(query, str):
                raise _field_error("query", "string")
            if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
                raise _field_error("documents", "list")
            top_n = payload.get("top_n")
            if top_n is not None and (not _is_int(top_n) or top_n < 1):
                raise _Validation("Value error, parameter top_n should be larger than 0.")
            with_docs = payload.get("return_documents", True)
        except _Validation as exc:
            return _flat(400, str(exc), "Bad Request")
        if not script.is_embedding:
            return _flat(400, NOT_EMBEDDING, "BadRequestError")
        if not documents:
            return _flat(400, "documents must not be empty", "BadRequestError")
        ranked = []
        for i, doc in enumerate(documents):
            item: dict[str, Any] = {"score": relevance_of(query, doc), "index": i}
            if with_docs:
                item["document"] = doc
            tokens = len(query.split()) + len(doc.split())
            item["meta_info"] = {"id": uuid.uuid4().hex, "prompt_tokens": tokens}
            ranked.append(item)
        ranked.sort(key=lambda r: -r["score"])
        self.generations += 1
        return self._delayed(_json(200, ranked[:top_n] if top_n else ranked))

    def _delayed(self, reply: _Reply) -> Any:
        """`reply` after `script.first_chunk_delay_s` (the whole forward pass), a client
        that goes away meanwhile counted in `disconnects`."""
        delay = self.script.first_chunk_delay_s
        if delay <= 0:
            return reply

        async def work(out: plainhttp.Responder) -> bool:
            await trio.sleep(delay)
            await _send(out, reply)
            return True

        return work

    # ---- /generate ---------------------------------------------------------------------------

    def _generate(self, _h: dict[str, str], raw: bytes) -> Any:
        script = self.script
        if script.fail_status is not None:
            return _native_failure(script.fail_status)
        if script.is_embedding:
            return _native_error(NOT_GENERATION)
        try:
            payload = _parse_object(raw)
            request = _parse_generate(payload)
        except _Validation as exc:
            return _flat(400, str(exc), "Bad Request")
        stream = request["stream"]
        try:
            gen = self._prepare(request, script)
        except _Value as exc:
            if not stream:
                return _native_error(str(exc))
            return _stream_then(_sse({"error": {"message": str(exc)}}) + _DONE)
        except _Type:
            if not stream:
                return _Reply(500, b"Internal Server Error", _TEXT)
            return _stream_then(None)
        return lambda out: self._run(gen, _NativeRender(gen), out)

    def _prepare(self, request: dict[str, Any], script: Script) -> _Generation:
        """Everything SGLang's tokenizer manager checks, in its order; then the plans."""
        text, input_ids = request["text"], request["input_ids"]
        if (text is None) == (input_ids is None):
            raise _Value("Either text, input_ids or input_embeds should be provided.")
        if isinstance(text, list) or (input_ids and isinstance(input_ids[0], list)):
            raise _Value("fake SGLang: batch requests are not supported")
        _check_lora(request["lora_path"], script)
        prompt_tokens = len(text.split()) if text is not None else len(input_ids)
        sampling = request["sampling_params"]
        _check_context(prompt_tokens, sampling.get("max_new_tokens"), script)
        params = _verify_sampling(sampling, script.vocab_size)
        return self._plan(request, params, prompt_tokens, script)

    def _plan(
        self, request: dict[str, Any], params: dict[str, Any], prompt_tokens: int, script: Script
    ) -> _Generation:
        n = params["n"]
        rid = request["rid"]
        if n == 1:
            rids = [rid if rid is not None else uuid.uuid4().hex]
        else:
            rids = [uuid.uuid4().hex for _ in range(n)]  # SGLang's regenerate_rid()
        candidates = []
        for j in range(n):
            plan, end = _plan_candidate(j, params, prompt_tokens, script)
            candidates.append(_Candidate(j, rids[j], plan, end))
        early = None
        if script.finish_abort is not None:
            early = {"type": "abort", "message": script.finish_abort, "status_code": 400,
                     "err_type": "BadRequestError"}  # fmt: skip
        elif script.overloaded:
            early = {"type": "abort", "message": QUEUE_FULL, "status_code": 503,
                     "err_type": None}  # fmt: skip
        top = request["top_logprobs_num"]
        return _Generation(
            candidates=candidates,
            prompt_tokens=prompt_tokens,
            cached_tokens=min(script.cached_tokens, prompt_tokens),
            stream=request["stream"],
            return_logprob=request["return_logprob"],
            top_logprobs_num=top,
            return_text=request["return_text_in_logprobs"],
            no_stop_trim=bool(params["no_stop_trim"]),
            weight_version=script.weight_version,
            first_delay_s=script.first_chunk_delay_s,
            token_delay_s=script.token_delay_s,
            crash_after=script.crash_after_tokens,
            early=early,
        )

    # ---- running a generation ----------------------------------------------------------------

    async def _run(
        self, gen: _Generation, render: _NativeRender | _OpenAIRender, out: plainhttp.Responder
    ) -> bool:
        """Generate and deliver; True when complete, False when crash_after_tokens cut it."""
        self.generations += 1
        for c in gen.candidates:
            self._running[c.rid] = c
            self._generations[c] = gen
            self.active_rids.add(c.rid)
        try:
            if gen.stream:
                await out.start(200, _SSE_HEADERS)

                async def update(c: _Candidate) -> None:
                    if c.finish is not None:
                        self._release(c)  # as SGLang drops a request's state on its last output
                    await out.send_data(render.event(c))

                if not await _drive(gen, update):
                    return False
                await out.send_data(render.tail())
                if self.script.end_delay_s:
                    await trio.sleep(self.script.end_delay_s)
                await out.end()
                return True

            async def finished(c: _Candidate) -> None:
                if c.finish is not None:
                    self._release(c)

            if not await _drive(gen, finished):
                return False  # a crash: no response at all
            await _send(out, render.final())
            return True
        finally:
            for c in gen.candidates:
                if c.finish is None:
                    c.finish = ABORTED  # the client left or the worker "crashed"
                self._release(c)

    def _release(self, c: _Candidate) -> None:
        if self._running.get(c.rid) is c:
            del self._running[c.rid]
            self.active_rids.discard(c.rid)
        self._generations.pop(c, None)

    # ---- OpenAI-compatible -------------------------------------------------------------------

    def _openai(self, chat: bool, headers: dict[str, str], raw: bytes) -> Any:
        script = self.script
        if script.fail_status is not None:
            status = script.fail_status
            return _flat(status, f"scripted failure ({status})", _openai_type(status))
        if script.is_embedding:
            return _flat(400, NOT_GENERATION, "BadRequestError")
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        try:
            if media != "application/json":
                raise _Validation(
                    "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only "
                    "'application/json' is allowed\", 'type': 'value_error'}]"
                )
            payload = _parse_object(raw)
            request = _parse_openai(chat, payload, script.served_name)
        except _Validation as exc:
            return _flat(400, str(exc), "Bad Request")
        if chat and script.tool_reply is not None:
            calls = script.tool_reply(payload)
            if calls:
                return _tool_answer(payload, request, calls)
        try:
            gen = self._prepare(request, script)
        except _Type as exc:  # pydantic checks these fields' types on /v1/*
            return _flat(400, str(exc), "Bad Request")
        except _Value as exc:
            message = str(exc)
            if not request["stream"]:
                return _flat(400, message, "BadRequestError")
            body = _sse({"error": _flat_body(400, message, "BadRequestError")}) + _DONE
            return _stream_then(body)
        render = _OpenAIRender(chat, payload, request, gen)
        return lambda out: self._run(gen, render, out)


# ---- the generation driver -------------------------------------------------------------------


async def _drive(gen: _Generation, update: Callable[[_Candidate], Awaitable[None]]) -> bool:
    """Step the candidates, calling update(candidate) for each event; False if cut by a crash."""
    if gen.early is not None:
        for c in gen.candidates:
            c.finish = gen.early
            await update(c)
        return True
    step = 0
    deadline = trio.current_time() + gen.first_delay_s
    while True:
        if step == gen.crash_after:
            return False
        await _wait(gen, deadline, update)
        if gen.done:
            return True
        for c in gen.candidates:
            if c.finish is not None:
                continue
            if c.emitted < len(c.plan):
                c.emitted += 1
            if c.emitted == len(c.plan):
                c.finish = c.end
            await update(c)
        step += 1
        if gen.done:
            return True
        deadline = trio.current_time() + gen.token_delay_s


async def _wait(
    gen: _Generation, deadline: float, update: Callable[[_Candidate], Awaitable[None]]
) -> None:
    """Sleep until the deadline, ending (with an event) every candidate aborted meanwhile."""
    while True:
        changed = gen.changed  # taken before the scan: an abort during it still wakes us
        for c in gen.candidates:
            if c.abort_requested and c.finish is None:
                c.finish = ABORTED
                await update(c)
        if gen.done or trio.current_time() >= deadline:
            return
        with trio.move_on_at(deadline):
            await changed.wait()


def _plan_candidate(
    j: int, params: dict[str, Any], prompt_tokens: int, script: Script
) -> tuple[list[_Token], dict[str, Any]]:
    """The tokens candidate j will emit and the finish_reason after the last one."""
    max_new = params["max_new_tokens"]
    limit = max_new if max_new is not None else max(script.context_length - prompt_tokens, 0)
    min_new = params["min_new_tokens"]
    stops = params["stop"]
    stops = [stops] if isinstance(stops, str) else list(stops or ())
    stop_ids = set(params["stop_token_ids"] or ())
    want = limit if params["ignore_eos"] else max(script.tokens, min_new)
    plan: list[_Token] = []
    text = ""
    for i in range(min(want, limit)):
        w = (i + j) % len(WORDS)
        piece = WORDS[w] if i == 0 else " " + WORDS[w]
        plan.append(_Token(WORD_ID_BASE + w, piece, _logprob(j, i), w))
        text += piece
        if i + 1 >= min_new:
            if WORD_ID_BASE + w in stop_ids:
                return plan, {"type": "stop", "matched": WORD_ID_BASE + w}
            for s in stops:
                if s and s in text:
                    return plan, {"type": "stop", "matched": s}
    if len(plan) >= limit:
        return plan, {"type": "length", "length": limit}
    plan.append(_Token(script.eos_token_id, "", _logprob(j, len(plan)), None))
    return plan, {"type": "stop", "matched": script.eos_token_id}


def _logprob(j: int, i: int) -> float:
    return -round(0.5 / (j + 1) + 0.01 * (i % 4), 6)


def _text(gen: _Generation, c: _Candidate) -> str:
    emitted = c.plan[: c.emitted]
    finish = c.finish or {}
    matched = finish.get("matched") if finish.get("type") == "stop" else None
    if matched is not None and not gen.no_stop_trim and isinstance(matched, int) and emitted:
        emitted = emitted[:-1]  # a matched stop token's text is dropped
    text = "".join(t.text for t in emitted)
    if isinstance(matched, str) and not gen.no_stop_trim:
        pos = text.find(matched)
        if pos != -1:
            text = text[:pos]
    return text


def _logprob_entry(gen: _Generation, lp: float, tid: int, word: int | None) -> list[Any]:
    text = None
    if gen.return_text:
        text = EOS_TEXT if word is None else WORDS[word]
    return [lp, tid, text]


def _native_out(gen: _Generation, c: _Candidate, index: bool) -> dict[str, Any]:
    emitted = c.plan[: c.emitted]
    meta: dict[str, Any] = {
        "id": c.rid,
        "finish_reason": c.finish,
        "prompt_tokens": gen.prompt_tokens,
        "weight_version": gen.weight_version,
        "completion_tokens": c.emitted,
        "cached_tokens": gen.cached_tokens,
        "e2e_latency": round(time.monotonic() - gen.started, 6),
    }
    if gen.return_logprob:
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [
            _logprob_entry(gen, t.logprob, t.id, t.word) for t in emitted
        ]
        if gen.top_logprobs_num > 0:
            meta["input_top_logprobs"] = []
            meta["output_top_logprobs"] = [_top(gen, t) for t in emitted]
    out = {"text": _text(gen, c), "output_ids": [t.id for t in emitted], "meta_info": meta}
    if index:
        out["index"] = c.index
    return out


def _top(gen: _Generation, t: _Token) -> list[list[Any]]:
    entries = [_logprob_entry(gen, t.logprob, t.id, t.word)]
    base = t.word if t.word is not None else 0
    for k in range(1, gen.top_logprobs_num):
        w = (base + k) % len(WORDS)
        entries.append(_logprob_entry(gen, round(t.logprob - k, 6), WORD_ID_BASE + w, w))
    return entries


class _NativeRender:
    def __init__(self, gen: _Generation) -> None:
        self.gen = gen

    def event(self, c: _Candidate) -> bytes:
        return _sse(_native_out(self.gen, c, len(self.gen.candidates) > 1))

    def tail(self) -> bytes:
        return _DONE

    def final(self) -> _Reply:
        gen = self.gen
        for c in gen.candidates:
            finish = c.finish or {}
            status = finish.get("status_code")
            if status == 400:  # SGLang raises ValueError for a 400 abort of a non-streaming call
                return _native_error(finish["message"])
            if status in (500, 503):  # ... and HTTPException for a scheduler-side 500/503
                return _flat(status, finish["message"], str(status))
        outs = [_native_out(gen, c, False) for c in gen.candidates]
        return _json(200, outs if len(outs) > 1 else outs[0])


class _OpenAIRender:
    def __init__(
        self, chat: bool, payload: dict[str, Any], request: dict[str, Any], gen: _Generation
    ) -> None:
        self.chat = chat
        self.gen = gen
        self.model = payload.get("model") if isinstance(payload.get("model"), str) else "default"
        options = payload.get("stream_options")
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True
        prefix = "chatcmpl" if chat else "cmpl"
        self.id = request["rid"] if request["rid"] is not None else f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.sent: dict[int, str] = {}
        # Chat `logprobs: true`: OpenAI's {"content": [{token, logprob, bytes, top_logprobs}]}.
        self.logprobs = chat and payload.get("logprobs") is True

    def _base(self, stream: bool) -> dict[str, Any]:
        kind = "chat.completion" if self.chat else "text_completion"
        if self.chat and stream:
            kind = "chat.completion.chunk"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def _choice(
        self, index: int, text: str | None, finish: dict[str, Any] | None, *, stream: bool
    ) -> dict[str, Any]:
        """A choice in SGLang's field order: chat `delta` (stream) or `message`, else `text`."""
        choice: dict[str, Any] = {"index": index}
        if not self.chat:
            choice["text"] = text or ""
        elif stream:
            role = "assistant" if text == "" and finish is None else None
            choice["delta"] = _message(role, text)
        else:
            choice["message"] = _message("assistant", text)
        choice["logprobs"] = None
        choice["finish_reason"] = finish["type"] if finish else None
        choice["matched_stop"] = finish.get("matched") if finish else None
        return choice

    def _chunk(
        self, choices: list[dict[str, Any]], usage: Any = None, cid: str | None = None
    ) -> bytes:
        """A stream chunk; `cid`: the candidate's id, which SGLang writes as the chunk's `id`
        (`meta_info.id`: the re-id'd candidate when n > 1)."""
        chunk = {**self._base(True), "choices": choices, "usage": usage}
        if cid is not None:
            chunk["id"] = cid
        return _sse(chunk)

    def _usage(self) -> dict[str, Any]:
        gen = self.gen
        completion = sum(c.emitted for c in gen.candidates)
        return {"prompt_tokens": gen.prompt_tokens, "completion_tokens": completion,
                "total_tokens": gen.prompt_tokens + completion, "prompt_tokens_details": None,
                "reasoning_tokens": 0}  # fmt: skip

    def event(self, c: _Candidate) -> bytes:
        out = b""
        if c.index not in self.sent:
            self.sent[c.index] = ""
            if self.chat:  # the role chunk: content "" and no finish_reason
                out += self._chunk([self._choice(c.index, "", None, stream=True)], cid=c.rid)
        early = self.gen.early
        if early is not None and c.finish is early:
            status = early["status_code"]
            error = _flat_body(status, early["message"], _openai_type(status))
            return out + _sse({"error": error})
        text = _text(self.gen, c)
        delta = text[len(self.sent[c.index]) :] if text.startswith(self.sent[c.index]) else ""
        self.sent[c.index] = text
        if delta:
            out += self._chunk([self._choice(c.index, delta, None, stream=True)], cid=c.rid)
        return out

    def tail(self) -> bytes:
        out = b""
        if self.gen.early is None:
            for c in self.gen.candidates:
                out += self._chunk([self._choice(c.index, None, c.finish, stream=True)], cid=c.rid)
            if self.include_usage:
                out += self._chunk([], self._usage())
        return out + _DONE

    def final(self) -> _Reply:
        gen = self.gen
        if gen.early is not None:
            status = gen.early["status_code"]
            return _flat(status, gen.early["message"], _openai_type(status))
        choices = [
            self._choice(c.index, _text(gen, c), c.finish or ABORTED, stream=False)
            for c in gen.candidates
        ]
        if self.logprobs:
            for choice, c in zip(choices, gen.candidates, strict=True):
                choice["logprobs"] = {
                    "content": [
                        {"token": t.text, "logprob": t.logprob, "bytes": None, "top_logprobs": []}
                        for t in c.plan[: c.emitted]
                    ]
                }
        body = {**self._base(False), "choices": choices, "usage": self._usage()}
        if self.chat:
            body["metadata"] = {"weight_version": gen.weight_version}
        return _json(200, body)


# ---- request parsing and SGLang's checks -------------------------------------------------------


NOT_GENERATION = "This model does not appear to be a generation model."
NOT_EMBEDDING = (
    "This model does not appear to be an embedding model by default. Please add "
    "`--is-embedding` when launching the server or try another model."
)


def embedding_of(item: str | list[int], dim: int) -> list[float]:
    """The fake's vector for one input: deterministic, in [-1, 1), from a hash of it."""
    seed = orjson.dumps(item)
    out: list[float] = []
    counter = 0
    while len(out) < dim:
        digest = hashlib.sha256(seed + counter.to_bytes(4, "big")).digest()
        out += [b / 128.0 - 1.0 for b in digest]
        counter += 1
    return out[:dim]


def relevance_of(query: str, document: str) -> float:
    """The fake's rerank score: the share of the query's words in the document, plus a
    small hash of the pair so that no two documents tie."""
    words = set(query.lower().split())
    shared = len(words & set(document.lower().split())) / max(len(words), 1)
    tie = hashlib.sha256(f"{query}\0{document}".encode()).digest()[0] / 1e4
    return round(shared + tie, 6)


def _embedding_inputs(value: Any) -> list[str | list[int]]:
    """EmbeddingRequest.input: a string, strings, token ids or lists of token ids."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return list(value)
        if all(_is_int(v) for v in value):
            return [value]
        if all(isinstance(v, list) and v and all(_is_int(t) for t in v) for v in value):
            return list(value)
    raise _field_error("input", "string or list")


def _parse_object(raw: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _Validation(
            f"[{{'type': 'json_invalid', 'loc': ('body', {exc.pos}), 'msg': 'JSON decode error', "
            f"'input': {{}}, 'ctx': {{'error': {exc.msg!r}}}}}]"
        ) from None
    if not isinstance(payload, dict):
        raise _Validation(
            "[{'type': 'dict_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary'}]"
        )
    return payload


def _message(role: str | None, content: str | None) -> dict[str, Any]:
    return {"role": role, "content": content, "reasoning_content": None, "tool_calls": None}


def _field_error(name: str, want: str) -> _Validation:
    return _Validation(
        f"[{{'type': 'value_error', 'loc': ('body', '{name}'), "
        f"'msg': 'Input should be a valid {want}'}}]"
    )


def _parse_generate(payload: dict[str, Any]) -> dict[str, Any]:
    """GenerateReqInput's field types (what pydantic checks before any SGLang code runs)."""
    text = payload.get("text")
    if text is not None and not isinstance(text, str | list):
        raise _field_error("text", "string")
    input_ids = payload.get("input_ids")
    if input_ids is not None and not (
        isinstance(input_ids, list) and all(_is_int(t) or isinstance(t, list) for t in input_ids)
    ):
        raise _field_error("input_ids", "list")
    if payload.get("input_embeds") is not None:
        raise _field_error("input_embeds", "none")  # not supported by the fake
    sampling = payload.get("sampling_params")
    if sampling is None:
        sampling = {}
    if not isinstance(sampling, dict):
        raise _field_error("sampling_params", "dictionary")  # a list is a batch: not supported
    request = {"text": text, "input_ids": input_ids, "sampling_params": sampling}
    for name in ("stream", "return_logprob", "return_text_in_logprobs"):
        value = payload.get(name)
        if value is not None and not isinstance(value, bool):
            raise _field_error(name, "boolean")
        request[name] = bool(value)
    top = payload.get("top_logprobs_num")
    if top is not None and not _is_int(top):
        raise _field_error("top_logprobs_num", "integer")
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise _field_error("top_logprobs_num", f"integer in [0, {MAX_TOP_LOGPROBS}]")
    request["top_logprobs_num"] = top or 0
    for name in ("rid", "lora_path"):
        value = payload.get(name)
        if value is not None and not isinstance(value, str):
            raise _field_error(name, "string")  # lists are for batches: not supported
        request[name] = value
    return request


def _parse_openai(chat: bool, payload: dict[str, Any], served_name: str) -> dict[str, Any]:
    """ChatCompletionRequest / CompletionRequest, mapped to a generate request as SGLang does."""
    if chat:
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _field_error("messages", "list")
        words = 0
        for message in messages:
            if not isinstance(message, dict):
                raise _field_error("messages", "dictionary")
            content = message.get("content")
            parts = content if isinstance(content, list) else [content]
            for part in parts:
                text = part.get("text") if isinstance(part, dict) else part
                words += len(text.split()) if isinstance(text, str) else 0
        prompt = " ".join(["w"] * words)
        cap = payload.get("max_completion_tokens") or payload.get("max_tokens")
    else:
        prompt = payload.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise _field_error("prompt", "string")
        cap = payload.get("max_tokens", COMPLETIONS_MAX_TOKENS)
    for name in ("n", "top_k", "min_tokens", "seed"):
        value = payload.get(name)
        if value is not None and not _is_int(value):
            raise _field_error(name, "integer")
    if cap is not None and not _is_int(cap):
        raise _field_error("max_tokens", "integer")
    model = payload.get("model")
    lora = payload.get("lora_path")
    if lora is None and isinstance(model, str) and model.startswith(served_name + ":"):
        lora = model[len(served_name) + 1 :]  # SGLang's base-model:adapter syntax
    if lora is not None and not isinstance(lora, str):
        raise _field_error("lora_path", "string")
    sampling: dict[str, Any] = {"max_new_tokens": cap}
    mapped = {
        "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
        "min_tokens": "min_new_tokens", "stop": "stop", "stop_token_ids": "stop_token_ids",
        "n": "n", "presence_penalty": "presence_penalty",
        "frequency_penalty": "frequency_penalty", "repetition_penalty": "repetition_penalty",
        "logit_bias": "logit_bias", "seed": "sampling_seed", "ignore_eos": "ignore_eos",
        "no_stop_trim": "no_stop_trim", "skip_special_tokens": "skip_special_tokens",
        "regex": "regex", "ebnf": "ebnf", "json_schema": "json_schema",
    }  # fmt: skip
    for public, internal in mapped.items():
        if payload.get(public) is not None:
            sampling[internal] = payload[public]
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _field_error("stream", "boolean")
    rid = payload.get("rid")
    return {
        "text": prompt, "input_ids": None, "sampling_params": sampling, "stream": bool(stream),
        "return_logprob": False, "return_text_in_logprobs": False, "top_logprobs_num": 0,
        "rid": rid if isinstance(rid, str) else None, "lora_path": lora,
    }  # fmt: skip


def _check_lora(lora: str | None, script: Script) -> None:
    if lora is None:
        return
    if not script.lora_adapters:
        raise _Value("LoRA is not enabled. Please set `--enable-lora` to enable LoRA.")
    if lora not in script.lora_adapters:
        loaded = dict.fromkeys(script.lora_adapters).keys()
        raise _Value(
            f"The following requested LoRA adapters are not loaded: {lora}\n"
            f"Loaded adapters: {loaded}."
        )


def _check_context(prompt_tokens: int, max_new: Any, script: Script) -> None:
    ctx = script.context_length
    if prompt_tokens >= ctx:
        raise _Value(
            f"The input ({prompt_tokens} tokens) is longer than the model's context length "
            f"({ctx} tokens)."
        )
    if _is_int(max_new) and max_new + prompt_tokens >= ctx:
        raise _Value(
            f"Requested token count exceeds the model's maximum context length of {ctx} tokens. "
            f"You requested a total of {max_new + prompt_tokens} tokens: {prompt_tokens} tokens "
            f"from the input messages and {max_new} tokens for the completion. Please reduce the "
            "number of tokens in the input messages or the completion to fit within the limit."
        )


def _verify_sampling(sampling: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """SamplingParams(**sampling), __post_init__ and verify(vocab_size)."""
    unknown = set(sampling) - set(_SAMPLING_DEFAULTS)
    if unknown:
        raise _Type(f"Unexpected keyword argument {sorted(unknown)[0]!r}")
    p = dict(_SAMPLING_DEFAULTS)
    for key, value in sampling.items():
        if value is not None or key in _OPTIONAL:
            p[key] = value
    numbers = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty",
               "presence_penalty", "repetition_penalty", "min_new_tokens", "n")  # fmt: skip
    for key in numbers:
        if not isinstance(p[key], int | float):
            raise _Type(f"'<' not supported between instances of '{type(p[key]).__name__}'")
    if p["max_new_tokens"] is not None and not isinstance(p["max_new_tokens"], int | float):
        raise _Type("max_new_tokens must be a number")
    if not _is_int(p["n"]) or not 1 <= p["n"] <= MAX_CANDIDATES:
        raise _Value(f"fake SGLang: n must be an integer in [1, {MAX_CANDIDATES}], got {p['n']}.")
    if 0 <= p["temperature"] < _SAMPLING_EPS:  # greedy
        p["temperature"], p["top_k"] = 1.0, 1
    if p["top_k"] == -1:
        p["top_k"] = 1 << 30
    t = p["temperature"]
    if not math.isfinite(t) or t < 0.0:
        raise _Value(f"temperature must be a non-negative finite number, got {t}.")
    if not 0.0 < p["top_p"] <= 1.0:
        raise _Value(f"top_p must be in (0, 1], got {p['top_p']}.")
    if not 0.0 <= p["min_p"] <= 1.0:
        raise _Value(f"min_p must be in [0, 1], got {p['min_p']}.")
    if p["top_k"] < 1:
        raise _Value(f"top_k must be -1 (disable) or at least 1, got {p['top_k']}.")
    if not -2.0 <= p["frequency_penalty"] <= 2.0:
        raise _Value(f"frequency_penalty must be in [-2, 2], got {p['frequency_penalty']}.")
    if not -2.0 <= p["presence_penalty"] <= 2.0:
        raise _Value(f"presence_penalty must be in [-2, 2], got {p['presence_penalty']}.")
    if not 0.0 < p["repetition_penalty"] <= 2.0:
        raise _Value(
            "repetition_penalty must be in (0, 2] (1.0 = no penalty), "
            f"got {p['repetition_penalty']}."
        )
    if not 0 <= p["min_new_tokens"]:
        raise _Value(f"min_new_tokens must be in [0, max_new_tokens], got {p['min_new_tokens']}.")
    max_new = p["max_new_tokens"]
    if max_new is not None:
        if max_new < 0:
            raise _Value(f"max_new_tokens must be at least 0, got {max_new}.")
        if not p["min_new_tokens"] <= max_new:
            raise _Value(
                f"min_new_tokens must be in [0, max_new_tokens({max_new})], got "
                f"{p['min_new_tokens']}."
            )
    bias = p["logit_bias"]
    if bias is not None:
        if not isinstance(bias, dict):
            raise _Type("logit_bias must be a dict")
        for token_id in bias:
            try:
                tid = int(token_id)
            except ValueError:
                raise _Value(f"invalid literal for int() with base 10: {token_id!r}") from None
            if not 0 <= tid < vocab_size:
                raise _Value(f"logit_bias must has keys in [0, {vocab_size - 1}], got {token_id}.")
    if sum(p[g] is not None for g in ("json_schema", "regex", "ebnf")) > 1:
        raise _Value("Only one of regex, json_schema, or ebnf can be set.")
    stop = p["stop"]
    if stop is not None and not (
        isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise _Type("stop must be a string or a list of strings")
    ids = p["stop_token_ids"]
    if ids is not None and not (isinstance(ids, list) and all(_is_int(i) for i in ids)):
        raise _Type("stop_token_ids must be a list of integers")
    return p


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---- bytes on the wire -----------------------------------------------------------------------

_SSE_HEADERS = [(b"server", b"uvicorn"), (b"content-type", _SSE)]


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS) + b"\n\n"


def _json(status: int, obj: Any) -> _Reply:
    return _Reply(status, orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))


def _detail(status: int, detail: str) -> _Reply:
    return _json(status, {"detail": detail})


def _native_error(message: str) -> _Reply:
    return _json(400, {"error": {"message": message}})


def _flat_body(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def _flat(status: int, message: str, kind: str) -> _Reply:
    return _json(status, _flat_body(status, message, kind))


def _openai_type(status: int) -> str:
    return {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}.get(
        status, str(status)
    )


def _native_failure(status: int) -> _Reply:
    if status == 400:
        return _native_error(f"scripted failure ({status})")
    if status == 500:
        return _Reply(500, b"Internal Server Error", _TEXT)
    return _flat(status, f"scripted failure ({status})", str(status))


def _tool_answer(
    payload: dict[str, Any], request: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> Any:
    """A chat answer calling `calls` (ids call_0, ...), as SGLang's tool-call parser writes
    it: a whole message, or a stream with one delta per call, `finish_reason: tool_calls`."""
    rid = request["rid"] or f"chatcmpl-{uuid.uuid4().hex}"
    model = payload.get("model", "default")
    tcs = [
        {"id": f"call_{i}", "index": i, "type": "function",
         "function": {"name": name, "arguments": orjson.dumps(args).decode()}}
        for i, (name, args) in enumerate(calls)
    ]  # fmt: skip
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    base = {"id": rid, "created": int(time.time()), "model": model}
    if not request["stream"]:
        message = {
            "role": "assistant",
            "content": None,
            "reasoning_content": None,
            "tool_calls": [{k: v for k, v in tc.items() if k != "index"} for tc in tcs],
        }
        doc = {**base, "object": "chat.completion", "usage": usage,
               "choices": [{"index": 0, "message": message, "logprobs": None,
                            "finish_reason": "tool_calls", "matched_stop": None}]}  # fmt: skip
        return _Reply(200, orjson.dumps(doc))

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                  "matched_stop": None}  # fmt: skip
        return _sse({**base, "object": "chat.completion.chunk", "choices": [choice], "usage": None})

    body = chunk({"role": "assistant", "content": ""})
    body += b"".join(chunk({"tool_calls": [tc]}) for tc in tcs)
    body += chunk({}, "tool_calls")
    options = payload.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        body += _sse({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    return _stream_then(body + _DONE)


def _stream_then(body: bytes | None) -> Work:
    """A 200 event stream that only carries `body` (None: cut the connection after the head)."""

    async def work(out: plainhttp.Responder) -> bool:
        await out.start(200, _SSE_HEADERS)
        if body is None:
            return False
        await out.send_data(body)
        await out.end()
        return True

    return work


async def _send(out: plainhttp.Responder, reply: _Reply) -> None:
    """A whole response (no body for HEAD)."""
    headers = [(b"server", b"uvicorn")]
    if reply.content_type is not None:
        headers.append((b"content-type", reply.content_type))
    if reply.status == 405:
        headers.append((b"allow", b"GET, POST, PUT"))
    await out.send(reply.status, [*headers, *reply.headers], reply.body)


def _render_error(status: int) -> tuple[plainhttp.Headers, bytes]:
    """The answer to a malformed request (its status) or to a bug in the fake (500)."""
    reply = _detail(status, HTTPStatus(status).phrase)
    return [(b"server", b"uvicorn"), (b"content-type", _JSON)], reply.body
