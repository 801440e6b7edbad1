"""Type stubs for edgegw's Rust core (rust/src/lib.rs), checked against the built module by
`python -m mypy.stubtest edgegw._core` (.ci/run). Every class but the three exceptions is a pyo3
class: none can be subclassed (@final), only those with a `__new__` below can be constructed
from Python, and their attributes are read-only (properties)."""

from collections.abc import Mapping, Sequence
from typing import Any, Self, final

__all__ = [
    "RequestError",
    "UpstreamProtocolError",
    "ParsedRequest",
    "SseEvent",
    "SseSplitter",
    "ResponseParser",
    "RequestBody",
    "ResponseFeed",
    "ResponseHead",
    "parse_chat_request",
    "parse_completions_request",
    "PassthroughRequest",
    "parse_passthrough",
    "RetrievalRequest",
    "parse_embeddings_request",
    "parse_rerank_request",
    "MAX_JSON_DEPTH",
    "gunzip_capped",
    "without_usage",
    "decode_otlp_metrics",
    "encode_otlp_metrics_response",
    "OTLP_MAX_DECODED_BYTES",
    "OTLP_MAX_DATA_POINTS",
    "OTLP_MAX_ATTRIBUTES",
    "HeadInfo",
    "screen_request_head",
    "MAX_HEADER_LINES",
    "PolicyError",
    "GuardPolicy",
    "detect_sensitive",
    "redact_text",
    "redact_json",
    "error_codes",
    "encode_otlp_batch",
    "read_traceparent",
    "encode_otlp_trace",
    "TraceRecord",
    "Span",
    "ConnectHook",
    "SpanQueue",
    "encode_otlp_spans",
    "TRACE_MAX_EVENTS",
    "TRACE_MAX_CONTENT_CHARS",
    "TRACE_MAX_ATTRIBUTE_CHARS",
    "Ledger",
    "rate_limit_headers",
    "duration_text",
    "CONCURRENCY_RETRY_S",
    "response_head",
    "upstream_request",
    "http_date",
    "imf_fixdate",
    "CoreRelay",
    "RelayEnd",
]

MAX_JSON_DEPTH: int

class RequestError(ValueError):
    """A client request the gateway refuses (message in args[0])."""

    status: int
    type: str
    code: str
    param: str | None

class UpstreamProtocolError(Exception):
    """An upstream response that breaks HTTP/1.1 or SSE framing (message in args[0]);
    raised by ResponseParser and SseSplitter, never by the request parsers."""

    code: str  # upstream_event_too_large | bad_upstream_response | upstream_connection_lost

@final
class ParsedRequest:
    @property
    def endpoint(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def stream(self) -> bool: ...
    @property
    def include_usage(self) -> bool: ...
    @property
    def n(self) -> int: ...
    @property
    def best_of(self) -> int | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def has_images(self) -> bool: ...
    # A message carries `reasoning_content` or `reasoning` (null included).
    @property
    def has_reasoning(self) -> bool: ...
    @property
    def fields(self) -> tuple[str, ...]: ...
    @property
    def features(self) -> tuple[str, ...]: ...
    # Of `fields`: those a remote OpenAI-compatible provider cannot honour (SIE extensions),
    # and those a local worker cannot (OpenAI fields outside the SIE contract). Sorted.
    # `features` are refused apart.
    @property
    def remote_unsupported(self) -> tuple[str, ...]: ...
    @property
    def local_unsupported(self) -> tuple[str, ...]: ...
    # The first value the SIE contract refuses where OpenAI's schema accepts it (65 tools, a
    # custom tool, an audio part, ...), for a local target to raise; None when there is none.
    @property
    def local_rejection(self) -> RequestError | None: ...
    @property
    def tool_names(self) -> tuple[str, ...]: ...
    # The optional message members the messages carry, by name, sorted: the response members
    # the SDKs send back (`annotations`, `parsed`, `tool_calls.index`,
    # `tool_calls.function.parsed_arguments`), `refusal`, `reasoning_content`, `reasoning`.
    @property
    def message_members(self) -> tuple[str, ...]: ...
    @property
    def body(self) -> bytes: ...
    # `tools`: tool objects' JSON, comma-separated, appended to the body's `tools` array.
    # `ask_usage`: a stream that did not ask for usage asks for it.
    # `keep`: the optional message members the target takes; the others, and null members
    # but `content`, are left out of the messages. None: messages as sent.
    def upstream_body(
        self,
        model: str,
        omit: list[str] | tuple[str, ...] = ...,
        *,
        rename: Sequence[tuple[str, str]] = ...,
        tools: bytes | None = ...,
        ask_usage: bool = ...,
        keep: Sequence[str] | None = ...,
    ) -> bytes: ...

def parse_chat_request(body: bytes) -> ParsedRequest: ...
def parse_completions_request(body: bytes) -> ParsedRequest: ...

@final
class SseEvent:
    @property
    def event(self) -> str | None: ...
    @property
    def data(self) -> bytes: ...
    @property
    def id(self) -> str | None: ...
    @property
    def retry(self) -> int | None: ...
    @property
    def is_done(self) -> bool: ...

@final
class SseSplitter:
    def __new__(cls, max_event_bytes: int = ...) -> Self: ...  # default 1 MiB
    def feed(self, chunk: bytes) -> list[SseEvent]: ...
    # For a relay: (events completed, whether [DONE] was one, the data of the events a usage
    # tap reads: a non-null usage, tool calls, a string finish reason); no object for others.
    def feed_tapped(self, chunk: bytes) -> tuple[int, bool, list[bytes]]: ...
    def finish(self) -> bool: ...
    # Bytes fed after the end of the last complete block (the line ending of the last blank
    # line): a relay holds these back so that what it sends is whole events. The LF of a
    # CRLF whose CR ended a block is not counted (it goes out with the next piece); a BOM
    # belongs to the first block; finish() leaves it unchanged.
    @property
    def pending(self) -> int: ...

@final
class ResponseHead:
    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> list[tuple[bytes, bytes]]: ...  # names lower-cased, in order

@final
class ResponseFeed:
    @property
    def head(self) -> ResponseHead | None: ...  # the final head, on the feed that completed it
    @property
    def body(self) -> bytes: ...
    @property
    def done(self) -> bool: ...

@final
class ResponseParser:
    def __new__(cls, head_request: bool = False) -> Self: ...
    def feed(self, data: bytes | bytearray) -> ResponseFeed: ...
    def feed_eof(self) -> ResponseFeed: ...
    @property
    def reusable(self) -> bool: ...
    @property
    def done(self) -> bool: ...

# A request's body framing after its screened head; malformed chunks raise RequestError
# (400 invalid_request). `take_trailing()`: the bytes after the body (a pipelined request).
@final
class RequestBody:
    def __new__(cls, content_length: int | None, chunked: bool) -> Self: ...
    def feed(self, data: bytes | bytearray) -> ResponseFeed: ...
    @property
    def done(self) -> bool: ...
    def take_trailing(self) -> bytes: ...

@final
class PassthroughRequest:
    @property
    def model(self) -> str | None: ...
    @property
    def stream(self) -> bool: ...
    def with_model(self, model: str) -> bytes: ...

def parse_passthrough(body: bytes) -> PassthroughRequest: ...

# /v1/embeddings and /v1/rerank (rust/src/request/retrieval.rs).
@final
class RetrievalRequest:
    @property
    def model(self) -> str: ...
    @property
    def items(self) -> int: ...
    @property
    def single(self) -> bool: ...
    @property
    def tokens(self) -> bool: ...

def parse_embeddings_request(
    body: bytes, max_inputs: int, max_input_bytes: int
) -> RetrievalRequest: ...
def parse_rerank_request(
    body: bytes, max_documents: int, max_input_bytes: int
) -> RetrievalRequest: ...

# OTLP metrics push (rust/src/otlp.rs).
OTLP_MAX_DECODED_BYTES: int
OTLP_MAX_DATA_POINTS: int
OTLP_MAX_ATTRIBUTES: int

def gunzip_capped(data: bytes, cap: int) -> bytes: ...

# Whole SSE events written again without the usage the client did not ask for.
def without_usage(data: bytes) -> bytes: ...

# Points by kind: gauge/sum (attributes, value); histogram (attributes, count, sum,
# bucket_counts, explicit_bounds); exponential_histogram/summary (attributes,).
_OtlpPoint = (
    tuple[dict[str, str], int | float | None]
    | tuple[dict[str, str], int, float | None, list[int], list[float]]
    | tuple[dict[str, str]]
)
# (name, kind, temporality, is_monotonic, points)
_OtlpMetric = tuple[str, str, int, bool, list[_OtlpPoint]]

def decode_otlp_metrics(data: bytes) -> list[tuple[str | None, list[_OtlpMetric]]]: ...
def encode_otlp_metrics_response(rejected_data_points: int, error_message: str) -> bytes: ...

# Request heads (rust/src/head.rs).
MAX_HEADER_LINES: int

@final
class HeadInfo:
    @property
    def method(self) -> bytes: ...
    @property
    def target(self) -> bytes: ...
    @property
    def http_version(self) -> bytes: ...  # b"1.0" or b"1.1"
    @property
    def content_length(self) -> int | None: ...
    @property
    def chunked(self) -> bool: ...
    @property
    def keep_alive(self) -> bool: ...  # RFC 9112 §9.3, from the version and Connection
    @property
    def expect_continue(self) -> bool: ...  # Expect: 100-continue, HTTP/1.1 only
    @property
    def upgrade(self) -> bool: ...  # an Upgrade field is present
    @property
    def headers(self) -> list[tuple[bytes, bytes]]: ...  # (lower-cased name, value), in order

# `head`: the request line to the CRLF CRLF that ends the head, included. Raises
# RequestError: 431 head_too_large | too_many_headers; 400 incomplete_head | bad_line_ending |
# bad_request_line | obs_fold | bad_header_name | bad_header_value | conflicting_framing |
# bad_content_length | bad_transfer_encoding | missing_host | duplicate_host.
def screen_request_head(head: bytes | bytearray, max_bytes: int) -> HeadInfo: ...

# Every code RequestError and UpstreamProtocolError carry, with the status each is answered
# with (an upstream's fault: 502), sorted by code (rust/src/error.rs `all_codes`).
def error_codes() -> list[tuple[str, int]]: ...

# The head of a response to the client (rust/src/respond.rs): (head, framing 0 length,
# 1 chunked, 2 to the close, 3 none; Content-Length; keep-alive). RuntimeError for a header
# the server will not send (CR, LF or NUL; Transfer-Encoding; a Content-Length not a count).
def response_head(
    status: int,
    reason: bytes,
    headers: Any,
    http11: bool,
    head_request: bool,
    keep_alive: bool,
) -> tuple[bytes, int, int | None, bool]: ...

# An upstream request in one buffer (rust/src/respond.rs): the request line, host, the
# headers, `framing` (a header line with its CRLF, or b""), the user agent, then `body`.
# ValueError ("invalid upstream path", "invalid header") for a byte that could split it.
def upstream_request(
    method: bytes,
    target: bytes,
    host: bytes,
    headers: Any,
    framing: bytes,
    user_agent: bytes,
    body: bytes,
) -> bytes: ...
def http_date() -> bytes: ...
def imf_fixdate(unix: int) -> bytes: ...

# Tenants' rate limits in one process (rust/src/limits.rs). Headers: OpenAI's x-ratelimit-*
# (limit, remaining, reset) of the tightest requests and tokens buckets.
_RateHeaders = tuple[tuple[bytes, bytes], ...]

@final
class Ledger:
    def __new__(cls) -> Self: ...
    # Charged: (headers, rows held as bits: 1 tenant, 2 key, None); refused, nothing charged:
    # (headers, 0, (row 0 tenant / 1 key, kind "r" | "t" | "c", limit, its wait s, longest s)).
    def admit(
        self,
        tenant: str,
        tenant_limits: object,
        key: str,
        key_limits: object,
        estimate: int,
        now: float,
    ) -> tuple[_RateHeaders, int, tuple[int, str, int, float, float] | None]: ...
    def settle(self, tenant: str, key: str, held: int, estimate: int, used: int) -> None: ...
    def levels(self, name: str) -> tuple[float | None, float | None, int] | None: ...

def rate_limit_headers(
    requests: tuple[float, int] | None, tokens: tuple[float, int] | None
) -> _RateHeaders: ...
def duration_text(seconds: float) -> str: ...

CONCURRENCY_RETRY_S: float

# Guardrails (rust/src/guard.rs).
class PolicyError(ValueError):
    """A guardrails policy that cannot be loaded or cannot decide (message in args[0])."""

    kind: str  # compile | input | eval | decision

@final
class GuardPolicy:
    def __new__(cls, modules: Sequence[tuple[str, str]]) -> Self: ...
    @property
    def empty(self) -> bool: ...
    # (action, message) for the input document (JSON); action: allow|block|redact|warn.
    def evaluate(self, input: bytes) -> tuple[str, str]: ...

# The built-in detectors: api_key, bearer_token, credit_card (Luhn), email (detect-only).
def detect_sensitive(text: str) -> list[str]: ...
def redact_text(text: str) -> str: ...
def redact_json(body: bytes) -> bytes: ...

# OTLP trace export (rust/src/otlp_trace.rs). A span: (name, (trace id, span id, parent
# span id or None), remote parent, kind, attributes, events (name, attributes, time ns) or
# None, (start ns, end ns), error, tracestate).
_OtlpSpan = tuple[
    str,
    tuple[int, int, int | None],
    bool,
    int,
    dict[str, Any],
    list[tuple[str, dict[str, Any], int]] | None,
    tuple[int, int],
    bool,
    str,
]

def encode_otlp_spans(
    resource: dict[str, Any], scope_name: str, scope_version: str, spans: list[_OtlpSpan]
) -> bytes: ...

# A span of one trace: (name, span id, parent span id or None, remote parent, kind,
# attributes, events or None, start ns, end ns, error).
_OtlpTraceSpan = tuple[
    str,
    int,
    int | None,
    bool,
    int,
    dict[str, Any],
    list[tuple[str, dict[str, Any], int]] | None,
    int,
    int,
    bool,
]

def encode_otlp_trace(trace_id: int, trace_state: str, spans: list[_OtlpTraceSpan]) -> bytes: ...
def encode_otlp_batch(
    resource: dict[str, Any], scope_name: str, scope_version: str, entries: list[bytes]
) -> bytes: ...

# A client's traceparent by the W3C propagator's rules: (trace id, span id, sampled, the
# tracestate value), or None.
def read_traceparent(
    headers: Sequence[tuple[bytes, bytes]],
) -> tuple[int, int, bool, bytes | None] | None: ...

# Tracing's limits (rust/src/trace.rs): events a span keeps, characters of a prompt or
# choice kept (TELEMETRY_TRACING_CONTENT), characters of a client's attribute value kept.
TRACE_MAX_EVENTS: int
TRACE_MAX_CONTENT_CHARS: int
TRACE_MAX_ATTRIBUTE_CHARS: int

@final
class SpanQueue:
    # Ended spans waiting for export, as entries of a batch, a trace's after another.
    limit: int
    pending: int
    def __new__(cls, limit: int = 2048, batch: int = 512) -> Self: ...
    @property
    def exported(self) -> int: ...
    @property
    def batch(self) -> int: ...
    @property
    def dropped(self) -> dict[str, int]: ...  # queue_full, export_failed
    def full(self) -> bool: ...
    # The next batch's ExportTraceServiceRequest and its span count; None when none waits.
    def take(
        self, resource: dict[str, Any], scope_name: str, scope_version: str
    ) -> tuple[bytes, int] | None: ...
    def done(self, n: int, ok: bool) -> None: ...
    def clear(self) -> None: ...

@final
class Span:
    # A handle on one span of a TraceRecord; a context manager ending it with its block.
    @property
    def span_id(self) -> int: ...
    def set_attribute(self, key: str, value: Any) -> None: ...
    def set_attributes(self, attributes: Mapping[str, Any]) -> None: ...
    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None: ...
    def fail(self, e: BaseException | str) -> None: ...
    def end(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, _kind: object, e: BaseException | None, _tb: object) -> None: ...

@final
class ConnectHook:
    # UpstreamPool's on_connect for one attempt: a `connect` child of its span.
    def __call__(self, started_ns: int, error: BaseException | None = None) -> None: ...

@final
class TraceRecord:
    # One request's trace: its spans, by index (`start`, `open_server` return it; the hooks
    # return a `Span`). The spans it makes get their ids from `seed`. With a queue, the
    # spans ended go there once the first span (the server span) has ended; without one,
    # `take_ended` returns them.
    def __new__(
        cls,
        trace_id: int,
        trace_state: str,
        seed: int = 0,
        queue: SpanQueue | None = None,
        content: bool = False,  # TELEMETRY_TRACING_CONTENT
    ) -> Self: ...
    def start(
        self,
        name: str,
        span_id: int,
        parent_id: int | None,
        remote_parent: bool,
        kind: int,
        start_ns: int,
        attrs: Mapping[str, Any] | None = None,
    ) -> int: ...
    def open_server(
        self, method: str, path: str, request_id: str, parent_id: int | None
    ) -> int: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def server(self) -> Span: ...
    def span(self, name: str, **attributes: Any) -> Span: ...
    def authenticate(self) -> Span: ...
    def route_attempt(self, provider: str, model: str) -> Span: ...
    def tool(self, name: str, call_id: str) -> Span: ...  # an MCP tool execution
    def fallback(self, reason: str, to: str) -> None: ...  # the server span's event
    # An upstream attempt's span, the headers naming it the upstream's parent, its hook.
    def start_client(
        self, name: str, host: str, port: int
    ) -> tuple[Span, list[tuple[bytes, bytes]], ConnectHook]: ...
    def attempt(
        self, method: bytes, target: bytes, host: str, port: int
    ) -> tuple[Span, list[tuple[bytes, bytes]], ConnectHook]: ...
    def attempt_done(self, span: Span, status: int, new_connection: bool) -> None: ...
    def fail(self, span: Span, e: BaseException | str) -> None: ...
    # The `parse` span from start_ns to now, failed with `error`; else, with content, the
    # prompt event.
    def parsed(self, start_ns: int, body: bytes, error: BaseException | None = None) -> None: ...
    def route(
        self,
        start_ns: int,
        model: str,
        target: str | None,
        named: bool,
        error: BaseException | None = None,
    ) -> None: ...
    def generation(
        self,
        *,
        operation: str,
        provider: str,
        model: str,
        response_model: str | None,
        usage: dict[str, Any] | None,
        finish_reasons: Sequence[str],
        ttft_s: float | None,
        choices: Sequence[tuple[int, str, str | None]] | None = None,  # index, text, reason
    ) -> None: ...
    def finish(self, status: int | None, error: str | None = None) -> bool: ...  # batch full
    def set(self, i: int, key: str, value: Any) -> None: ...
    def update(self, i: int, attrs: dict[str, Any]) -> None: ...
    def event(
        self, i: int, name: str, attrs: Mapping[str, Any], time_ns: int, limit: int
    ) -> bool: ...
    def end(self, i: int, end_ns: int, error: bool) -> bool: ...  # the first span ended
    def take_ended(self) -> tuple[bytes, int]: ...

# The relay thread (rust/src/relay_loop.rs): streams handed to it are relayed upstream socket
# to client socket in Rust; `done_fd` turns readable when some ended, `finished()` names them,
# `overdue(now)` names those still for their limit at `now` on the caller's clock (`idle_s`
# reading the upstream, `stall_s` blocked on the client, given to `start` with the hand-over's
# time), each with whether it is the client that stalled; `take(id, parser)` hands one back
# (ended or not) with the upstream framing restored into `parser`. `start` writes `head` (the
# client's, held) with the first events and returns (id, over): over, the stream ended within
# it and is taken back at once, never named by `finished()`. `close()` stops the thread and
# closes its descriptors; after it `take` finds nothing, `start` raises.
@final
class CoreRelay:
    def __new__(cls) -> Self: ...
    def close(self) -> None: ...
    @property
    def done_fd(self) -> int: ...
    def start(
        self,
        upstream_fd: int,
        client_fd: int,
        parser: ResponseParser,
        head: bytes,
        secret: bytes | None,
        hide_usage: bool,
        first: bytes,
        complete: bool,
        now: float,
        idle_s: float,
        stall_s: float,
    ) -> tuple[int, bool]: ...
    def finished(self) -> list[int]: ...
    def overdue(self, now: float) -> list[tuple[int, bool]]: ...
    def take(self, id: int, parser: ResponseParser) -> RelayEnd | None: ...
    def __len__(self) -> int: ...

# A stream taken back: `ended` (whole, its terminator written), or a fault (`code`, `message`:
# the caller writes the error event), or `client_gone`, or `running` (not over, or its last
# bytes not out); its events, `done`, the tapped events' data,
# the client writes' times (seconds from the hand-over) and gap counts (None before a write).
@final
class RelayEnd:
    @property
    def ended(self) -> bool: ...
    @property
    def code(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def client_gone(self) -> bool: ...
    @property
    def running(self) -> bool: ...
    @property
    def events(self) -> int: ...
    @property
    def done(self) -> bool: ...
    @property
    def tapped(self) -> list[bytes]: ...
    @property
    def first_write_s(self) -> float | None: ...
    @property
    def last_write_s(self) -> float | None: ...
    @property
    def gaps(self) -> list[int] | None: ...
    @property
    def gap_total(self) -> float: ...
