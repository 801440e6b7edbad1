//! Tracing's logic, pure: one request's record of its spans (`Record`: the span store, span
//! ids, the hooks of the request path and the names and attributes they write, the GenAI
//! ones among them), the queue of ended spans waiting for export (`Queue`), W3C trace
//! context (`traceparent` read and written) and the attribute rules (a dict's semantics,
//! clipped client values). No pyo3 and no clock: times are given. The binding
//! (trace_binding.rs) converts Python values to these types and back.

use std::borrow::Cow;
use std::collections::VecDeque;

use crate::otlp_trace::{self, Attributes, Event, Key, Span, Value};

/// Lowercase hex digits only (the propagator's `[0-9a-f]`), as a number.
fn lower_hex(digits: &[u8]) -> Option<u128> {
    let mut v: u128 = 0;
    for &d in digits {
        let n = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        v = (v << 4) | u128::from(n);
    }
    Some(v)
}

/// A `traceparent` value by the SDK's W3C propagator: its pattern
/// `^[ \t]*(hex2)-(hex32)-(hex16)-(hex2)(?:(-.*)|[ \t]*)$` (Python's `$`, which also matches
/// before a final newline; `.` any character but a newline) on at most 512 bytes, then
/// its rules: version ff is invalid, version 00 has nothing after the flags, neither id is
/// zero. (trace id, span id, sampled flag).
pub fn parse_traceparent(value: &[u8]) -> Option<(u128, u64, bool)> {
    if value.is_empty() || value.len() > 512 {
        return None;
    }
    let start = value
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(value.len());
    let s = &value[start..];
    if s.len() < 55 || s[2] != b'-' || s[35] != b'-' || s[52] != b'-' {
        return None;
    }
    let version = lower_hex(&s[..2])?;
    let trace_id = lower_hex(&s[3..35])?;
    let span_id = lower_hex(&s[36..52])? as u64;
    let flags = lower_hex(&s[53..55])?;
    let rest = &s[55..];
    let line = rest.strip_suffix(b"\n").unwrap_or(rest);
    let more = if rest.first() == Some(&b'-') {
        if line.contains(&b'\n') {
            return None;
        }
        true
    } else {
        if !line.iter().all(|&b| b == b' ' || b == b'\t') {
            return None;
        }
        false
    };
    if version == 0xff || (version == 0 && more) || trace_id == 0 || span_id == 0 {
        return None;
    }
    Some((trace_id, span_id, flags & 1 == 1))
}

/// The `traceparent` naming span `span_id` of trace `trace_id` as a sampled parent:
/// `00-{trace id}-{span id}-01`.
pub fn traceparent(trace_id: u128, span_id: u64) -> [u8; 55] {
    let mut value = [0u8; 55];
    value[..3].copy_from_slice(b"00-");
    put_hex(trace_id, &mut value[3..35]);
    value[35] = b'-';
    put_hex(u128::from(span_id), &mut value[36..52]);
    value[52..].copy_from_slice(b"-01");
    value
}

/// A trace id as 32 lowercase hex digits (the metrics' exemplars, the access line).
pub fn trace_id_hex(trace_id: u128) -> [u8; 32] {
    let mut hex = [0u8; 32];
    put_hex(trace_id, &mut hex);
    hex
}

pub fn set_value(attrs: &mut Attributes, key: Key, v: Option<Value>) {
    match (attrs.iter().position(|(k, _)| *k == key), v) {
        (Some(i), Some(v)) => attrs[i].1 = v,
        (Some(i), None) => {
            attrs.remove(i);
        }
        (None, Some(v)) => attrs.push((key, v)),
        (None, None) => {}
    }
}

pub fn set_str(attrs: &mut Attributes, key: &'static str, v: &str) {
    set_value(attrs, Cow::Borrowed(key), Some(Value::Str(v.to_owned())));
}

/// An attribute value from a client (a model name): its first MAX_ATTRIBUTE_CHARS
/// characters (edgegw.telemetry.tracing.clip).
pub fn clip(s: &str) -> String {
    clip_to(s, 256)
}

pub fn clip_to(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((end, _)) => s[..end].to_owned(),
        None => s.to_owned(),
    }
}

/// The low `out.len()` hex digits of `v`, lowercase, zero-padded (what `{:032x}` writes,
/// without the formatting machinery: two of these a traced request).
fn put_hex(mut v: u128, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in out.iter_mut().rev() {
        *b = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
}

/// splitmix64's finalizer over the seed's sequence: never 0 (an invalid span id).
pub fn mixed_id(seed: u64, k: u64) -> u64 {
    let mut z = seed.wrapping_add(k.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    if z == 0 {
        1
    } else {
        z
    }
}

// opentelemetry-proto's SpanKind.
pub const INTERNAL: i32 = 1;
pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;
/// Events kept a span (the SDK's default limit).
pub const MAX_EVENTS: usize = 128;
/// TELEMETRY_TRACING_CONTENT: characters kept a prompt or completion event.
pub const MAX_CONTENT_CHARS: usize = 4096;
/// Attributes a server span has room for from the start: its own three, the GenAI ones,
/// the status and error.type (no growth of the list a request).
pub const SERVER_ATTRIBUTES: usize = 16;
/// Attributes an upstream attempt's span has room for: its four, the status and whether
/// it opened its connection, error.type.
pub const CLIENT_ATTRIBUTES: usize = 8;

/// A span index a record does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSuchSpan;

/// Ended spans waiting for export, and the counts of what became of them: shared by every
/// request's record, which writes its spans here as entries of a batch when its server span
/// ends (`Record::export`), and by the export task, which takes them a batch at a time. At
/// most `limit` spans wait (the SDK's OTEL_BSP_MAX_QUEUE_SIZE); past that a trace's spans
/// are dropped and counted. The entries are one buffer, a trace's after another: nothing
/// allocated a request but the buffer's growth.
#[derive(Debug, Default)]
pub struct Queue {
    pub limit: usize,
    /// Spans waiting, taken or not yet.
    pub pending: usize,
    pub exported: u64,
    /// Spans a batch, at most (a trace's spans stay together).
    pub batch: usize,
    /// Spans dropped: no room when their trace ended; a batch the collector did not take.
    pub queue_full: u64,
    pub export_failed: u64,
    buf: Vec<u8>,
    /// Each waiting trace's entries in `buf`: (bytes, spans), in order.
    traces: VecDeque<(usize, usize)>,
}

impl Queue {
    pub fn new(limit: usize, batch: usize) -> Self {
        Queue {
            limit,
            batch,
            ..Queue::default()
        }
    }

    /// Room for `n` more spans (else they are counted dropped).
    fn admit(&mut self, n: usize) -> bool {
        if self.pending + n > self.limit {
            self.queue_full += n as u64;
            return false;
        }
        self.pending += n;
        true
    }

    /// Whether a whole batch waits.
    pub fn full(&self) -> bool {
        self.pending >= self.batch
    }

    /// The next batch, whole traces up to `batch` spans: `write` gets their entries and how
    /// many spans (and makes the export request of them) before they leave the queue; None
    /// when nothing waits.
    pub fn take<R>(&mut self, write: impl FnOnce(&[u8], usize) -> R) -> Option<R> {
        let (mut len, mut n) = (0, 0);
        while n < self.batch {
            let Some((l, k)) = self.traces.pop_front() else {
                break;
            };
            len += l;
            n += k;
        }
        if n == 0 {
            return None;
        }
        self.pending = self.pending.saturating_sub(n);
        let written = write(&self.buf[..len], n);
        self.buf.drain(..len);
        Some(written)
    }

    /// What became of a batch of `n` spans: exported, or dropped (`export_failed`).
    pub fn done(&mut self, n: usize, ok: bool) {
        if ok {
            self.exported += n as u64;
        } else {
            self.export_failed += n as u64;
        }
    }

    /// Forget what waits (not counted).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.traces.clear();
        self.pending = 0;
    }
}

/// One request's trace: its spans as they happen, by index (the server span is 0), and the
/// hooks of the request path, which build their spans' names and attributes here. Times are
/// given (`now_ns()` in the gateway). A span ended (`close`) once the server span has ended
/// is due for export: the hooks that end spans say so, and `export` writes what is due to a
/// queue (`entries` without one).
#[derive(Debug)]
pub struct Record {
    trace_id: u128,
    trace_state: String,
    /// The span ids of `child`: a bijection of (seed, index), so distinct in a record.
    seed: u64,
    /// TELEMETRY_TRACING_CONTENT: the prompt and the answer's choices are recorded (events
    /// of the server span); without it no text of theirs is, whatever the hooks are given.
    content: bool,
    spans: Vec<Span>,
    /// Per span: ended, and whether its entry was taken.
    ended: Vec<bool>,
    taken: Vec<bool>,
}

/// The GenAI semantic-convention attributes of a chat or completions request's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generation<'a> {
    pub operation: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub response_model: Option<&'a str>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub finish_reasons: &'a [String],
    pub ttft_s: Option<f64>,
    /// The answer's text by choice, as the client got it (recorded with `content` only).
    pub choices: &'a [Choice],
}

/// One choice of an answer, for its `gen_ai.choice` event: its index (None: not an int64),
/// its text (the caller keeps at most MAX_CONTENT_CHARS) and its finish reason.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Choice {
    pub index: Option<i64>,
    pub text: String,
    pub finish_reason: Option<String>,
}

/// A usage's token count: OpenAI's member (`prompt_tokens`), else Anthropic's
/// (`input_tokens`) when OpenAI's is absent or null. Each is None when absent or null, and
/// Some(None) when it holds anything but an int in int64 (a bool is no count).
pub fn token_count(openai: Option<Option<i64>>, anthropic: Option<Option<i64>>) -> Option<i64> {
    openai.or(anthropic).flatten()
}

impl Record {
    pub fn new(trace_id: u128, trace_state: String, seed: u64, content: bool) -> Self {
        Record {
            trace_id,
            trace_state,
            seed,
            content,
            spans: Vec::with_capacity(6),
            ended: Vec::with_capacity(6),
            taken: Vec::with_capacity(6),
        }
    }

    pub fn trace_id(&self) -> u128 {
        self.trace_id
    }

    pub fn span(&self, i: usize) -> Result<&Span, NoSuchSpan> {
        self.spans.get(i).ok_or(NoSuchSpan)
    }

    pub fn span_mut(&mut self, i: usize) -> Result<&mut Span, NoSuchSpan> {
        self.spans.get_mut(i).ok_or(NoSuchSpan)
    }

    /// A new span, as given; returns its index.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        name: Key,
        span_id: u64,
        parent_id: Option<u64>,
        remote_parent: bool,
        kind: i32,
        start_ns: u64,
        attributes: Attributes,
    ) -> usize {
        self.spans.push(Span {
            trace_id: self.trace_id,
            span_id,
            parent_id,
            remote_parent,
            trace_state: self.trace_state.clone(),
            name,
            kind,
            start_unix_nano: start_ns,
            end_unix_nano: start_ns,
            attributes,
            events: Vec::new(),
            error: false,
        });
        self.ended.push(false);
        self.taken.push(false);
        self.spans.len() - 1
    }

    /// A child of span `parent`, its id from the seed.
    pub fn child(
        &mut self,
        name: Key,
        parent: usize,
        kind: i32,
        start_ns: u64,
        attributes: Attributes,
    ) -> Result<usize, NoSuchSpan> {
        let parent_id = self.span(parent)?.span_id;
        let id = mixed_id(self.seed, self.spans.len() as u64);
        Ok(self.start(name, id, Some(parent_id), false, kind, start_ns, attributes))
    }

    /// The request's server span from `now`, continuing the client's span `parent_id` (a
    /// remote parent) when there is one: `{method} {path}` with the request's method, path
    /// and id. Its index is 0.
    pub fn open_server(
        &mut self,
        method: &str,
        path: &str,
        request_id: &str,
        parent_id: Option<u64>,
        now: u64,
    ) -> usize {
        // Room for what the request adds: the GenAI attributes, the status, error.type.
        let mut attributes = Vec::with_capacity(SERVER_ATTRIBUTES);
        attributes.extend([
            ("http.request.method".into(), Value::Str(method.to_owned())),
            ("url.path".into(), Value::Str(path.to_owned())),
            (
                "edgegw.request_id".into(),
                Value::Str(request_id.to_owned()),
            ),
        ]);
        let id = mixed_id(self.seed, self.spans.len() as u64);
        let remote = parent_id.is_some();
        self.start(
            format!("{method} {path}").into(),
            id,
            parent_id,
            remote,
            SERVER,
            now,
            attributes,
        )
    }

    /// Attribute `key` of span `i` set (a dict's semantics: None removes it).
    pub fn set(&mut self, i: usize, key: Key, value: Option<Value>) -> Result<(), NoSuchSpan> {
        set_value(&mut self.span_mut(i)?.attributes, key, value);
        Ok(())
    }

    /// Span `i` failed: `error.type` is `code`.
    pub fn mark_failed(&mut self, i: usize, code: &str) -> Result<(), NoSuchSpan> {
        let span = self.span_mut(i)?;
        set_str(&mut span.attributes, "error.type", code);
        span.error = true;
        Ok(())
    }

    /// An event of span `i` at `now`, unless it holds MAX_EVENTS already.
    pub fn add_event(
        &mut self,
        i: usize,
        name: Key,
        attributes: Attributes,
        now: u64,
    ) -> Result<(), NoSuchSpan> {
        self.event(i, name, attributes, now, MAX_EVENTS)?;
        Ok(())
    }

    /// An event of span `i`, unless it holds `limit` already; false when it was not kept.
    pub fn event(
        &mut self,
        i: usize,
        name: Key,
        attributes: Attributes,
        time_ns: u64,
        limit: usize,
    ) -> Result<bool, NoSuchSpan> {
        let span = self.span_mut(i)?;
        if span.events.len() >= limit {
            return Ok(false);
        }
        span.events.push(Event {
            name,
            time_unix_nano: time_ns,
            attributes,
        });
        Ok(true)
    }

    /// Ends span `i` at `end_ns`, failed if `error` (again, if it had ended); true once the
    /// server span has ended.
    pub fn end(&mut self, i: usize, end_ns: u64, error: bool) -> Result<bool, NoSuchSpan> {
        let span = self.span_mut(i)?;
        span.end_unix_nano = end_ns;
        span.error = error;
        self.ended[i] = true;
        Ok(self.ended[0])
    }

    /// Ends span `i` at `now`, once (a second call does nothing): whether spans are now due
    /// for export (the server span has ended).
    pub fn close(&mut self, i: usize, now: u64) -> Result<bool, NoSuchSpan> {
        if *self.ended.get(i).ok_or(NoSuchSpan)? {
            return Ok(false);
        }
        self.spans[i].end_unix_nano = now;
        self.ended[i] = true;
        Ok(self.ended[0])
    }

    /// The entries of the spans ended and not yet taken, and how many.
    pub fn entries(&mut self) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(512 * self.spans.len());
        let mut n = 0;
        for (i, span) in self.spans.iter().enumerate() {
            if self.ended[i] && !self.taken[i] {
                self.taken[i] = true;
                otlp_trace::put_span_entry(span, &mut out);
                n += 1;
            }
        }
        (out, n)
    }

    /// The spans ended and not yet taken, written to `queue` (when there is room for them
    /// all, else counted dropped): whether a whole batch now waits there.
    pub fn export(&mut self, queue: &mut Queue) -> bool {
        let n = (0..self.spans.len())
            .filter(|&i| self.ended[i] && !self.taken[i])
            .count();
        if n == 0 {
            return false;
        }
        let admitted = queue.admit(n);
        let start = queue.buf.len();
        for (i, span) in self.spans.iter().enumerate() {
            if self.ended[i] && !self.taken[i] {
                self.taken[i] = true;
                if admitted {
                    otlp_trace::put_span_entry(span, &mut queue.buf);
                }
            }
        }
        if admitted {
            let len = queue.buf.len() - start;
            queue.traces.push_back((len, n));
        }
        queue.full()
    }

    /// The `traceparent` naming span `i` the parent of an upstream request, and the
    /// client's `tracestate` to go with it (empty: none).
    pub fn context(&self, i: usize) -> Result<([u8; 55], &str), NoSuchSpan> {
        let span_id = self.span(i)?.span_id;
        Ok((traceparent(self.trace_id, span_id), &self.trace_state))
    }

    /// The `parse` span of the request body, from `start_ns` to `now`, failed with `error`
    /// when parsing raised it; else, with `content`, the body (the prompt) as the server
    /// span's `gen_ai.user.message` event. Whether spans are due for export.
    pub fn parsed(
        &mut self,
        start_ns: u64,
        now: u64,
        body: &[u8],
        error: Option<&str>,
    ) -> Result<bool, NoSuchSpan> {
        let i = self.child("parse".into(), 0, INTERNAL, start_ns, Vec::new())?;
        if let Some(code) = error {
            self.mark_failed(i, code)?;
        }
        let due = self.close(i, now)?;
        if error.is_none() && self.content {
            self.prompt(body, now)?;
        }
        Ok(due)
    }

    /// The prompt's event: `gen_ai.content`, the body's first MAX_CONTENT_CHARS characters
    /// (decoded only then).
    fn prompt(&mut self, body: &[u8], now: u64) -> Result<(), NoSuchSpan> {
        let text = String::from_utf8_lossy(body);
        let attrs = vec![(
            "gen_ai.content".into(),
            Value::Str(clip_to(&text, MAX_CONTENT_CHARS)),
        )];
        self.add_event(0, "gen_ai.user.message".into(), attrs, now)
    }

    /// The routing decision's `route` span, from `start_ns` to `now`: the model asked for
    /// (clipped) and, when one was chosen, the target (`alias`, `local` or the provider) and
    /// whether a local model's named profile chose it; failed with `error` when routing
    /// raised it. Whether spans are due for export.
    #[allow(clippy::too_many_arguments)]
    pub fn route(
        &mut self,
        start_ns: u64,
        now: u64,
        model: &str,
        target: Option<&str>,
        named: bool,
        error: Option<&str>,
    ) -> Result<bool, NoSuchSpan> {
        let mut attributes = Vec::with_capacity(3);
        attributes.push(("gen_ai.request.model".into(), Value::Str(clip(model))));
        if let Some(t) = target {
            attributes.push(("edgegw.route.target".into(), Value::Str(t.to_owned())));
            attributes.push(("edgegw.route.named_profile".into(), Value::Bool(named)));
        }
        let i = self.child("route".into(), 0, INTERNAL, start_ns, attributes)?;
        if let Some(code) = error {
            self.mark_failed(i, code)?;
        }
        self.close(i, now)
    }

    /// The `authenticate` span from `now`: checking the caller's client key or token.
    pub fn authenticate(&mut self, now: u64) -> Result<usize, NoSuchSpan> {
        self.child("authenticate".into(), 0, INTERNAL, now, Vec::new())
    }

    /// A routed request's `route.attempt` span from `now`: one deployment tried, its
    /// provider and model (clipped); its upstream attempts are its siblings.
    pub fn route_attempt(
        &mut self,
        provider: &str,
        model: &str,
        now: u64,
    ) -> Result<usize, NoSuchSpan> {
        let attributes = vec![
            (
                "gen_ai.provider.name".into(),
                Value::Str(provider.to_owned()),
            ),
            ("gen_ai.request.model".into(), Value::Str(clip(model))),
        ];
        self.child("route.attempt".into(), 0, INTERNAL, now, attributes)
    }

    /// An MCP tool execution's span from `now` (GenAI's `execute_tool {name}`): the tool's
    /// name and the call's id, both from the model's answer (clipped).
    pub fn tool(&mut self, name: &str, call_id: &str, now: u64) -> Result<usize, NoSuchSpan> {
        let name = clip(name);
        let span_name = format!("execute_tool {name}");
        let attributes = vec![
            (
                "gen_ai.operation.name".into(),
                Value::Str("execute_tool".into()),
            ),
            ("gen_ai.tool.name".into(), Value::Str(name)),
            ("gen_ai.tool.type".into(), Value::Str("mcp".into())),
            ("gen_ai.tool.call.id".into(), Value::Str(clip(call_id))),
        ];
        self.child(span_name.into(), 0, INTERNAL, now, attributes)
    }

    /// A local model with no worker to serve it fell back to its remote profile `to`: the
    /// server span's `edgegw.fallback` event at `now`, with the reason.
    pub fn fallback(&mut self, reason: &str, to: &str, now: u64) -> Result<(), NoSuchSpan> {
        let attributes = vec![
            (
                "edgegw.fallback.reason".into(),
                Value::Str(reason.to_owned()),
            ),
            ("to".into(), Value::Str(to.to_owned())),
        ];
        self.add_event(0, "edgegw.fallback".into(), attributes, now)
    }

    /// A CLIENT child of the server span from `now`, to `host`:`port` (a proxied request).
    pub fn client(
        &mut self,
        name: Key,
        host: &str,
        port: i64,
        now: u64,
    ) -> Result<usize, NoSuchSpan> {
        let mut attrs = Vec::with_capacity(CLIENT_ATTRIBUTES);
        attrs.extend([
            ("server.address".into(), Value::Str(host.to_owned())),
            ("server.port".into(), Value::Int(port)),
        ]);
        self.child(name, 0, CLIENT, now, attrs)
    }

    /// An upstream attempt from `now`, a CLIENT child of the server span: `{method} {path}`
    /// (the target's path; both latin-1), with its method, server address and port, and
    /// path.
    pub fn attempt(
        &mut self,
        method: &[u8],
        target: &[u8],
        host: &str,
        port: i64,
        now: u64,
    ) -> Result<usize, NoSuchSpan> {
        let method: String = method.iter().map(|&b| b as char).collect();
        let path_end = memchr::memchr(b'?', target).unwrap_or(target.len());
        let path: String = target[..path_end].iter().map(|&b| b as char).collect();
        let name = format!("{method} {path}");
        let mut attributes = Vec::with_capacity(CLIENT_ATTRIBUTES);
        attributes.extend([
            ("http.request.method".into(), Value::Str(method)),
            ("server.address".into(), Value::Str(host.to_owned())),
            ("server.port".into(), Value::Int(port)),
            ("url.path".into(), Value::Str(path)),
        ]);
        self.child(name.into(), 0, CLIENT, now, attributes)
    }

    /// Attempt `i`'s response head came at `now`: its status (5xx: failed, `error.type` the
    /// status) and whether it opened its connection (its time then includes the connect and
    /// TLS handshake). Whether spans are due for export.
    pub fn attempt_done(
        &mut self,
        i: usize,
        status: i64,
        new_connection: bool,
        now: u64,
    ) -> Result<bool, NoSuchSpan> {
        let attrs = &mut self.span_mut(i)?.attributes;
        set_value(
            attrs,
            "http.response.status_code".into(),
            Some(Value::Int(status)),
        );
        set_value(
            attrs,
            "edgegw.upstream.new_connection".into(),
            Some(Value::Bool(new_connection)),
        );
        if status >= 500 {
            self.mark_failed(i, &status.to_string())?;
        }
        self.close(i, now)
    }

    /// A connection opened for span `parent`, from `start_ns` to `now` (TCP connect and TLS
    /// handshake): a `connect` child, failed with `error` when it did. Whether spans are due
    /// for export.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        parent: usize,
        start_ns: u64,
        now: u64,
        host: &str,
        port: i64,
        error: Option<&str>,
    ) -> Result<bool, NoSuchSpan> {
        let attributes = vec![
            ("server.address".into(), Value::Str(host.to_owned())),
            ("server.port".into(), Value::Int(port)),
        ];
        let i = self.child("connect".into(), parent, INTERNAL, start_ns, attributes)?;
        if let Some(code) = error {
            self.mark_failed(i, code)?;
        }
        self.close(i, now)
    }

    /// The GenAI semantic-convention attributes of a chat or completions request, on the
    /// server span: operation, provider (and its older name `gen_ai.system`), request and
    /// response model (clipped), token usage, finish reasons, time to first token; with
    /// `content`, a `gen_ai.choice` event a choice at `now`.
    pub fn generation(&mut self, g: &Generation<'_>, now: u64) -> Result<(), NoSuchSpan> {
        let attrs = &mut self.span_mut(0)?.attributes;
        set_str(attrs, "gen_ai.operation.name", g.operation);
        set_str(attrs, "gen_ai.provider.name", g.provider);
        set_str(attrs, "gen_ai.system", g.provider);
        set_value(
            attrs,
            "gen_ai.request.model".into(),
            Some(Value::Str(clip(g.model))),
        );
        if let Some(m) = g.response_model.filter(|m| !m.is_empty()) {
            set_value(
                attrs,
                "gen_ai.response.model".into(),
                Some(Value::Str(clip(m))),
            );
        }
        if let Some(n) = g.input_tokens {
            set_value(
                attrs,
                "gen_ai.usage.input_tokens".into(),
                Some(Value::Int(n)),
            );
        }
        if let Some(n) = g.output_tokens {
            set_value(
                attrs,
                "gen_ai.usage.output_tokens".into(),
                Some(Value::Int(n)),
            );
        }
        if !g.finish_reasons.is_empty() {
            let reasons = g
                .finish_reasons
                .iter()
                .map(|r| Value::Str(clip(r)))
                .collect();
            set_value(
                attrs,
                "gen_ai.response.finish_reasons".into(),
                Some(Value::Array(reasons)),
            );
        }
        if let Some(t) = g.ttft_s {
            set_value(
                attrs,
                "gen_ai.server.time_to_first_token".into(),
                Some(Value::Double(t)),
            );
        }
        if self.content {
            for c in g.choices {
                let mut attrs = Vec::with_capacity(3);
                if let Some(i) = c.index {
                    attrs.push(("index".into(), Value::Int(i)));
                }
                attrs.push(("gen_ai.content".into(), Value::Str(c.text.clone())));
                if let Some(r) = &c.finish_reason {
                    attrs.push(("finish_reason".into(), Value::Str(r.clone())));
                }
                self.add_event(0, "gen_ai.choice".into(), attrs, now)?;
            }
        }
        Ok(())
    }

    /// Ends the server span at `now` with the answer's status (None: none was sent) and the
    /// error code that ended the request: failed on an error, no answer or a 5xx. Whether
    /// spans are due for export.
    pub fn finish(
        &mut self,
        status: Option<i64>,
        error: Option<&str>,
        now: u64,
    ) -> Result<bool, NoSuchSpan> {
        let span = self.span_mut(0)?;
        if let Some(s) = status {
            set_value(
                &mut span.attributes,
                "http.response.status_code".into(),
                Some(Value::Int(s)),
            );
        }
        if let Some(code) = error {
            set_str(&mut span.attributes, "error.type", code);
        }
        if error.is_some() || status.is_none_or(|s| s >= 500) {
            span.error = true;
        }
        self.close(0, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";
    const TRACE_ID: u128 = 0x4bf92f3577b34da6a3ce929d0e0e4736;
    const SPAN_ID: u64 = 0x00f067aa0ba902b7;

    /// What a `traceparent` reads as: (trace id, span id, sampled).
    type Read = Option<(u128, u64, bool)>;

    /// W3C Trace Context's `traceparent`, as the SDK's propagator reads it (the same cases
    /// as tests/test_traceparent.py holds against the SDK itself): (value, what it reads as).
    fn traceparent_cases() -> Vec<(String, Read)> {
        let ok = |sampled| Some((TRACE_ID, SPAN_ID, sampled));
        vec![
            (format!("00-{TRACE}-{SPAN}-01"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-00"), ok(false)),
            // Only the sampled bit counts; other flags are not ours to read.
            (format!("00-{TRACE}-{SPAN}-03"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-02"), ok(false)),
            // A later version may carry more fields; version 00 may not.
            (format!("01-{TRACE}-{SPAN}-01-future"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-01-future"), None),
            (format!("cc-{TRACE}-{SPAN}-01"), ok(true)),
            // Version ff is invalid; so are an all-zero trace id or parent id.
            (format!("ff-{TRACE}-{SPAN}-01"), None),
            (format!("00-{}-{SPAN}-01", "0".repeat(32)), None),
            (format!("00-{TRACE}-{}-01", "0".repeat(16)), None),
            // Lowercase hex only, each field its exact length.
            (format!("00-{}-{SPAN}-01", TRACE.to_uppercase()), None),
            (format!("0A-{TRACE}-{SPAN}-01"), None),
            (format!("00-{TRACE}-{SPAN}-0g"), None),
            (format!("00-{}-{SPAN}-01", &TRACE[1..]), None),
            (format!("00-{TRACE}0-{SPAN}-01"), None),
            (format!("00-{TRACE}-{SPAN}-1"), None),
            (format!("00-{TRACE}-{SPAN}"), None),
            (format!("00_{TRACE}-{SPAN}-01"), None),
            // Optional whitespace around it (OWS), and Python's `$` before a final newline.
            (format!(" \t00-{TRACE}-{SPAN}-01 \t"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-01\n"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-01 \t\n"), ok(true)),
            (format!("00-{TRACE}-{SPAN}-01\n\n"), None),
            (format!("00-{TRACE}-{SPAN}-01 x"), None),
            (format!("01-{TRACE}-{SPAN}-01-x\n"), ok(true)),
            (format!("01-{TRACE}-{SPAN}-01-a\nb"), None),
            // At most 512 bytes.
            (
                format!("02-{TRACE}-{SPAN}-01-{}", "y".repeat(456)),
                ok(true),
            ),
            (format!("02-{TRACE}-{SPAN}-01-{}", "y".repeat(457)), None),
            (format!("00-{TRACE}-{SPAN}-01{}", "x".repeat(600)), None),
            (String::new(), None),
            ("garbage".into(), None),
            (" ".repeat(60), None),
        ]
    }

    #[test]
    fn traceparent_reads_as_the_w3c_propagator_reads_it() {
        for (value, expected) in traceparent_cases() {
            assert_eq!(parse_traceparent(value.as_bytes()), expected, "{value:?}");
        }
        // Bytes past ASCII after a later version's fields (latin-1 in the SDK's carrier).
        let mut value = format!("01-{TRACE}-{SPAN}-01-").into_bytes();
        value.extend_from_slice(b"\x80\xff");
        assert_eq!(parse_traceparent(&value), Some((TRACE_ID, SPAN_ID, true)));
    }

    #[test]
    fn a_written_traceparent_reads_back() {
        let value = traceparent(TRACE_ID, SPAN_ID);
        assert_eq!(value, *format!("00-{TRACE}-{SPAN}-01").as_bytes());
        assert_eq!(parse_traceparent(&value), Some((TRACE_ID, SPAN_ID, true)));
        // Leading zeros are written.
        let value = traceparent(1, 2);
        assert_eq!(
            &value[..],
            b"00-00000000000000000000000000000001-0000000000000002-01"
        );
        assert_eq!(&trace_id_hex(TRACE_ID)[..], TRACE.as_bytes());
        assert_eq!(&trace_id_hex(u128::MAX)[..], "f".repeat(32).as_bytes());
    }

    #[test]
    fn span_ids_are_never_zero_and_distinct_in_a_record() {
        for seed in [0, 1, u64::MAX, 0x9E37_79B9_7F4A_7C15u64.wrapping_neg()] {
            let ids: Vec<u64> = (0..1000).map(|k| mixed_id(seed, k)).collect();
            assert!(ids.iter().all(|&id| id != 0), "seed {seed}");
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), ids.len(), "seed {seed}");
        }
        // A seed's sequence is its own: another seed gives other ids.
        assert_ne!(mixed_id(1, 0), mixed_id(2, 0));
    }

    #[test]
    fn attributes_have_a_dicts_semantics() {
        let mut attrs: Attributes = Vec::new();
        set_value(&mut attrs, "a".into(), Some(Value::Int(1)));
        set_value(&mut attrs, "b".into(), Some(Value::Bool(true)));
        // Set again: the new value, in its first place.
        set_value(&mut attrs, "a".into(), Some(Value::Int(2)));
        set_str(&mut attrs, "c", "x");
        assert_eq!(
            attrs,
            vec![
                ("a".into(), Value::Int(2)),
                ("b".into(), Value::Bool(true)),
                ("c".into(), Value::Str("x".into())),
            ]
        );
        // A value the encoder drops removes the key; an absent one stays absent.
        set_value(&mut attrs, "b".into(), None);
        set_value(&mut attrs, "d".into(), None);
        let keys: Vec<&str> = attrs.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["a", "c"]);
    }

    #[test]
    fn client_values_are_clipped_by_characters() {
        assert_eq!(clip("gpt-4o"), "gpt-4o");
        assert_eq!(clip(&"m".repeat(300)), "m".repeat(256));
        // Characters, not bytes: a multi-byte character is never cut.
        assert_eq!(clip_to("héllo", 2), "hé");
        assert_eq!(clip_to(&"é".repeat(10), 4), "é".repeat(4));
        assert_eq!(clip_to("", 4), "");
    }

    const T0: u64 = 1_700_000_000_000_000_000;

    /// A record of trace TRACE_ID (tracestate `vendor=1`) with its server span open at T0,
    /// continuing the client's span SPAN_ID; recording content.
    fn record() -> Record {
        let mut r = Record::new(TRACE_ID, "vendor=1".into(), 42, true);
        let i = r.open_server("POST", "/v1/chat/completions", "req-1", Some(SPAN_ID), T0);
        assert_eq!(i, 0);
        r
    }

    fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
        span.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    fn str_value(s: &str) -> Option<Value> {
        Some(Value::Str(s.into()))
    }

    #[test]
    fn the_server_span_continues_the_clients_and_children_hang_from_it() {
        let mut r = record();
        let server = r.span(0).unwrap().clone();
        assert_eq!(server.name, "POST /v1/chat/completions");
        assert_eq!((server.kind, server.parent_id), (SERVER, Some(SPAN_ID)));
        assert!(server.remote_parent);
        assert_eq!(server.trace_state, "vendor=1");
        assert_eq!(
            attr(&server, "url.path"),
            str_value("/v1/chat/completions").as_ref()
        );
        assert_eq!(
            attr(&server, "edgegw.request_id"),
            str_value("req-1").as_ref()
        );
        let a = r
            .child("a".into(), 0, INTERNAL, T0 + 1, Vec::new())
            .unwrap();
        let b = r
            .child("b".into(), a, INTERNAL, T0 + 2, Vec::new())
            .unwrap();
        let (a, b) = (r.span(a).unwrap(), r.span(b).unwrap());
        assert_eq!(a.parent_id, Some(server.span_id));
        assert_eq!(b.parent_id, Some(a.span_id));
        assert!(!a.remote_parent && !b.remote_parent);
        let ids = [server.span_id, a.span_id, b.span_id];
        assert!(ids.iter().all(|&id| id != 0));
        assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
        assert!([a, b].iter().all(|s| s.trace_id == TRACE_ID));
        // A root: no parent, not remote.
        let mut root = Record::new(TRACE_ID, String::new(), 0, true);
        root.open_server("GET", "/v1/models", "req-2", None, T0);
        let span = root.span(0).unwrap();
        assert_eq!((span.parent_id, span.remote_parent), (None, false));
    }

    #[test]
    fn a_span_not_held_is_an_error_not_a_panic() {
        let mut r = record();
        assert_eq!(r.span(1).err(), Some(NoSuchSpan));
        assert_eq!(
            r.child("x".into(), 5, INTERNAL, T0, Vec::new()),
            Err(NoSuchSpan)
        );
        assert_eq!(r.close(5, T0), Err(NoSuchSpan));
        assert_eq!(r.end(5, T0, false), Err(NoSuchSpan));
        assert_eq!(r.mark_failed(5, "x"), Err(NoSuchSpan));
        assert_eq!(r.set(5, "k".into(), None), Err(NoSuchSpan));
        assert_eq!(r.attempt_done(5, 200, false, T0), Err(NoSuchSpan));
        assert_eq!(r.connect(5, T0, T0, "h", 1, None), Err(NoSuchSpan));
        assert!(r.context(5).is_err());
        let mut empty = Record::new(TRACE_ID, String::new(), 0, true);
        assert_eq!(empty.finish(Some(200), None, T0), Err(NoSuchSpan));
        assert_eq!(empty.parsed(T0, T0, b"hi", None), Err(NoSuchSpan));
        assert_eq!(
            empty.generation(&Generation::default(), T0),
            Err(NoSuchSpan),
            "the GenAI attributes go on the server span"
        );
    }

    #[test]
    fn spans_end_once_and_are_due_once_the_server_span_has() {
        let mut r = record();
        let parse = r
            .child("parse".into(), 0, INTERNAL, T0 + 1, Vec::new())
            .unwrap();
        assert_eq!(r.close(parse, T0 + 2), Ok(false), "the server span is open");
        assert_eq!(r.close(parse, T0 + 9), Ok(false), "once");
        assert_eq!(r.span(parse).unwrap().end_unix_nano, T0 + 2);
        let late = r
            .child("late".into(), 0, INTERNAL, T0 + 3, Vec::new())
            .unwrap();
        assert_eq!(r.finish(Some(200), None, T0 + 4), Ok(true));
        let (entries, n) = r.entries();
        assert_eq!(n, 2);
        // In the order they started, whatever the order they ended in.
        let mut expected = otlp_trace::encode_span_entry(r.span(0).unwrap());
        expected.extend(otlp_trace::encode_span_entry(r.span(parse).unwrap()));
        assert_eq!(entries, expected);
        assert_eq!(r.entries(), (Vec::new(), 0), "taken once");
        // A span ending after the server span is due at once, alone.
        assert_eq!(r.close(late, T0 + 5), Ok(true));
        let (entries, n) = r.entries();
        assert_eq!(n, 1);
        assert_eq!(
            entries,
            otlp_trace::encode_span_entry(r.span(late).unwrap())
        );
    }

    #[test]
    fn finish_fails_the_request_on_an_error_no_answer_or_a_5xx() {
        let cases: [(Option<i64>, Option<&str>, bool); 5] = [
            (Some(200), None, false),
            (Some(404), None, false),
            (Some(502), None, true),
            (None, None, true),
            (Some(200), Some("client_gone"), true),
        ];
        for (status, error, failed) in cases {
            let mut r = record();
            r.finish(status, error, T0 + 1).unwrap();
            let span = r.span(0).unwrap();
            assert_eq!(span.error, failed, "{status:?} {error:?}");
            assert_eq!(span.end_unix_nano, T0 + 1);
            let code = attr(span, "http.response.status_code");
            assert_eq!(code, status.map(Value::Int).as_ref());
            assert_eq!(attr(span, "error.type"), error.and_then(str_value).as_ref());
        }
    }

    #[test]
    fn an_attempt_names_its_span_upstreams_parent() {
        let mut r = record();
        let i = r
            .attempt(
                b"POST",
                b"/v1/chat/completions?x=1",
                "api.example",
                443,
                T0 + 1,
            )
            .unwrap();
        let span = r.span(i).unwrap().clone();
        assert_eq!(span.name, "POST /v1/chat/completions", "the path, no query");
        assert_eq!(
            (span.kind, span.parent_id),
            (CLIENT, Some(r.span(0).unwrap().span_id))
        );
        assert_eq!(
            attr(&span, "url.path"),
            str_value("/v1/chat/completions").as_ref()
        );
        assert_eq!(attr(&span, "server.port"), Some(&Value::Int(443)));
        let (value, state) = r.context(i).unwrap();
        assert_eq!(
            parse_traceparent(&value),
            Some((TRACE_ID, span.span_id, true))
        );
        assert_eq!(state, "vendor=1");
        // A connection it opened: a `connect` child, failed with the connect's error.
        assert_eq!(
            r.connect(
                i,
                T0 + 2,
                T0 + 3,
                "api.example",
                443,
                Some("upstream_unreachable")
            ),
            Ok(false)
        );
        let connect = r.span(i + 1).unwrap();
        assert_eq!(
            (connect.name.as_ref(), connect.parent_id),
            ("connect", Some(span.span_id))
        );
        assert_eq!(
            (connect.start_unix_nano, connect.end_unix_nano),
            (T0 + 2, T0 + 3)
        );
        assert!(connect.error);
        assert_eq!(
            attr(connect, "error.type"),
            str_value("upstream_unreachable").as_ref()
        );
        // Its answer: a 5xx fails it, with the status as its error type.
        r.attempt_done(i, 503, true, T0 + 4).unwrap();
        let span = r.span(i).unwrap();
        assert!(span.error);
        assert_eq!(attr(span, "error.type"), str_value("503").as_ref());
        assert_eq!(
            attr(span, "edgegw.upstream.new_connection"),
            Some(&Value::Bool(true))
        );
        assert_eq!(span.end_unix_nano, T0 + 4);
        // Latin-1 bytes are characters, not UTF-8.
        let j = r.attempt(b"GET", b"/caf\xe9", "h", 80, T0).unwrap();
        assert_eq!(r.span(j).unwrap().name, "GET /caf\u{e9}");
        let k = r.client("GET /v1/models".into(), "h", 80, T0).unwrap();
        assert_eq!(r.span(k).unwrap().kind, CLIENT);
    }

    #[test]
    fn the_route_span_says_what_was_decided() {
        let mut r = record();
        let long = "m".repeat(300);
        r.route(T0 + 1, T0 + 2, "openai/gpt-4o", Some("openai"), false, None)
            .unwrap();
        r.route(T0 + 3, T0 + 4, &long, None, false, Some("unknown_provider"))
            .unwrap();
        let ok = r.span(1).unwrap();
        assert_eq!(ok.name, "route");
        assert_eq!(
            (ok.start_unix_nano, ok.end_unix_nano, ok.error),
            (T0 + 1, T0 + 2, false)
        );
        let keys: Vec<&str> = ok.attributes.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(
            keys,
            [
                "gen_ai.request.model",
                "edgegw.route.target",
                "edgegw.route.named_profile"
            ]
        );
        let failed = r.span(2).unwrap();
        assert!(failed.error);
        assert_eq!(
            attr(failed, "gen_ai.request.model"),
            str_value(&long[..256]).as_ref()
        );
        assert_eq!(attr(failed, "edgegw.route.target"), None);
        assert_eq!(
            attr(failed, "error.type"),
            str_value("unknown_provider").as_ref()
        );
    }

    #[test]
    fn generation_writes_the_genai_attributes() {
        let mut r = record();
        let reasons = ["stop".to_string(), "x".repeat(300)];
        r.generation(
            &Generation {
                operation: "chat",
                provider: "openai",
                model: "openai/gpt-4o-mini",
                response_model: Some("gpt-4o-mini-2024-07-18"),
                input_tokens: Some(7),
                output_tokens: Some(3),
                finish_reasons: &reasons,
                ttft_s: Some(0.25),
                choices: &[],
            },
            T0,
        )
        .unwrap();
        let span = r.span(0).unwrap();
        let expected = [
            ("gen_ai.operation.name", str_value("chat")),
            ("gen_ai.provider.name", str_value("openai")),
            ("gen_ai.system", str_value("openai")),
            ("gen_ai.request.model", str_value("openai/gpt-4o-mini")),
            ("gen_ai.response.model", str_value("gpt-4o-mini-2024-07-18")),
            ("gen_ai.usage.input_tokens", Some(Value::Int(7))),
            ("gen_ai.usage.output_tokens", Some(Value::Int(3))),
            (
                "gen_ai.response.finish_reasons",
                Some(Value::Array(vec![
                    Value::Str("stop".into()),
                    Value::Str("x".repeat(256)),
                ])),
            ),
            (
                "gen_ai.server.time_to_first_token",
                Some(Value::Double(0.25)),
            ),
        ];
        for (key, value) in expected {
            assert_eq!(attr(span, key), value.as_ref(), "{key}");
        }
        // Nothing known: no response model (nor an empty one), usage or reasons.
        let mut r = record();
        r.generation(
            &Generation {
                operation: "text_completion",
                provider: "local",
                model: "qwen3-8b",
                response_model: Some(""),
                ..Generation::default()
            },
            T0,
        )
        .unwrap();
        let span = r.span(0).unwrap();
        for key in [
            "gen_ai.response.model",
            "gen_ai.usage.input_tokens",
            "gen_ai.response.finish_reasons",
            "gen_ai.server.time_to_first_token",
        ] {
            assert_eq!(attr(span, key), None, "{key}");
        }
    }

    #[test]
    fn the_request_paths_other_spans_name_what_they_did() {
        let mut r = record();
        let server_id = r.span(0).unwrap().span_id;
        let auth = r.authenticate(T0 + 1).unwrap();
        let attempt = r.route_attempt("groq", &"m".repeat(300), T0 + 2).unwrap();
        let tool = r.tool(&"t".repeat(300), "call_1", T0 + 3).unwrap();
        r.fallback("no_worker", "openai/gpt-4o", T0 + 4).unwrap();
        let auth = r.span(auth).unwrap();
        assert_eq!((auth.name.as_ref(), auth.kind), ("authenticate", INTERNAL));
        assert!(auth.attributes.is_empty());
        let attempt = r.span(attempt).unwrap();
        assert_eq!(attempt.name, "route.attempt");
        assert_eq!(
            attr(attempt, "gen_ai.provider.name"),
            str_value("groq").as_ref()
        );
        assert_eq!(
            attr(attempt, "gen_ai.request.model"),
            str_value(&"m".repeat(256)).as_ref()
        );
        let tool = r.span(tool).unwrap();
        assert_eq!(tool.name, format!("execute_tool {}", "t".repeat(256)));
        let attrs: Vec<(&str, &Value)> = tool
            .attributes
            .iter()
            .map(|(k, v)| (k.as_ref(), v))
            .collect();
        assert_eq!(
            attrs,
            [
                ("gen_ai.operation.name", &Value::Str("execute_tool".into())),
                ("gen_ai.tool.name", &Value::Str("t".repeat(256))),
                ("gen_ai.tool.type", &Value::Str("mcp".into())),
                ("gen_ai.tool.call.id", &Value::Str("call_1".into())),
            ]
        );
        for span in [auth, attempt, tool] {
            assert_eq!(span.parent_id, Some(server_id));
        }
        let event = &r.span(0).unwrap().events[0];
        assert_eq!(
            (event.name.as_ref(), event.time_unix_nano),
            ("edgegw.fallback", T0 + 4)
        );
        assert_eq!(
            event.attributes,
            vec![
                (
                    "edgegw.fallback.reason".into(),
                    Value::Str("no_worker".into())
                ),
                ("to".into(), Value::Str("openai/gpt-4o".into())),
            ]
        );
        // Every name the hooks write is static: recording them allocates nothing.
        let names = r.spans.iter().map(|s| &s.name).chain(
            r.spans
                .iter()
                .flat_map(|s| s.attributes.iter().map(|(k, _)| k)),
        );
        for name in names {
            let dynamic = name.starts_with("POST ") || name.starts_with("execute_tool ");
            assert_eq!(matches!(name, Cow::Borrowed(_)), !dynamic, "{name}");
        }
    }

    #[test]
    fn a_token_count_is_openais_member_else_anthropics() {
        let cases = [
            (Some(Some(7)), Some(Some(9)), Some(7)),
            (None, Some(Some(9)), Some(9)),
            (None, None, None),
            // Present but no count (a str, a bool, past int64): not the other's either.
            (Some(None), Some(Some(9)), None),
            (None, Some(None), None),
        ];
        for (openai, anthropic, expected) in cases {
            assert_eq!(
                token_count(openai, anthropic),
                expected,
                "{openai:?} {anthropic:?}"
            );
        }
    }

    #[test]
    fn the_parse_span_says_whether_the_body_parsed() {
        let mut r = record();
        assert_eq!(r.parsed(T0 + 1, T0 + 2, b"{}", None), Ok(false));
        assert_eq!(
            r.parsed(T0 + 3, T0 + 4, b"{", Some("invalid_request")),
            Ok(false)
        );
        let (ok, bad) = (r.span(1).unwrap(), r.span(2).unwrap());
        assert_eq!(
            (ok.name.as_ref(), ok.kind, ok.error),
            ("parse", INTERNAL, false)
        );
        assert_eq!((ok.start_unix_nano, ok.end_unix_nano), (T0 + 1, T0 + 2));
        assert!(ok.attributes.is_empty());
        assert_eq!(
            (bad.start_unix_nano, bad.end_unix_nano, bad.error),
            (T0 + 3, T0 + 4, true)
        );
        assert_eq!(
            attr(bad, "error.type"),
            str_value("invalid_request").as_ref()
        );
        // The prompt of the body that parsed only.
        let events = &r.span(0).unwrap().events;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].attributes[0].1, Value::Str("{}".into()));
    }

    /// A finished chat request's record, its prompt "secret prompt" and its answer's two
    /// choices given to it, recording content or not.
    fn with_content(content: bool) -> Record {
        let mut r = Record::new(TRACE_ID, String::new(), 7, content);
        r.open_server("POST", "/v1/chat/completions", "req", None, T0);
        r.parsed(T0, T0 + 1, b"secret prompt", None).unwrap();
        let choices = [
            Choice {
                index: Some(0),
                text: "secret answer".into(),
                finish_reason: Some("stop".into()),
            },
            Choice {
                index: None,
                text: String::new(),
                finish_reason: None,
            },
        ];
        let g = Generation {
            operation: "chat",
            provider: "openai",
            model: "gpt-4o",
            choices: &choices,
            ..Generation::default()
        };
        r.generation(&g, T0 + 2).unwrap();
        r.finish(Some(200), None, T0 + 3).unwrap();
        r
    }

    #[test]
    fn content_is_recorded_only_when_on() {
        let r = with_content(true);
        let events = &r.span(0).unwrap().events;
        let names: Vec<&str> = events.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(
            names,
            ["gen_ai.user.message", "gen_ai.choice", "gen_ai.choice"]
        );
        assert_eq!(
            events[1].attributes,
            vec![
                ("index".into(), Value::Int(0)),
                ("gen_ai.content".into(), Value::Str("secret answer".into())),
                ("finish_reason".into(), Value::Str("stop".into())),
            ]
        );
        assert_eq!(events[1].time_unix_nano, T0 + 2);
        // An index that is no int64 and no finish reason: those attributes left out.
        assert_eq!(
            events[2].attributes,
            vec![("gen_ai.content".into(), Value::Str(String::new()))]
        );
        // Off: not a byte of either, in any span.
        let mut off = with_content(false);
        assert!(off.span(0).unwrap().events.is_empty());
        let (entries, n) = off.entries();
        assert_eq!(n, 2);
        assert!(memchr::memmem::find(&entries, b"secret").is_none());
    }

    #[test]
    fn events_are_bounded_and_a_prompt_is_clipped() {
        let mut r = record();
        r.parsed(
            T0,
            T0 + 1,
            "é".repeat(MAX_CONTENT_CHARS + 10).as_bytes(),
            None,
        )
        .unwrap();
        let event = &r.span(0).unwrap().events[0];
        assert_eq!(event.name, "gen_ai.user.message");
        assert_eq!(event.time_unix_nano, T0 + 1);
        assert_eq!(
            event.attributes,
            vec![(
                "gen_ai.content".into(),
                Value::Str("é".repeat(MAX_CONTENT_CHARS))
            )]
        );
        // Bytes that are not UTF-8 are replaced, not refused.
        r.parsed(T0, T0, b"a\xffb", None).unwrap();
        assert_eq!(
            r.span(0).unwrap().events[1].attributes[0].1,
            Value::Str("a\u{fffd}b".into())
        );
        for k in 0..2 * MAX_EVENTS {
            r.add_event(0, "e".into(), Vec::new(), T0 + k as u64)
                .unwrap();
        }
        assert_eq!(r.span(0).unwrap().events.len(), MAX_EVENTS);
        assert_eq!(
            r.event(0, "more".into(), Vec::new(), T0, MAX_EVENTS + 1),
            Ok(true)
        );
        assert_eq!(
            r.event(0, "more".into(), Vec::new(), T0, MAX_EVENTS + 1),
            Ok(false)
        );
    }

    #[test]
    fn a_failed_span_says_why_and_set_is_a_dicts() {
        let mut r = record();
        r.mark_failed(0, "first").unwrap();
        r.mark_failed(0, "second").unwrap();
        let span = r.span(0).unwrap();
        assert!(span.error);
        assert_eq!(attr(span, "error.type"), str_value("second").as_ref());
        r.set(0, "url.path".into(), Some(Value::Int(1))).unwrap();
        r.set(0, "http.request.method".into(), None).unwrap();
        let keys: Vec<&str> = r
            .span(0)
            .unwrap()
            .attributes
            .iter()
            .map(|(k, _)| k.as_ref())
            .collect();
        assert_eq!(keys, ["url.path", "edgegw.request_id", "error.type"]);
    }

    /// A traced request of two spans (server and one child) into `queue`, trace id
    /// TRACE_ID + `i`: whether a whole batch then waits.
    fn traced_request(queue: &mut Queue, i: u64) -> bool {
        let mut r = Record::new(TRACE_ID + u128::from(i), String::new(), i + 1, false);
        r.open_server("GET", "/v1/models", "req", None, T0);
        let parse = r
            .child("parse".into(), 0, INTERNAL, T0, Vec::new())
            .unwrap();
        assert!(!r.close(parse, T0 + 1).unwrap());
        assert!(r.finish(Some(200), None, T0 + 2).unwrap());
        r.export(queue)
    }

    #[test]
    fn a_queue_holds_whole_traces_bounded_and_counts_its_drops() {
        let mut queue = Queue::new(5, 4);
        assert!(!traced_request(&mut queue, 0), "2 of 4 spans wait");
        assert!(traced_request(&mut queue, 1), "a whole batch");
        assert!(
            traced_request(&mut queue, 2),
            "no room for 2 more: dropped (the batch still waits)"
        );
        assert_eq!((queue.pending, queue.queue_full), (4, 2));
        let taken = queue.take(|entries, n| (entries.to_vec(), n)).unwrap();
        assert_eq!((taken.1, queue.pending), (4, 0));
        assert_eq!(queue.take(|_, n| n), None);
        // The entries are those of the two traces' spans, in order: a valid batch.
        let request = otlp_trace::pb::ExportTraceServiceRequest::decode(
            &otlp_trace::encode_batch(&Vec::new(), "edgegw", "1", &[&taken.0])[..],
        )
        .unwrap();
        let spans = &request.resource_spans[0].scope_spans[0].spans;
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["GET /v1/models", "parse", "GET /v1/models", "parse"]
        );
        assert_eq!(spans[1].parent_span_id, spans[0].span_id);
        queue.done(4, true);
        queue.done(2, false);
        assert_eq!((queue.exported, queue.export_failed), (4, 2));
        // A batch holds whole traces: three of two spans, batches of 3 spans, leave as 4 + 2.
        let mut queue = Queue::new(100, 3);
        for i in 0..3 {
            traced_request(&mut queue, i);
        }
        assert_eq!(queue.take(|_, n| n), Some(4));
        assert_eq!(queue.take(|_, n| n), Some(2));
        assert_eq!(queue.take(|_, n| n), None);
        // Cleared: nothing waits, nothing counted.
        traced_request(&mut queue, 0);
        queue.clear();
        assert_eq!((queue.pending, queue.take(|_, n| n)), (0, None));
        assert_eq!((queue.exported, queue.queue_full), (0, 0));
    }
}
