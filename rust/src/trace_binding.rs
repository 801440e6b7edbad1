//! The OTLP trace encoder's binding (rust/src/otlp_trace.rs), apart from the rest.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::otlp_trace::{self, Attributes, Event, Span, Value};

/// A Python attribute value as the SDK's encoder takes it; None for what it would
/// drop (other types, an int outside int64).
fn value(v: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
    Ok(Some(if let Ok(s) = v.cast::<PyString>() {
        Value::Str(s.to_str()?.to_owned())
    } else if let Ok(b) = v.cast::<PyBool>() {
        Value::Bool(b.is_true())
    } else if v.is_instance_of::<PyInt>() {
        match v.extract::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => return Ok(None),
        }
    } else if let Ok(f) = v.cast::<PyFloat>() {
        Value::Double(f.value())
    } else if let Ok(b) = v.cast::<PyBytes>() {
        Value::Bytes(b.as_bytes().to_vec())
    } else if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for item in v.try_iter()? {
            if let Some(x) = value(&item?)? {
                items.push(x);
            }
        }
        Value::Array(items)
    } else {
        return Ok(None);
    }))
}

fn attributes(d: &Bound<'_, PyAny>) -> PyResult<Attributes> {
    let d = d
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("span attributes must be a dict"))?;
    let mut out = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        if let Some(v) = value(&v)? {
            out.push((k.extract::<String>()?, v));
        }
    }
    Ok(out)
}

#[allow(clippy::type_complexity)]
type SpanArgs<'py> = (
    String,
    (u128, u64, Option<u64>),
    bool,
    i32,
    Bound<'py, PyAny>,
    Option<Vec<(String, Bound<'py, PyAny>, u64)>>,
    (u64, u64),
    bool,
    String,
);

fn span(t: &Bound<'_, PyAny>) -> PyResult<Span> {
    let args: SpanArgs<'_> = t.extract()?;
    make_span(args)
}

fn make_span(args: SpanArgs<'_>) -> PyResult<Span> {
    let (name, ids, remote_parent, kind, attrs, events, times, error, trace_state) = args;
    let events = events
        .unwrap_or_default()
        .into_iter()
        .map(|(name, a, time_unix_nano)| {
            Ok(Event {
                name,
                time_unix_nano,
                attributes: attributes(&a)?,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Span {
        trace_id: ids.0,
        span_id: ids.1,
        parent_id: ids.2,
        remote_parent,
        trace_state,
        name,
        kind,
        start_unix_nano: times.0,
        end_unix_nano: times.1,
        attributes: attributes(&attrs)?,
        events,
        error,
    })
}

/// One trace's ended spans as entries of a batch (`encode_otlp_batch`), one after the
/// other: `spans` are tuples (name, span id, parent span id or None, remote parent,
/// kind, attributes, events or None, start ns, end ns, error), all of trace
/// `trace_id` with `trace_state`. One call a request: it holds the GIL for a few µs.
#[pyfunction]
fn encode_otlp_trace<'py>(
    py: Python<'py>,
    trace_id: u128,
    trace_state: String,
    spans: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::with_capacity(spans.len() * 256);
    for t in spans.iter() {
        #[allow(clippy::type_complexity)]
        let (name, span_id, parent_id, remote_parent, kind, attrs, events, start, end, error): (
            String,
            u64,
            Option<u64>,
            bool,
            i32,
            Bound<'_, PyAny>,
            Option<Vec<(String, Bound<'_, PyAny>, u64)>>,
            u64,
            u64,
            bool,
        ) = t.extract()?;
        let span = make_span((
            name,
            (trace_id, span_id, parent_id),
            remote_parent,
            kind,
            attrs,
            events,
            (start, end),
            error,
            trace_state.clone(),
        ))?;
        out.extend_from_slice(&otlp_trace::encode_span_entry(&span));
    }
    Ok(PyBytes::new(py, &out))
}

/// The `ExportTraceServiceRequest` of the entries `encode_otlp_trace` made: the bytes
/// `encode_otlp_spans` writes for the same spans.
#[pyfunction]
fn encode_otlp_batch<'py>(
    py: Python<'py>,
    resource: &Bound<'py, PyAny>,
    scope_name: &str,
    scope_version: &str,
    entries: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyBytes>> {
    let resource = attributes(resource)?;
    let entries = entries
        .iter()
        .map(|e| e.cast_into::<PyBytes>().map_err(PyErr::from))
        .collect::<PyResult<Vec<_>>>()?;
    let len = entries.iter().map(|b| b.as_bytes().len()).sum();
    let head = otlp_trace::batch_head(&resource, scope_name, scope_version, len);
    // Written once, straight into the bytes object (otlp_trace::batch_head).
    PyBytes::new_with(py, head.len() + len, |out| {
        out[..head.len()].copy_from_slice(&head);
        let mut at = head.len();
        for entry in &entries {
            let b = entry.as_bytes();
            out[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        Ok(())
    })
}

/// The protobuf `ExportTraceServiceRequest` of `spans` (tuples: name, (trace id, span
/// id, parent id or None), remote parent, kind, attributes, events or None, (start ns,
/// end ns), error, tracestate) under one resource and scope; encoded without the GIL.
#[pyfunction]
fn encode_otlp_spans<'py>(
    py: Python<'py>,
    resource: &Bound<'py, PyAny>,
    scope_name: &str,
    scope_version: &str,
    spans: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyBytes>> {
    let resource = attributes(resource)?;
    let spans = spans
        .iter()
        .map(|t| span(&t))
        .collect::<PyResult<Vec<_>>>()?;
    let data = py.detach(|| otlp_trace::encode_spans(&resource, scope_name, scope_version, &spans));
    Ok(PyBytes::new(py, &data))
}

/// One request's spans, recorded in Rust as they happen: the tracer's hooks call in with
/// a span's index, and no Python object holds a span's attributes, events or times (a
/// dict, a list and a tuple a span had been, every one walked by each young-generation
/// collection while its request ran; bench/README.md). Ended spans leave as entries of a
/// batch (`take_ended`), the bytes `encode_otlp_trace` makes of the same spans.
#[pyclass(module = "edgegw._core")]
struct TraceRecord {
    trace_id: u128,
    trace_state: String,
    /// The span ids of `open`: a bijection of (seed, index), so distinct in a record.
    seed: u64,
    spans: Vec<Span>,
    /// Per span: ended, and whether its entry was taken.
    ended: Vec<bool>,
    taken: Vec<bool>,
}

fn set_one(attrs: &mut Attributes, key: String, v: &Bound<'_, PyAny>) -> PyResult<()> {
    // A dict's semantics: a key set again keeps its place; a value the encoder drops
    // (`value` None) leaves the key out.
    let v = value(v)?;
    set_value(attrs, key, v);
    Ok(())
}

fn set_value(attrs: &mut Attributes, key: String, v: Option<Value>) {
    match (attrs.iter().position(|(k, _)| *k == key), v) {
        (Some(i), Some(v)) => attrs[i].1 = v,
        (Some(i), None) => {
            attrs.remove(i);
        }
        (None, Some(v)) => attrs.push((key, v)),
        (None, None) => {}
    }
}

fn set_str(attrs: &mut Attributes, key: &str, v: &str) {
    set_value(attrs, key.to_owned(), Some(Value::Str(v.to_owned())));
}

/// An attribute value from a client (a model name): its first MAX_ATTRIBUTE_CHARS
/// characters (edgegw.telemetry.tracing.clip).
fn clip(s: &str) -> String {
    const MAX_ATTRIBUTE_CHARS: usize = 256;
    match s.char_indices().nth(MAX_ATTRIBUTE_CHARS) {
        Some((end, _)) => s[..end].to_owned(),
        None => s.to_owned(),
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// splitmix64's finalizer over the seed's sequence: never 0 (an invalid span id).
fn mixed_id(seed: u64, k: u64) -> u64 {
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

/// A usage member as the GenAI attribute takes it: an int (not a bool) in int64.
fn token_count(usage: &Bound<'_, PyDict>, first: &str, other: &str) -> PyResult<Option<i64>> {
    let mut n = usage.get_item(first)?;
    if n.as_ref().is_none_or(|v| v.is_none()) {
        n = usage.get_item(other)?;
    }
    Ok(match n {
        Some(v) if v.is_exact_instance_of::<PyInt>() => v.extract::<i64>().ok(),
        _ => None,
    })
}

// opentelemetry-proto's SpanKind.
const INTERNAL: i32 = 1;
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

type Ended<'py> = Option<(Bound<'py, PyBytes>, usize)>;

impl TraceRecord {
    fn at(&mut self, i: usize) -> PyResult<&mut Span> {
        self.spans
            .get_mut(i)
            .ok_or_else(|| pyo3::exceptions::PyIndexError::new_err("no such span"))
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        name: String,
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
    fn child(
        &mut self,
        name: String,
        parent: usize,
        kind: i32,
        start_ns: u64,
        attributes: Attributes,
    ) -> PyResult<usize> {
        let parent_id = self.at(parent)?.span_id;
        let id = mixed_id(self.seed, self.spans.len() as u64);
        Ok(self.push(name, id, Some(parent_id), false, kind, start_ns, attributes))
    }

    fn mark_failed(&mut self, i: usize, code: &str) -> PyResult<()> {
        let span = self.at(i)?;
        set_str(&mut span.attributes, "error.type", code);
        span.error = true;
        Ok(())
    }

    fn entries<'py>(&mut self, py: Python<'py>) -> (Bound<'py, PyBytes>, usize) {
        let mut out = Vec::with_capacity(512 * self.spans.len());
        let mut n = 0;
        for (i, span) in self.spans.iter().enumerate() {
            if self.ended[i] && !self.taken[i] {
                self.taken[i] = true;
                out.extend_from_slice(&otlp_trace::encode_span_entry(span));
                n += 1;
            }
        }
        (PyBytes::new(py, &out), n)
    }

    /// Ends span `i` now (once; a second call does nothing): the entries to export once
    /// the server span has ended, else None.
    fn close_at<'py>(&mut self, py: Python<'py>, i: usize) -> PyResult<Ended<'py>> {
        if *self.ended.get(i).unwrap_or(&true) {
            self.at(i)?;
            return Ok(None);
        }
        self.spans[i].end_unix_nano = now_ns();
        self.ended[i] = true;
        Ok(if self.ended[0] {
            Some(self.entries(py))
        } else {
            None
        })
    }
}

#[pymethods]
impl TraceRecord {
    #[new]
    #[pyo3(signature = (trace_id, trace_state, seed=0))]
    fn new(trace_id: u128, trace_state: String, seed: u64) -> Self {
        TraceRecord {
            trace_id,
            trace_state,
            seed,
            spans: Vec::with_capacity(4),
            ended: Vec::with_capacity(4),
            taken: Vec::with_capacity(4),
        }
    }

    /// A new span; returns its index, the handle of every other call.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (name, span_id, parent_id, remote_parent, kind, start_ns, attrs=None))]
    fn start(
        &mut self,
        name: String,
        span_id: u64,
        parent_id: Option<u64>,
        remote_parent: bool,
        kind: i32,
        start_ns: u64,
        attrs: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let attributes = match attrs {
            Some(a) => attributes(a)?,
            None => Vec::new(),
        };
        Ok(self.push(
            name,
            span_id,
            parent_id,
            remote_parent,
            kind,
            start_ns,
            attributes,
        ))
    }

    /// The request's server span, now, continuing the client's span `parent_id` (a
    /// remote parent) when there is one: `{method} {path}` with the request's method,
    /// path and id. Its index is 0.
    fn open_server(
        &mut self,
        method: &str,
        path: &str,
        request_id: &str,
        parent_id: Option<u64>,
    ) -> usize {
        let attributes = vec![
            (
                "http.request.method".to_owned(),
                Value::Str(method.to_owned()),
            ),
            ("url.path".to_owned(), Value::Str(path.to_owned())),
            (
                "edgegw.request_id".to_owned(),
                Value::Str(request_id.to_owned()),
            ),
        ];
        let id = mixed_id(self.seed, self.spans.len() as u64);
        let remote = parent_id.is_some();
        self.push(
            format!("{method} {path}"),
            id,
            parent_id,
            remote,
            SERVER,
            now_ns(),
            attributes,
        )
    }

    /// A child of span `parent` (`kind` INTERNAL or CLIENT), now or at `start_ns`.
    #[pyo3(signature = (name, parent, kind, attrs=None, start_ns=None))]
    fn open(
        &mut self,
        name: String,
        parent: usize,
        kind: i32,
        attrs: Option<&Bound<'_, PyAny>>,
        start_ns: Option<u64>,
    ) -> PyResult<usize> {
        let attributes = match attrs {
            Some(a) => attributes(a)?,
            None => Vec::new(),
        };
        self.child(
            name,
            parent,
            kind,
            start_ns.unwrap_or_else(now_ns),
            attributes,
        )
    }

    /// An upstream attempt, a CLIENT child of the server span: `{method} {path}` (the
    /// target's path, latin-1), with its method, server address and port, and path.
    fn open_attempt(
        &mut self,
        method: &[u8],
        target: &[u8],
        host: &str,
        port: i64,
    ) -> PyResult<usize> {
        let method: String = method.iter().map(|&b| b as char).collect();
        let path_end = memchr::memchr(b'?', target).unwrap_or(target.len());
        let path: String = target[..path_end].iter().map(|&b| b as char).collect();
        let attributes = vec![
            ("http.request.method".to_owned(), Value::Str(method.clone())),
            ("server.address".to_owned(), Value::Str(host.to_owned())),
            ("server.port".to_owned(), Value::Int(port)),
            ("url.path".to_owned(), Value::Str(path.clone())),
        ];
        self.child(format!("{method} {path}"), 0, CLIENT, now_ns(), attributes)
    }

    /// Ends attempt `i` with the upstream's status (5xx: failed, `error.type` the
    /// status) and whether it opened its connection.
    fn close_attempt<'py>(
        &mut self,
        py: Python<'py>,
        i: usize,
        status: i64,
        new_connection: bool,
    ) -> PyResult<Ended<'py>> {
        let span = self.at(i)?;
        set_value(
            &mut span.attributes,
            "http.response.status_code".to_owned(),
            Some(Value::Int(status)),
        );
        set_value(
            &mut span.attributes,
            "edgegw.upstream.new_connection".to_owned(),
            Some(Value::Bool(new_connection)),
        );
        if status >= 500 {
            self.mark_failed(i, &status.to_string())?;
        }
        self.close_at(py, i)
    }

    /// A connection opened for span `parent`, from `start_ns` to now: a `connect` child,
    /// failed with `error` when it did.
    #[pyo3(signature = (parent, start_ns, host, port, error=None))]
    fn connect<'py>(
        &mut self,
        py: Python<'py>,
        parent: usize,
        start_ns: u64,
        host: &str,
        port: i64,
        error: Option<&str>,
    ) -> PyResult<Ended<'py>> {
        let attributes = vec![
            ("server.address".to_owned(), Value::Str(host.to_owned())),
            ("server.port".to_owned(), Value::Int(port)),
        ];
        let i = self.child("connect".to_owned(), parent, INTERNAL, start_ns, attributes)?;
        if let Some(code) = error {
            self.mark_failed(i, code)?;
        }
        self.close_at(py, i)
    }

    /// The W3C `traceparent` naming span `i` as the parent (sampled).
    fn traceparent<'py>(&mut self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyBytes>> {
        let span_id = self.at(i)?.span_id;
        let value = format!("00-{:032x}-{:016x}-01", self.trace_id, span_id);
        Ok(PyBytes::new(py, value.as_bytes()))
    }

    fn span_id(&mut self, i: usize) -> PyResult<u64> {
        Ok(self.at(i)?.span_id)
    }

    fn set(&mut self, i: usize, key: String, value: &Bound<'_, PyAny>) -> PyResult<()> {
        set_one(&mut self.at(i)?.attributes, key, value)
    }

    /// Every item of a dict, as `set` would.
    fn update(&mut self, i: usize, attrs: &Bound<'_, PyDict>) -> PyResult<()> {
        let span = self.at(i)?;
        for (k, v) in attrs.iter() {
            set_one(&mut span.attributes, k.extract()?, &v)?;
        }
        Ok(())
    }

    /// Span `i` failed: `error.type` is `code`, its status an error.
    fn fail(&mut self, i: usize, code: &str) -> PyResult<()> {
        self.mark_failed(i, code)
    }

    /// The GenAI semantic-convention attributes of a chat or completions request, on
    /// the server span: operation, provider (and its older name `gen_ai.system`),
    /// request and response model (clipped), token usage (OpenAI's or Anthropic's
    /// member names), finish reasons, time to first token.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (operation, provider, model, response_model, usage, finish_reasons, ttft_s))]
    fn generation(
        &mut self,
        operation: &str,
        provider: &str,
        model: &str,
        response_model: Option<&str>,
        usage: Option<&Bound<'_, PyDict>>,
        finish_reasons: Vec<String>,
        ttft_s: Option<f64>,
    ) -> PyResult<()> {
        let mut tokens = (None, None);
        if let Some(u) = usage {
            tokens = (
                token_count(u, "prompt_tokens", "input_tokens")?,
                token_count(u, "completion_tokens", "output_tokens")?,
            );
        }
        let attrs = &mut self.at(0)?.attributes;
        set_str(attrs, "gen_ai.operation.name", operation);
        set_str(attrs, "gen_ai.provider.name", provider);
        set_str(attrs, "gen_ai.system", provider);
        set_value(
            attrs,
            "gen_ai.request.model".to_owned(),
            Some(Value::Str(clip(model))),
        );
        if let Some(m) = response_model.filter(|m| !m.is_empty()) {
            set_value(
                attrs,
                "gen_ai.response.model".to_owned(),
                Some(Value::Str(clip(m))),
            );
        }
        if let Some(n) = tokens.0 {
            set_value(
                attrs,
                "gen_ai.usage.input_tokens".to_owned(),
                Some(Value::Int(n)),
            );
        }
        if let Some(n) = tokens.1 {
            set_value(
                attrs,
                "gen_ai.usage.output_tokens".to_owned(),
                Some(Value::Int(n)),
            );
        }
        if !finish_reasons.is_empty() {
            let reasons = finish_reasons.iter().map(|r| Value::Str(clip(r))).collect();
            set_value(
                attrs,
                "gen_ai.response.finish_reasons".to_owned(),
                Some(Value::Array(reasons)),
            );
        }
        if let Some(t) = ttft_s {
            set_value(
                attrs,
                "gen_ai.server.time_to_first_token".to_owned(),
                Some(Value::Double(t)),
            );
        }
        Ok(())
    }

    /// Ends the server span with the answer's status (None: none was sent) and the
    /// error code that ended the request: failed on an error, no answer or a 5xx.
    /// Returns the entries to export.
    #[pyo3(signature = (status, error=None))]
    fn finish<'py>(
        &mut self,
        py: Python<'py>,
        status: Option<i64>,
        error: Option<&str>,
    ) -> PyResult<Ended<'py>> {
        let span = self.at(0)?;
        if let Some(s) = status {
            set_value(
                &mut span.attributes,
                "http.response.status_code".to_owned(),
                Some(Value::Int(s)),
            );
        }
        if let Some(code) = error {
            set_str(&mut span.attributes, "error.type", code);
        }
        if error.is_some() || status.is_none_or(|s| s >= 500) {
            span.error = true;
        }
        self.close_at(py, 0)
    }

    /// A span event, unless the span holds `limit` already; false when it was not kept.
    fn event(
        &mut self,
        i: usize,
        name: String,
        attrs: &Bound<'_, PyAny>,
        time_ns: u64,
        limit: usize,
    ) -> PyResult<bool> {
        let attributes = attributes(attrs)?;
        let span = self.at(i)?;
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

    /// Ends span `i` now (once): the entries to export once the server span has ended.
    fn close<'py>(&mut self, py: Python<'py>, i: usize) -> PyResult<Ended<'py>> {
        self.close_at(py, i)
    }

    /// Ends span `i` at `end_ns`, failed if `error`; true once the first span (the
    /// request's server span) has ended, when what ended is to be exported.
    fn end(&mut self, i: usize, end_ns: u64, error: bool) -> PyResult<bool> {
        let span = self.at(i)?;
        span.end_unix_nano = end_ns;
        span.error = error;
        self.ended[i] = true;
        Ok(self.ended[0])
    }

    /// The entries of the spans ended since the last call, and how many.
    fn take_ended<'py>(&mut self, py: Python<'py>) -> (Bound<'py, PyBytes>, usize) {
        self.entries(py)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_otlp_spans, m)?)?;
    m.add_function(wrap_pyfunction!(encode_otlp_trace, m)?)?;
    m.add_class::<TraceRecord>()?;
    m.add_function(wrap_pyfunction!(encode_otlp_batch, m)?)
}
