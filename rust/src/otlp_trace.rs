//! OTLP trace export: the protobuf `ExportTraceServiceRequest` of a batch of ended spans
//! (one resource, one instrumentation scope), as the OpenTelemetry SDK's `encode_spans`
//! writes it. Pure: no I/O, no pyo3 (the binding is in lib.rs). edgegw's export pipeline
//! (edgegw/telemetry/otelsdk.py) calls it instead of the SDK's Python encoder, which cost
//! more than the rest of a traced request (bench/README.md).
//!
//! Two ways to the same bytes: `encode_spans` (a whole batch at once), and
//! `encode_span_entry` as each span ends plus `encode_batch` over the entries. The second
//! is what the gateway uses: a span's attributes are read while still in the cache, and a
//! batch no longer holds the event loop for the time of encoding 512 spans at once.

use std::borrow::Cow;

use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;

/// An attribute value: what the SDK's `_encode_value` accepts, less key-value lists.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(Vec<u8>),
    Array(Vec<Value>),
}

/// An attribute key, or a span's or event's name: the names edgegw itself writes are
/// static, so recording them allocates nothing (a traced request made ~50 more heap
/// allocations than an untraced one when each was a String; bench/README.md).
pub type Key = Cow<'static, str>;

pub type Attributes = Vec<(Key, Value)>;

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: Key,
    pub time_unix_nano: u64,
    pub attributes: Attributes,
}

/// One ended span. `kind` is opentelemetry-proto's `SpanKind` (1 internal, 2 server,
/// 3 client); `error` sets `STATUS_CODE_ERROR`, else the status is unset.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: u128,
    pub span_id: u64,
    pub parent_id: Option<u64>,
    pub remote_parent: bool,
    pub trace_state: String,
    pub name: Key,
    pub kind: i32,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: Attributes,
    pub events: Vec<Event>,
    pub error: bool,
}

/// `SpanFlags` of opentelemetry-proto: whether the parent's remoteness is known, and is.
const FLAGS_HAS_IS_REMOTE: u32 = 0x100;
const FLAGS_IS_REMOTE: u32 = 0x200;
/// W3C trace flags: sampled (every exported span is).
const FLAGS_SAMPLED: u32 = 0x01;
const STATUS_ERROR: i32 = 2;

/// The `ExportTraceServiceRequest` holding `spans` under one resource and one scope.
pub fn encode_spans(
    resource: &Attributes,
    scope_name: &str,
    scope_version: &str,
    spans: &[Span],
) -> Vec<u8> {
    let request = pb::ExportTraceServiceRequest {
        resource_spans: vec![pb::ResourceSpans {
            resource: Some(pb::Resource {
                attributes: key_values(resource),
            }),
            scope_spans: vec![pb::ScopeSpans {
                scope: Some(pb::InstrumentationScope {
                    name: scope_name.to_string(),
                    version: scope_version.to_string(),
                }),
                spans: spans.iter().map(span).collect(),
            }],
        }],
    };
    request.encode_to_vec()
}

/// `ScopeSpans.spans`: field 2.
const SCOPE_SPANS_SPAN: u32 = 2;

/// One span as an entry of `ScopeSpans.spans` (its key, length and message): batches are
/// concatenations of entries (`encode_batch`). Written field by field from the span as it
/// is, the bytes prost writes for `span(s)` (`entries_are_the_bytes_prost_writes`): the prost
/// message copied every string and made a vector of every attribute list first
/// (bench/README.md has the cost).
pub fn encode_span_entry(s: &Span) -> Vec<u8> {
    let mut out = Vec::new();
    put_span_entry(s, &mut out);
    out
}

/// `encode_span_entry`, appended to `out` (a queue's buffer of entries).
pub fn put_span_entry(s: &Span, out: &mut Vec<u8>) {
    let len = wire::span_len(s);
    let start = out.len();
    out.reserve(len + 4);
    wire::put_len(SCOPE_SPANS_SPAN, len, out);
    wire::put_span(s, out);
    debug_assert_eq!(
        out.len() - start,
        len + wire::key_len(SCOPE_SPANS_SPAN) + wire::varint_len(len as u64)
    );
}

/// The protobuf wire format of `Span` and its parts, by hand: each `*_len` is the length of
/// a message's body, each `put_*` writes it. Fields are written in tag order and left out
/// when they hold their default (proto3), as prost does; a oneof's value always is.
mod wire {
    use super::{
        Event, Key, Span, Value, FLAGS_HAS_IS_REMOTE, FLAGS_IS_REMOTE, FLAGS_SAMPLED, STATUS_ERROR,
    };

    const VARINT: u32 = 0;
    const FIXED64: u32 = 1;
    const LEN: u32 = 2;
    const FIXED32: u32 = 5;

    pub fn varint_len(v: u64) -> usize {
        (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
    }

    pub fn key_len(tag: u32) -> usize {
        varint_len(u64::from(tag << 3))
    }

    fn field_len(tag: u32, len: usize) -> usize {
        key_len(tag) + varint_len(len as u64) + len
    }

    fn put_varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn put_key(tag: u32, wire_type: u32, out: &mut Vec<u8>) {
        put_varint(u64::from(tag << 3 | wire_type), out);
    }

    pub fn put_len(tag: u32, len: usize, out: &mut Vec<u8>) {
        put_key(tag, LEN, out);
        put_varint(len as u64, out);
    }

    fn put_bytes(tag: u32, b: &[u8], out: &mut Vec<u8>) {
        put_len(tag, b.len(), out);
        out.extend_from_slice(b);
    }

    /// A string or bytes field: left out when empty.
    fn put_nonempty(tag: u32, b: &[u8], out: &mut Vec<u8>) {
        if !b.is_empty() {
            put_bytes(tag, b, out);
        }
    }

    fn nonempty_len(tag: u32, b: &[u8]) -> usize {
        if b.is_empty() {
            0
        } else {
            field_len(tag, b.len())
        }
    }

    fn put_fixed64(tag: u32, v: u64, out: &mut Vec<u8>) {
        if v != 0 {
            put_key(tag, FIXED64, out);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn fixed64_len(tag: u32, v: u64) -> usize {
        if v == 0 {
            0
        } else {
            key_len(tag) + 8
        }
    }

    // AnyValue { string_value = 1, bool_value = 2, int_value = 3, double_value = 4,
    // array_value = 5, bytes_value = 7 }: a oneof, written even when it holds its default.
    fn any_value_len(v: &Value) -> usize {
        match v {
            Value::Str(s) => field_len(1, s.len()),
            Value::Bool(_) => 2,
            Value::Int(i) => 1 + varint_len(*i as u64),
            Value::Double(_) => 9,
            Value::Array(items) => field_len(5, array_len(items)),
            Value::Bytes(b) => field_len(7, b.len()),
        }
    }

    // ArrayValue { values = 1 }
    fn array_len(items: &[Value]) -> usize {
        items.iter().map(|x| field_len(1, any_value_len(x))).sum()
    }

    fn put_any_value(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Str(s) => put_bytes(1, s.as_bytes(), out),
            Value::Bool(b) => {
                put_key(2, VARINT, out);
                out.push(u8::from(*b));
            }
            Value::Int(i) => {
                put_key(3, VARINT, out);
                put_varint(*i as u64, out);
            }
            Value::Double(d) => {
                put_key(4, FIXED64, out);
                out.extend_from_slice(&d.to_le_bytes());
            }
            Value::Array(items) => {
                put_len(5, array_len(items), out);
                for x in items {
                    put_len(1, any_value_len(x), out);
                    put_any_value(x, out);
                }
            }
            Value::Bytes(b) => put_bytes(7, b, out),
        }
    }

    // KeyValue { key = 1, value = 2 }
    fn key_value_len(k: &str, v: &Value) -> usize {
        nonempty_len(1, k.as_bytes()) + field_len(2, any_value_len(v))
    }

    fn attributes_len(tag: u32, attrs: &[(Key, Value)]) -> usize {
        attrs
            .iter()
            .map(|(k, v)| field_len(tag, key_value_len(k, v)))
            .sum()
    }

    fn put_attributes(tag: u32, attrs: &[(Key, Value)], out: &mut Vec<u8>) {
        for (k, v) in attrs {
            put_len(tag, key_value_len(k, v), out);
            put_nonempty(1, k.as_bytes(), out);
            put_len(2, any_value_len(v), out);
            put_any_value(v, out);
        }
    }

    // Event { time_unix_nano = 1, name = 2, attributes = 3 }
    fn event_len(e: &Event) -> usize {
        fixed64_len(1, e.time_unix_nano)
            + nonempty_len(2, e.name.as_bytes())
            + attributes_len(3, &e.attributes)
    }

    pub(super) fn flags(s: &Span) -> u32 {
        let mut flags = FLAGS_SAMPLED | FLAGS_HAS_IS_REMOTE;
        if s.parent_id.is_some() && s.remote_parent {
            flags |= FLAGS_IS_REMOTE;
        }
        flags
    }

    // Status { message = 2, code = 3 }: only the code is ever set.
    fn status_len(s: &Span) -> usize {
        if s.error {
            1 + varint_len(STATUS_ERROR as u64)
        } else {
            0
        }
    }

    // Span { trace_id = 1, span_id = 2, trace_state = 3, parent_span_id = 4, name = 5,
    // kind = 6, start_time_unix_nano = 7, end_time_unix_nano = 8, attributes = 9,
    // events = 11, status = 15, flags = 16 (fixed32) }
    pub fn span_len(s: &Span) -> usize {
        field_len(1, 16)
            + field_len(2, 8)
            + nonempty_len(3, s.trace_state.as_bytes())
            + if s.parent_id.is_some() {
                field_len(4, 8)
            } else {
                0
            }
            + nonempty_len(5, s.name.as_bytes())
            + if s.kind != 0 {
                1 + varint_len(s.kind as i64 as u64)
            } else {
                0
            }
            + fixed64_len(7, s.start_unix_nano)
            + fixed64_len(8, s.end_unix_nano)
            + attributes_len(9, &s.attributes)
            + s.events
                .iter()
                .map(|e| field_len(11, event_len(e)))
                .sum::<usize>()
            + field_len(15, status_len(s))
            + key_len(16)
            + 4
    }

    pub fn put_span(s: &Span, out: &mut Vec<u8>) {
        put_bytes(1, &s.trace_id.to_be_bytes(), out);
        put_bytes(2, &s.span_id.to_be_bytes(), out);
        put_nonempty(3, s.trace_state.as_bytes(), out);
        if let Some(p) = s.parent_id {
            put_bytes(4, &p.to_be_bytes(), out);
        }
        put_nonempty(5, s.name.as_bytes(), out);
        if s.kind != 0 {
            put_key(6, VARINT, out);
            put_varint(s.kind as i64 as u64, out);
        }
        put_fixed64(7, s.start_unix_nano, out);
        put_fixed64(8, s.end_unix_nano, out);
        put_attributes(9, &s.attributes, out);
        for e in &s.events {
            put_len(11, event_len(e), out);
            put_fixed64(1, e.time_unix_nano, out);
            put_nonempty(2, e.name.as_bytes(), out);
            put_attributes(3, &e.attributes, out);
        }
        put_len(15, status_len(s), out);
        if s.error {
            put_key(3, VARINT, out);
            put_varint(STATUS_ERROR as u64, out);
        }
        put_key(16, FIXED32, out);
        out.extend_from_slice(&flags(s).to_le_bytes());
    }
}

/// The `ExportTraceServiceRequest` of the spans whose entries are `entries`: the bytes
/// `encode_spans` writes for those spans.
pub fn encode_batch<E: AsRef<[u8]>>(
    resource: &Attributes,
    scope_name: &str,
    scope_version: &str,
    entries: &[E],
) -> Vec<u8> {
    let len = entries.iter().map(|e| e.as_ref().len()).sum();
    let mut request = batch_head(resource, scope_name, scope_version, len);
    request.reserve_exact(len);
    for entry in entries {
        request.extend_from_slice(entry.as_ref());
    }
    request
}

/// What comes before the entries of a batch, `entries_len` bytes of them: the entries are
/// the last field of `ScopeSpans`, itself the last of `ResourceSpans`, itself the only one of
/// the request, so a batch is this head and then the entries as they are (no copy of them
/// into each enclosing message in turn: a batch of 512 spans is ~130 KiB, and each copy is
/// a fresh allocation whose pages fault in; bench/README.md).
pub fn batch_head(
    resource: &Attributes,
    scope_name: &str,
    scope_version: &str,
    entries_len: usize,
) -> Vec<u8> {
    let scope = pb::ScopeSpans {
        scope: Some(pb::InstrumentationScope {
            name: scope_name.to_string(),
            version: scope_version.to_string(),
        }),
        spans: Vec::new(),
    }
    .encode_to_vec();
    let resource = pb::Resource {
        attributes: key_values(resource),
    }
    .encode_to_vec();
    let scope_spans_len = scope.len() + entries_len;
    // ResourceSpans { resource = 1, scope_spans = 2 }
    let mut resource_spans = Vec::with_capacity(resource.len() + scope.len() + 16);
    length_delimited(1, resource.len(), &mut resource_spans);
    resource_spans.extend_from_slice(&resource);
    length_delimited(2, scope_spans_len, &mut resource_spans);
    resource_spans.extend_from_slice(&scope);
    // ExportTraceServiceRequest { resource_spans = 1 }
    let mut head = Vec::with_capacity(resource_spans.len() + 8);
    length_delimited(1, resource_spans.len() + entries_len, &mut head);
    head.extend_from_slice(&resource_spans);
    head
}

fn length_delimited(tag: u32, len: usize, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

fn span(s: &Span) -> pb::Span {
    pb::Span {
        trace_id: s.trace_id.to_be_bytes().to_vec(),
        span_id: s.span_id.to_be_bytes().to_vec(),
        trace_state: s.trace_state.clone(),
        parent_span_id: s
            .parent_id
            .map(|p| p.to_be_bytes().to_vec())
            .unwrap_or_default(),
        flags: wire::flags(s),
        name: s.name.to_string(),
        kind: s.kind,
        start_time_unix_nano: s.start_unix_nano,
        end_time_unix_nano: s.end_unix_nano,
        attributes: key_values(&s.attributes),
        events: s
            .events
            .iter()
            .map(|e| pb::Event {
                time_unix_nano: e.time_unix_nano,
                name: e.name.to_string(),
                attributes: key_values(&e.attributes),
            })
            .collect(),
        status: Some(pb::Status {
            message: String::new(),
            code: if s.error { STATUS_ERROR } else { 0 },
        }),
    }
}

fn key_values(attrs: &Attributes) -> Vec<pb::KeyValue> {
    attrs
        .iter()
        .map(|(k, v)| pb::KeyValue {
            key: k.to_string(),
            value: Some(any_value(v)),
        })
        .collect()
}

fn any_value(v: &Value) -> pb::AnyValue {
    use pb::any_value::Value as V;
    let value = match v {
        Value::Str(s) => V::String(s.clone()),
        Value::Bool(b) => V::Bool(*b),
        Value::Int(i) => V::Int(*i),
        Value::Double(d) => V::Double(*d),
        Value::Bytes(b) => V::Bytes(b.clone()),
        Value::Array(items) => V::Array(pb::ArrayValue {
            values: items.iter().map(any_value).collect(),
        }),
    };
    pb::AnyValue { value: Some(value) }
}

/// The messages of opentelemetry-proto's trace/v1, collector/trace/v1 and common/v1 that
/// edgegw writes (field numbers as in the .proto files; fields it never sets left out).
pub(crate) mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(string, tag = "3")]
        pub trace_state: String,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(fixed32, tag = "16")]
        pub flags: u32,
        #[prost(string, tag = "5")]
        pub name: String,
        #[prost(int32, tag = "6")]
        pub kind: i32,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(message, repeated, tag = "11")]
        pub events: Vec<Event>,
        #[prost(message, optional, tag = "15")]
        pub status: Option<Status>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Event {
        #[prost(fixed64, tag = "1")]
        pub time_unix_nano: u64,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(message, repeated, tag = "3")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(int32, tag = "3")]
        pub code: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 4, 5, 7")]
        pub value: Option<any_value::Value>,
    }

    pub mod any_value {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(string, tag = "1")]
            String(String),
            #[prost(bool, tag = "2")]
            Bool(bool),
            #[prost(int64, tag = "3")]
            Int(i64),
            #[prost(double, tag = "4")]
            Double(f64),
            #[prost(message, tag = "5")]
            Array(super::ArrayValue),
            #[prost(bytes = "vec", tag = "7")]
            Bytes(Vec<u8>),
        }
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ArrayValue {
        #[prost(message, repeated, tag = "1")]
        pub values: Vec<AnyValue>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::any_value::Value as V;

    fn server_span() -> Span {
        Span {
            trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
            span_id: 0x1122334455667788,
            parent_id: Some(0x00f067aa0ba902b7),
            remote_parent: true,
            trace_state: "vendor=1".into(),
            name: "POST /v1/chat/completions".into(),
            kind: 2,
            start_unix_nano: 1_700_000_000_000_000_000,
            end_unix_nano: 1_700_000_000_001_000_000,
            attributes: vec![
                ("http.response.status_code".into(), Value::Int(200)),
                ("gen_ai.request.model".into(), Value::Str("gpt-4o".into())),
                (
                    "gen_ai.server.time_to_first_token".into(),
                    Value::Double(0.25),
                ),
                ("edgegw.cached".into(), Value::Bool(false)),
                ("raw".into(), Value::Bytes(vec![0, 255])),
                (
                    "gen_ai.response.finish_reasons".into(),
                    Value::Array(vec![Value::Str("stop".into()), Value::Int(-1)]),
                ),
            ],
            events: vec![Event {
                name: "gen_ai.content.prompt".into(),
                time_unix_nano: 1_700_000_000_000_500_000,
                attributes: vec![("gen_ai.content".into(), Value::Str("hi".into()))],
            }],
            error: true,
        }
    }

    fn decoded(data: &[u8]) -> pb::ExportTraceServiceRequest {
        pb::ExportTraceServiceRequest::decode(data).unwrap()
    }

    #[test]
    fn a_span_decodes_as_it_was_given() {
        let resource = vec![("service.name".into(), Value::Str("edgegw".into()))];
        let request = decoded(&encode_spans(
            &resource,
            "edgegw",
            "0.1.0",
            &[server_span()],
        ));
        assert_eq!(request.resource_spans.len(), 1);
        let rs = &request.resource_spans[0];
        let res = rs.resource.as_ref().unwrap();
        assert_eq!(res.attributes[0].key, "service.name");
        assert_eq!(
            res.attributes[0].value.as_ref().unwrap().value,
            Some(V::String("edgegw".into()))
        );
        let scope = &rs.scope_spans[0];
        let sc = scope.scope.as_ref().unwrap();
        assert_eq!((sc.name.as_str(), sc.version.as_str()), ("edgegw", "0.1.0"));
        let s = &scope.spans[0];
        assert_eq!(
            hex(&s.trace_id),
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "trace id big-endian, 16 bytes"
        );
        assert_eq!(hex(&s.span_id), "1122334455667788");
        assert_eq!(hex(&s.parent_span_id), "00f067aa0ba902b7");
        assert_eq!(s.trace_state, "vendor=1");
        assert_eq!(s.flags, 0x301);
        assert_eq!(s.name, "POST /v1/chat/completions");
        assert_eq!(s.kind, 2);
        assert_eq!(s.start_time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(s.end_time_unix_nano, 1_700_000_000_001_000_000);
        assert_eq!(s.status.as_ref().unwrap().code, STATUS_ERROR);
        let values: Vec<_> = s
            .attributes
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.clone().unwrap().value.unwrap()))
            .collect();
        assert_eq!(values[0], ("http.response.status_code", V::Int(200)));
        assert_eq!(
            values[1],
            ("gen_ai.request.model", V::String("gpt-4o".into()))
        );
        assert_eq!(values[2].1, V::Double(0.25));
        assert_eq!(values[3].1, V::Bool(false));
        assert_eq!(values[4].1, V::Bytes(vec![0, 255]));
        let V::Array(array) = &values[5].1 else {
            panic!("not an array: {:?}", values[5]);
        };
        let items: Vec<_> = array
            .values
            .iter()
            .map(|v| v.value.clone().unwrap())
            .collect();
        assert_eq!(items, vec![V::String("stop".into()), V::Int(-1)]);
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.events[0].name, "gen_ai.content.prompt");
        assert_eq!(s.events[0].time_unix_nano, 1_700_000_000_000_500_000);
        assert_eq!(s.events[0].attributes[0].key, "gen_ai.content");
    }

    #[test]
    fn a_root_span_has_no_parent_and_a_local_parent_is_not_remote() {
        let mut root = server_span();
        root.parent_id = None;
        root.error = false;
        let mut child = server_span();
        child.remote_parent = false;
        let request = decoded(&encode_spans(&vec![], "edgegw", "", &[root, child]));
        let spans = &request.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 2);
        assert!(spans[0].parent_span_id.is_empty());
        assert_eq!(spans[0].flags, 0x101);
        assert_eq!(spans[0].status.as_ref().unwrap().code, 0);
        assert_eq!(spans[1].flags, 0x101);
        assert_eq!(hex(&spans[1].parent_span_id), "00f067aa0ba902b7");
    }

    #[test]
    fn entries_make_the_bytes_of_the_whole_batch() {
        let resource = vec![("service.name".into(), Value::Str("edgegw".into()))];
        let mut child = server_span();
        child.parent_id = None;
        child.events.clear();
        let spans = [server_span(), child];
        let entries: Vec<Vec<u8>> = spans.iter().map(encode_span_entry).collect();
        let whole = encode_spans(&resource, "edgegw", "0.1.0", &spans);
        assert_eq!(encode_batch(&resource, "edgegw", "0.1.0", &entries), whole);
        let none: [Vec<u8>; 0] = [];
        assert_eq!(
            encode_batch(&resource, "edgegw", "0.1.0", &none),
            encode_spans(&resource, "edgegw", "0.1.0", &[])
        );
        assert_eq!(
            decoded(&whole).resource_spans[0].scope_spans[0].spans.len(),
            2
        );
    }

    #[test]
    fn entries_are_the_bytes_prost_writes() {
        let mut spans = vec![server_span()];
        // Every field at its default, where proto3 leaves it out (an empty key, a zero
        // kind and times), and every value at its own, which a oneof writes.
        spans.push(Span {
            trace_id: 1,
            span_id: u64::MAX,
            parent_id: None,
            remote_parent: true,
            trace_state: String::new(),
            name: "".into(),
            kind: 0,
            start_unix_nano: 0,
            end_unix_nano: 0,
            attributes: vec![
                ("".into(), Value::Str(String::new())),
                ("zero".into(), Value::Int(0)),
                ("min".into(), Value::Int(i64::MIN)),
                ("no".into(), Value::Bool(false)),
                ("nought".into(), Value::Double(0.0)),
                ("empty".into(), Value::Bytes(vec![])),
                ("none".into(), Value::Array(vec![])),
                (
                    "nested".into(),
                    Value::Array(vec![Value::Array(vec![Value::Str("x".repeat(300))])]),
                ),
            ],
            events: vec![Event {
                name: "".into(),
                time_unix_nano: 0,
                attributes: vec![],
            }],
            error: false,
        });
        let mut long = server_span();
        long.name = "n".repeat(20_000).into();
        long.parent_id = Some(0);
        long.remote_parent = false;
        long.attributes = (0..200)
            .map(|i| (format!("k{i}").into(), Value::Int(i)))
            .collect();
        spans.push(long);
        for s in &spans {
            let message = span(s);
            let mut expected = Vec::new();
            length_delimited(SCOPE_SPANS_SPAN, message.encoded_len(), &mut expected);
            message.encode(&mut expected).unwrap();
            assert_eq!(encode_span_entry(s), expected, "{:?}", s.name.get(..20));
        }
    }

    #[test]
    fn an_empty_batch_is_a_valid_request() {
        let request = decoded(&encode_spans(&vec![], "edgegw", "0.1.0", &[]));
        assert!(request.resource_spans[0].scope_spans[0].spans.is_empty());
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
