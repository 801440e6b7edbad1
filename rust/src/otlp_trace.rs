//! OTLP trace export: the protobuf `ExportTraceServiceRequest` of a batch of ended spans
//! (one resource, one instrumentation scope), as the OpenTelemetry SDK's `encode_spans`
//! writes it. Pure: no I/O, no pyo3 (the binding is in lib.rs). edgegw's export pipeline
//! (edgegw/telemetry/otelsdk.py) calls it instead of the SDK's Python encoder, which cost
//! 270-345 µs of a request's four spans (bench/README.md).
//!
//! Two ways to the same bytes: `encode_spans` (a whole batch at once), and
//! `encode_span_entry` as each span ends plus `encode_batch` over the entries. The second
//! is what the gateway uses: a span's attributes are read while still in the cache, and a
//! batch no longer holds the event loop for the 3-4 ms of encoding 512 spans at once.

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

pub type Attributes = Vec<(String, Value)>;

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: String,
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
    pub name: String,
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
/// concatenations of entries (`encode_batch`).
pub fn encode_span_entry(s: &Span) -> Vec<u8> {
    let message = span(s);
    let len = message.encoded_len();
    let mut out = Vec::with_capacity(len + 8);
    length_delimited(SCOPE_SPANS_SPAN, len, &mut out);
    message
        .encode(&mut out)
        .expect("a Vec grows to take any message");
    out
}

/// The `ExportTraceServiceRequest` of the spans whose entries are `entries`: the bytes
/// `encode_spans` writes for those spans.
pub fn encode_batch<E: AsRef<[u8]>>(
    resource: &Attributes,
    scope_name: &str,
    scope_version: &str,
    entries: &[E],
) -> Vec<u8> {
    let mut scope_spans = pb::ScopeSpans {
        scope: Some(pb::InstrumentationScope {
            name: scope_name.to_string(),
            version: scope_version.to_string(),
        }),
        spans: Vec::new(),
    }
    .encode_to_vec();
    for entry in entries {
        scope_spans.extend_from_slice(entry.as_ref());
    }
    let resource = pb::Resource {
        attributes: key_values(resource),
    }
    .encode_to_vec();
    // ResourceSpans { resource = 1, scope_spans = 2 }
    let mut resource_spans = Vec::with_capacity(resource.len() + scope_spans.len() + 16);
    length_delimited(1, resource.len(), &mut resource_spans);
    resource_spans.extend_from_slice(&resource);
    length_delimited(2, scope_spans.len(), &mut resource_spans);
    resource_spans.extend_from_slice(&scope_spans);
    // ExportTraceServiceRequest { resource_spans = 1 }
    let mut request = Vec::with_capacity(resource_spans.len() + 8);
    length_delimited(1, resource_spans.len(), &mut request);
    request.extend_from_slice(&resource_spans);
    request
}

fn length_delimited(tag: u32, len: usize, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

fn span(s: &Span) -> pb::Span {
    let mut flags = FLAGS_SAMPLED | FLAGS_HAS_IS_REMOTE;
    if s.parent_id.is_some() && s.remote_parent {
        flags |= FLAGS_IS_REMOTE;
    }
    pb::Span {
        trace_id: s.trace_id.to_be_bytes().to_vec(),
        span_id: s.span_id.to_be_bytes().to_vec(),
        trace_state: s.trace_state.clone(),
        parent_span_id: s
            .parent_id
            .map(|p| p.to_be_bytes().to_vec())
            .unwrap_or_default(),
        flags,
        name: s.name.clone(),
        kind: s.kind,
        start_time_unix_nano: s.start_unix_nano,
        end_time_unix_nano: s.end_unix_nano,
        attributes: key_values(&s.attributes),
        events: s
            .events
            .iter()
            .map(|e| pb::Event {
                time_unix_nano: e.time_unix_nano,
                name: e.name.clone(),
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
            key: k.clone(),
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
        let resource = vec![("service.name".to_string(), Value::Str("edgegw".into()))];
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
        let resource = vec![("service.name".to_string(), Value::Str("edgegw".into()))];
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
    fn an_empty_batch_is_a_valid_request() {
        let request = decoded(&encode_spans(&vec![], "edgegw", "0.1.0", &[]));
        assert!(request.resource_spans[0].scope_spans[0].spans.is_empty());
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
