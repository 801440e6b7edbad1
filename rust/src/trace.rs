//! Tracing's logic, pure: one request's record of its spans (`Record`: the span store and
//! span ids, here), the hooks of the request path that name its spans and write their
//! attributes, the GenAI ones among them (hooks.rs), the queue of ended spans waiting for
//! export (queue.rs), W3C trace context: `traceparent` read and written, span ids
//! (context.rs), and the attribute rules (a dict's semantics, clipped client values). No pyo3
//! and no clock: times are given. The binding (trace_binding.rs) converts Python values to
//! these types and back.

mod context;
mod hooks;
mod queue;

use std::borrow::Cow;

use crate::otlp_trace::{self, Attributes, Event, Key, Span, Value};

use context::mixed_id;
pub use context::{parse_traceparent, trace_id_hex, traceparent};
pub use hooks::{token_count, Choice, Generation};
pub use queue::Queue;

/// Attribute `key` set to `v` with a dict's semantics: a key set again keeps its place; None
/// (a value the encoder drops) leaves the key out.
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
    clip_to(s, MAX_ATTRIBUTE_CHARS)
}

pub fn clip_to(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((end, _)) => s[..end].to_owned(),
        None => s.to_owned(),
    }
}

// opentelemetry-proto's SpanKind.
pub const INTERNAL: i32 = 1;
pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;
// The limits below are edgegw.telemetry.tracing's too (the core exports them).
/// Events kept a span (the SDK's default limit).
pub const MAX_EVENTS: usize = 128;
/// TELEMETRY_TRACING_CONTENT: characters kept a prompt or completion event.
pub const MAX_CONTENT_CHARS: usize = 4096;
/// Characters kept of an attribute value from a client (a model name, a finish reason).
pub const MAX_ATTRIBUTE_CHARS: usize = 256;
/// Attributes a server span has room for from the start: its own three, the GenAI ones,
/// the status and error.type (no growth of the list a request).
pub const SERVER_ATTRIBUTES: usize = 16;
/// Attributes an upstream attempt's span has room for: its four, the status and whether
/// it opened its connection, error.type.
pub const CLIENT_ATTRIBUTES: usize = 8;

/// A span index a record does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSuchSpan;

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
        let due = |i: usize| self.ended[i] && !self.taken[i];
        let n = (0..self.spans.len()).filter(|&i| due(i)).count();
        if n == 0 {
            return false;
        }
        let full = queue.push(n, |buf| {
            for (i, span) in self.spans.iter().enumerate() {
                if due(i) {
                    otlp_trace::put_span_entry(span, buf);
                }
            }
        });
        for i in 0..self.spans.len() {
            self.taken[i] |= self.ended[i];
        }
        full
    }

    /// The `traceparent` naming span `i` the parent of an upstream request, and the
    /// client's `tracestate` to go with it (empty: none).
    pub fn context(&self, i: usize) -> Result<([u8; 55], &str), NoSuchSpan> {
        let span_id = self.span(i)?.span_id;
        Ok((traceparent(self.trace_id, span_id), &self.trace_state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const TRACE_ID: u128 = 0x4bf92f3577b34da6a3ce929d0e0e4736;
    pub(super) const SPAN_ID: u64 = 0x00f067aa0ba902b7;

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

    pub(super) const T0: u64 = 1_700_000_000_000_000_000;

    /// A record of trace TRACE_ID (tracestate `vendor=1`) with its server span open at T0,
    /// continuing the client's span SPAN_ID; recording content.
    pub(super) fn record() -> Record {
        let mut r = Record::new(TRACE_ID, "vendor=1".into(), 42, true);
        let i = r.open_server("POST", "/v1/chat/completions", "req-1", Some(SPAN_ID), T0);
        assert_eq!(i, 0);
        r
    }

    pub(super) fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
        span.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub(super) fn str_value(s: &str) -> Option<Value> {
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
}
