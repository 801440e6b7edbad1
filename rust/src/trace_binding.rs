//! Tracing's binding: Python values to the types of rust/src/trace.rs and
//! rust/src/otlp_trace.rs, and back.

use pyo3::exceptions::PyTypeError;
use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::otlp_trace::{self, Attributes, Event, Key, Span, Value};
use crate::trace::{
    clip, clip_to, key_of, mixed_id, now_ns, parse_traceparent, set_str, set_value, trace_id_hex,
    traceparent, CLIENT, CLIENT_ATTRIBUTES, INTERNAL, MAX_CONTENT_CHARS, MAX_EVENTS, SERVER,
    SERVER_ATTRIBUTES,
};

/// A Python str as a key (KNOWN_NAMES).
fn py_key(k: &Bound<'_, PyAny>) -> PyResult<Key> {
    let s = k
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("attribute keys must be str"))?;
    Ok(key_of(s.to_str()?))
}

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
            out.push((py_key(&k)?, v));
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
                name: name.into(),
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
        name: name.into(),
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

/// A client's trace context from a request's headers (name, value pairs of bytes; the last
/// `traceparent` and `tracestate`, as the SDK's dict carrier kept them): (trace id, span
/// id, sampled, the `tracestate` value or None), None without a valid `traceparent`
/// (`parse_traceparent`). One call: the Python reader's header loop, regex and int parsing
/// cost a traced request ~3 µs in process (edgegw.telemetry.otelsdk.read_parent).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn read_traceparent<'py>(
    headers: &Bound<'py, PyAny>,
) -> PyResult<Option<(u128, u64, bool, Option<Bound<'py, PyBytes>>)>> {
    let mut parent: Option<Bound<'py, PyBytes>> = None;
    let mut state: Option<Bound<'py, PyBytes>> = None;
    for item in headers.try_iter()? {
        let item = item?;
        let Ok(pair) = item.cast::<PyTuple>() else {
            continue;
        };
        if pair.len() != 2 {
            continue;
        }
        let Ok(name) = pair.get_item(0)?.cast_into::<PyBytes>() else {
            continue;
        };
        let slot = match name.as_bytes() {
            b"traceparent" => &mut parent,
            b"tracestate" => &mut state,
            _ => continue,
        };
        *slot = pair.get_item(1)?.cast_into::<PyBytes>().ok();
    }
    let Some(parsed) = parent.and_then(|p| parse_traceparent(p.as_bytes())) else {
        return Ok(None);
    };
    Ok(Some((parsed.0, parsed.1, parsed.2, state)))
}

/// Ended spans waiting for export, and the counts of what became of them: shared by every
/// request's record, which writes its spans here as entries of a batch when its server span
/// ends, and by the export task (edgegw.telemetry.otelsdk.Pipeline), which takes them a
/// batch at a time; all on the event loop's thread. At most `limit` spans wait (the SDK's
/// OTEL_BSP_MAX_QUEUE_SIZE); past that a trace's spans are dropped and counted.
/// The entries are one buffer, a trace's after another: no bytes object, tuple or Python
/// call a request (a `Pipeline.export` call and a deque of (bytes, n) had been; bench/README.md).
#[pyclass(module = "edgegw._core")]
struct SpanQueue {
    #[pyo3(get, set)]
    limit: usize,
    /// Spans waiting, taken or not yet.
    #[pyo3(get, set)]
    pending: usize,
    #[pyo3(get)]
    exported: u64,
    /// Spans a batch, at most (a trace's spans stay together).
    #[pyo3(get)]
    batch: usize,
    queue_full: u64,
    export_failed: u64,
    buf: Vec<u8>,
    /// Each waiting trace's entries in `buf`: (bytes, spans), in order.
    traces: VecDeque<(usize, usize)>,
}

impl SpanQueue {
    /// Room for `n` more spans (else they are counted dropped).
    fn admit(&mut self, n: usize) -> bool {
        if self.pending + n > self.limit {
            self.queue_full += n as u64;
            return false;
        }
        self.pending += n;
        true
    }
}

#[pymethods]
impl SpanQueue {
    #[new]
    #[pyo3(signature = (limit=2048, batch=512))]
    fn new(limit: usize, batch: usize) -> Self {
        SpanQueue {
            limit,
            pending: 0,
            exported: 0,
            batch,
            queue_full: 0,
            export_failed: 0,
            buf: Vec::new(),
            traces: VecDeque::new(),
        }
    }

    /// Spans dropped, by reason: `queue_full` (no room when their trace ended),
    /// `export_failed` (a batch the collector did not take).
    #[getter]
    fn dropped<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("queue_full", self.queue_full)?;
        d.set_item("export_failed", self.export_failed)?;
        Ok(d)
    }

    /// Whether a whole batch waits.
    fn full(&self) -> bool {
        self.pending >= self.batch
    }

    /// The next batch, whole traces up to `batch` spans: the `ExportTraceServiceRequest`
    /// under one resource and scope, and how many spans; None when nothing waits.
    fn take<'py>(
        &mut self,
        py: Python<'py>,
        resource: &Bound<'py, PyAny>,
        scope_name: &str,
        scope_version: &str,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, usize)>> {
        let (mut len, mut n) = (0, 0);
        while n < self.batch {
            let Some((l, k)) = self.traces.pop_front() else {
                break;
            };
            len += l;
            n += k;
        }
        if n == 0 {
            return Ok(None);
        }
        self.pending = self.pending.saturating_sub(n);
        let resource = attributes(resource)?;
        let head = otlp_trace::batch_head(&resource, scope_name, scope_version, len);
        let data = PyBytes::new_with(py, head.len() + len, |out| {
            out[..head.len()].copy_from_slice(&head);
            out[head.len()..].copy_from_slice(&self.buf[..len]);
            Ok(())
        })?;
        self.buf.drain(..len);
        Ok(Some((data, n)))
    }

    /// What became of a batch of `n` spans: exported, or dropped (`export_failed`).
    fn done(&mut self, n: usize, ok: bool) {
        if ok {
            self.exported += n as u64;
        } else {
            self.export_failed += n as u64;
        }
    }

    /// Forget what waits (not counted).
    fn clear(&mut self) {
        self.buf.clear();
        self.traces.clear();
        self.pending = 0;
    }
}

/// One request's trace: its spans, recorded in Rust as they happen, and the hooks the
/// request path calls (a span scope, an upstream attempt and its connect, the GenAI
/// attributes, the end), each one call with no Python frame around it: `Span` is a handle
/// (the record and an index) made here, its scope's `__enter__`/`__exit__` are Rust, and a
/// connection's hook is a Rust callable. The Python `RequestTrace` and `Span` classes these
/// replace cost 0.3-1 µs a call in process, about twice that under load (bench/README.md).
/// No Python object holds a span's attributes, events or times. When the server span ends
/// the ended spans are written to the queue as entries of a batch, the bytes
/// `encode_otlp_trace` makes of the same spans; a record without a queue keeps them for
/// `take_ended`.
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
    queue: Option<Py<SpanQueue>>,
    /// TELEMETRY_TRACING_CONTENT: the answer's text (edgegw.telemetry.tracing.Completion),
    /// fed by the relays; None when the setting is off, and then no content is recorded.
    completion: Option<Py<PyAny>>,
}

/// A handle on one span of a record (`TraceRecord.span`, `.attempt`, ...), and a span scope:
/// `with trace.span(...) as span:` ends it with its block, failed by an exception leaving
/// it. It holds the record, which holds no handle: no reference cycle.
#[pyclass(name = "Span", frozen, module = "edgegw._core")]
struct SpanHandle {
    record: Py<TraceRecord>,
    index: usize,
}

/// `UpstreamPool.send`'s hook for one upstream attempt: each connection it opens is a
/// `connect` child of the attempt's span (TCP connect and TLS handshake), failed with the
/// connect's error.
#[pyclass(frozen, module = "edgegw._core")]
struct ConnectHook {
    record: Py<TraceRecord>,
    index: usize,
    host: String,
    port: i64,
}

fn set_one(attrs: &mut Attributes, key: Key, v: &Bound<'_, PyAny>) -> PyResult<()> {
    // A dict's semantics: a key set again keeps its place; a value the encoder drops
    // (`value` None) leaves the key out.
    let v = value(v)?;
    set_value(attrs, key, v);
    Ok(())
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

/// A span's `error.type` (edgegw.telemetry.tracing.error_type): the code given, or an
/// exception's `code`, `reason` or class name.
fn error_type(e: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = e.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    for name in ["code", "reason"] {
        if let Ok(v) = e.getattr(name) {
            if v.is_truthy()? {
                return Ok(v.str()?.to_str()?.to_owned());
            }
        }
    }
    Ok(e.get_type().name()?.to_str()?.to_owned())
}

impl TraceRecord {
    fn at(&mut self, i: usize) -> PyResult<&mut Span> {
        self.spans
            .get_mut(i)
            .ok_or_else(|| pyo3::exceptions::PyIndexError::new_err("no such span"))
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
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
    fn child(
        &mut self,
        name: Key,
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

    fn add_event(&mut self, i: usize, name: Key, attributes: Attributes) -> PyResult<()> {
        let span = self.at(i)?;
        if span.events.len() < MAX_EVENTS {
            span.events.push(Event {
                name,
                time_unix_nano: now_ns(),
                attributes,
            });
        }
        Ok(())
    }

    fn entries<'py>(&mut self, py: Python<'py>) -> (Bound<'py, PyBytes>, usize) {
        let mut out = Vec::with_capacity(512 * self.spans.len());
        let mut n = 0;
        for (i, span) in self.spans.iter().enumerate() {
            if self.ended[i] && !self.taken[i] {
                self.taken[i] = true;
                otlp_trace::put_span_entry(span, &mut out);
                n += 1;
            }
        }
        (PyBytes::new(py, &out), n)
    }

    /// The spans ended and not yet taken, written to the queue (when there is room for them
    /// all); whether a whole batch now waits there. Without a queue they stay for
    /// `take_ended`.
    fn export(&mut self, py: Python<'_>) -> bool {
        let Some(queue) = &self.queue else {
            return false;
        };
        let n = (0..self.spans.len())
            .filter(|&i| self.ended[i] && !self.taken[i])
            .count();
        if n == 0 {
            return false;
        }
        let mut q = queue.bind(py).borrow_mut();
        let admitted = q.admit(n);
        let start = q.buf.len();
        for (i, span) in self.spans.iter().enumerate() {
            if self.ended[i] && !self.taken[i] {
                self.taken[i] = true;
                if admitted {
                    otlp_trace::put_span_entry(span, &mut q.buf);
                }
            }
        }
        if admitted {
            let len = q.buf.len() - start;
            q.traces.push_back((len, n));
        }
        q.full()
    }

    /// Ends span `i` now (once; a second call does nothing), and exports what ended once
    /// the server span has: whether a whole batch waits.
    fn close_at(&mut self, py: Python<'_>, i: usize) -> PyResult<bool> {
        if *self.ended.get(i).unwrap_or(&true) {
            self.at(i)?;
            return Ok(false);
        }
        self.spans[i].end_unix_nano = now_ns();
        self.ended[i] = true;
        Ok(self.ended[0] && self.export(py))
    }

    /// A connection opened for span `parent`, from `start_ns` to now: a `connect` child,
    /// failed with `error` when it did.
    fn connect(
        &mut self,
        py: Python<'_>,
        parent: usize,
        start_ns: u64,
        host: &str,
        port: i64,
        error: Option<&str>,
    ) -> PyResult<()> {
        let attributes = vec![
            ("server.address".into(), Value::Str(host.to_owned())),
            ("server.port".into(), Value::Int(port)),
        ];
        let i = self.child("connect".into(), parent, INTERNAL, start_ns, attributes)?;
        if let Some(code) = error {
            self.mark_failed(i, code)?;
        }
        self.close_at(py, i)?;
        Ok(())
    }
}

/// A mapping's items as a dict (a dict as it is).
fn as_dict<'py>(mapping: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    match mapping.cast::<PyDict>() {
        Ok(d) => Ok(d.clone()),
        Err(_) => PyDict::from_sequence(&mapping.call_method0("items")?),
    }
}

fn handle(record: &Bound<'_, TraceRecord>, index: usize) -> SpanHandle {
    SpanHandle {
        record: record.clone().unbind(),
        index,
    }
}

/// An upstream attempt's span, the headers naming it the upstream's parent (`traceparent`,
/// and the client's `tracestate`), and its connect hook.
type Attempt<'py> = (SpanHandle, Bound<'py, PyList>, ConnectHook);

fn attempt_of<'py>(
    slf: &Bound<'py, TraceRecord>,
    i: usize,
    host: String,
    port: i64,
) -> PyResult<Attempt<'py>> {
    let py = slf.py();
    let headers = PyList::empty(py);
    {
        let mut this = slf.borrow_mut();
        let span_id = this.at(i)?.span_id;
        let value = traceparent(this.trace_id, span_id);
        headers.append((PyBytes::new(py, b"traceparent"), PyBytes::new(py, &value)))?;
        if !this.trace_state.is_empty() {
            headers.append((
                PyBytes::new(py, b"tracestate"),
                PyBytes::new(py, this.trace_state.as_bytes()),
            ))?;
        }
    }
    let hook = ConnectHook {
        record: slf.clone().unbind(),
        index: i,
        host,
        port,
    };
    Ok((handle(slf, i), headers, hook))
}

#[pymethods]
impl TraceRecord {
    #[new]
    #[pyo3(signature = (trace_id, trace_state, seed=0, queue=None, completion=None))]
    fn new(
        trace_id: u128,
        trace_state: String,
        seed: u64,
        queue: Option<Py<SpanQueue>>,
        completion: Option<Py<PyAny>>,
    ) -> Self {
        TraceRecord {
            trace_id,
            trace_state,
            seed,
            spans: Vec::with_capacity(6),
            ended: Vec::with_capacity(6),
            taken: Vec::with_capacity(6),
            queue,
            completion,
        }
    }

    /// A new span; returns its index.
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
            name.into(),
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
        self.push(
            format!("{method} {path}").into(),
            id,
            parent_id,
            remote,
            SERVER,
            now_ns(),
            attributes,
        )
    }

    /// The trace id, 32 hex digits (the metrics' exemplars, the access line).
    #[getter]
    fn trace_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        let hex = trace_id_hex(self.trace_id);
        // Hex digits: ASCII only.
        PyString::new(py, std::str::from_utf8(&hex).unwrap_or_default())
    }

    /// The server span.
    #[getter]
    fn server(slf: &Bound<'_, Self>) -> SpanHandle {
        handle(slf, 0)
    }

    /// The answer's text (edgegw.telemetry.tracing.Completion), fed by the relays; None
    /// unless TELEMETRY_TRACING_CONTENT.
    #[getter]
    fn completion(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.completion.as_ref().map(|c| c.clone_ref(py))
    }

    /// A child span of the server span, now, with `attributes`: the scope of parsing,
    /// routing decisions and attempts (`route.attempt`, with `gen_ai.provider.name`,
    /// `gen_ai.request.model`, `edgegw.route.reason`), guardrails, MCP tool executions.
    #[pyo3(signature = (name, **attributes))]
    fn span(
        slf: &Bound<'_, Self>,
        name: &str,
        attributes: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<SpanHandle> {
        let attrs = match attributes {
            Some(a) => self::attributes(a.as_any())?,
            None => Vec::new(),
        };
        let i = slf
            .borrow_mut()
            .child(key_of(name), 0, INTERNAL, now_ns(), attrs)?;
        Ok(handle(slf, i))
    }

    /// A CLIENT child of the server span, now, to `host`:`port` (a proxied request), ended
    /// by the caller; with its `traceparent` headers and connect hook, as `attempt`.
    fn start_client<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        host: String,
        port: i64,
    ) -> PyResult<Attempt<'py>> {
        let mut attrs = Vec::with_capacity(CLIENT_ATTRIBUTES);
        attrs.extend([
            ("server.address".into(), Value::Str(host.clone())),
            ("server.port".into(), Value::Int(port)),
        ]);
        let i = slf
            .borrow_mut()
            .child(name.into(), 0, CLIENT, now_ns(), attrs)?;
        attempt_of(slf, i, host, port)
    }

    /// An upstream attempt, a CLIENT child of the server span: `{method} {path}` (the
    /// target's path, latin-1), with its method, server address and port, and path; ended
    /// by `attempt_done` (or failed). Returned with the headers that name it upstream's
    /// parent and the hook `UpstreamPool.send` calls for each connection it opens (one call
    /// for the three: bench/README.md).
    fn attempt<'py>(
        slf: &Bound<'py, Self>,
        method: &[u8],
        target: &[u8],
        host: String,
        port: i64,
    ) -> PyResult<Attempt<'py>> {
        let method: String = method.iter().map(|&b| b as char).collect();
        let path_end = memchr::memchr(b'?', target).unwrap_or(target.len());
        let path: String = target[..path_end].iter().map(|&b| b as char).collect();
        let name = format!("{method} {path}");
        let mut attributes = Vec::with_capacity(CLIENT_ATTRIBUTES);
        attributes.extend([
            ("http.request.method".into(), Value::Str(method)),
            ("server.address".into(), Value::Str(host.clone())),
            ("server.port".into(), Value::Int(port)),
            ("url.path".into(), Value::Str(path)),
        ]);
        let i = slf
            .borrow_mut()
            .child(name.into(), 0, CLIENT, now_ns(), attributes)?;
        attempt_of(slf, i, host, port)
    }

    /// The attempt's response head came: its status (5xx: failed, `error.type` the status)
    /// and whether it opened its connection (its time then includes the connect and TLS
    /// handshake).
    fn attempt_done(
        &mut self,
        py: Python<'_>,
        span: &SpanHandle,
        status: i64,
        new_connection: bool,
    ) -> PyResult<()> {
        let i = span.index;
        let s = self.at(i)?;
        set_value(
            &mut s.attributes,
            "http.response.status_code".into(),
            Some(Value::Int(status)),
        );
        set_value(
            &mut s.attributes,
            "edgegw.upstream.new_connection".into(),
            Some(Value::Bool(new_connection)),
        );
        if status >= 500 {
            self.mark_failed(i, &status.to_string())?;
        }
        self.close_at(py, i)?;
        Ok(())
    }

    /// `span` failed: `error.type` names `e` (a code, or an exception's code, reason or
    /// class).
    fn fail(&mut self, span: &SpanHandle, e: &Bound<'_, PyAny>) -> PyResult<()> {
        self.mark_failed(span.index, &error_type(e)?)
    }

    /// The request body (the prompt) as the server span's `gen_ai.user.message` event, only
    /// with TELEMETRY_TRACING_CONTENT (decoded only then): `gen_ai.content`, its first 4,096
    /// characters.
    fn prompt(&mut self, body: &[u8]) -> PyResult<()> {
        if self.completion.is_none() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(body);
        let attrs = vec![(
            "gen_ai.content".into(),
            Value::Str(clip_to(&text, MAX_CONTENT_CHARS)),
        )];
        self.add_event(0, "gen_ai.user.message".into(), attrs)
    }

    /// `parse(body)` in a `parse` span (failed with the error it raises, which goes on),
    /// then the prompt event (`prompt`): the span's scope and the event in one call.
    fn parse<'py>(
        slf: &Bound<'py, Self>,
        parse: &Bound<'py, PyAny>,
        body: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let i = slf
            .borrow_mut()
            .child("parse".into(), 0, INTERNAL, now_ns(), Vec::new())?;
        let parsed = parse.call1((body,));
        let mut this = slf.borrow_mut();
        if let Err(e) = &parsed {
            this.mark_failed(i, &error_type(e.value(py).as_any())?)?;
        }
        this.close_at(py, i)?;
        if parsed.is_ok() && this.completion.is_some() {
            this.prompt(body.extract()?)?;
        }
        parsed
    }

    /// The routing decision's `route` span, from `start_ns` (`time.time_ns()` before it)
    /// to now: the model asked for (clipped) and, when one was chosen, the target (`alias`,
    /// `local` or the provider) and whether a local model's named profile chose it; failed
    /// with `error` when routing raised it.
    #[pyo3(signature = (start_ns, model, target, named, error=None))]
    fn route(
        &mut self,
        py: Python<'_>,
        start_ns: u64,
        model: &str,
        target: Option<&str>,
        named: bool,
        error: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut attributes = Vec::with_capacity(3);
        attributes.push(("gen_ai.request.model".into(), Value::Str(clip(model))));
        if let Some(t) = target {
            attributes.push(("edgegw.route.target".into(), Value::Str(t.to_owned())));
            attributes.push(("edgegw.route.named_profile".into(), Value::Bool(named)));
        }
        let i = self.child("route".into(), 0, INTERNAL, start_ns, attributes)?;
        if let Some(e) = error {
            self.mark_failed(i, &error_type(e)?)?;
        }
        self.close_at(py, i)?;
        Ok(())
    }

    /// The GenAI semantic-convention attributes of a chat or completions request, on
    /// the server span: operation, provider (and its older name `gen_ai.system`),
    /// request and response model (clipped), token usage (OpenAI's or Anthropic's
    /// member names), finish reasons, time to first token; and with
    /// TELEMETRY_TRACING_CONTENT the answer's `gen_ai.choice` events (`Completion.record`).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (*, operation, provider, model, response_model, usage, finish_reasons, ttft_s))]
    fn generation(
        slf: &Bound<'_, Self>,
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
        let completion = {
            let mut this = slf.borrow_mut();
            let attrs = &mut this.at(0)?.attributes;
            set_str(attrs, "gen_ai.operation.name", operation);
            set_str(attrs, "gen_ai.provider.name", provider);
            set_str(attrs, "gen_ai.system", provider);
            set_value(
                attrs,
                "gen_ai.request.model".into(),
                Some(Value::Str(clip(model))),
            );
            if let Some(m) = response_model.filter(|m| !m.is_empty()) {
                set_value(
                    attrs,
                    "gen_ai.response.model".into(),
                    Some(Value::Str(clip(m))),
                );
            }
            if let Some(n) = tokens.0 {
                set_value(
                    attrs,
                    "gen_ai.usage.input_tokens".into(),
                    Some(Value::Int(n)),
                );
            }
            if let Some(n) = tokens.1 {
                set_value(
                    attrs,
                    "gen_ai.usage.output_tokens".into(),
                    Some(Value::Int(n)),
                );
            }
            if !finish_reasons.is_empty() {
                let reasons = finish_reasons.iter().map(|r| Value::Str(clip(r))).collect();
                set_value(
                    attrs,
                    "gen_ai.response.finish_reasons".into(),
                    Some(Value::Array(reasons)),
                );
            }
            if let Some(t) = ttft_s {
                set_value(
                    attrs,
                    "gen_ai.server.time_to_first_token".into(),
                    Some(Value::Double(t)),
                );
            }
            this.completion.as_ref().map(|c| c.clone_ref(slf.py()))
        };
        if let Some(c) = completion {
            c.bind(slf.py()).call_method1("record", (handle(slf, 0),))?;
        }
        Ok(())
    }

    /// Ends the server span with the answer's status (None: none was sent) and the
    /// error code that ended the request: failed on an error, no answer or a 5xx. The
    /// trace's ended spans go to the queue; returns whether a whole batch waits there (the
    /// export task is then woken).
    #[pyo3(signature = (status, error=None))]
    fn finish(
        &mut self,
        py: Python<'_>,
        status: Option<i64>,
        error: Option<&str>,
    ) -> PyResult<bool> {
        let span = self.at(0)?;
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
        self.close_at(py, 0)
    }

    fn set(&mut self, i: usize, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        set_one(&mut self.at(i)?.attributes, key_of(key), value)
    }

    /// Every item of a dict, as `set` would.
    fn update(&mut self, i: usize, attrs: &Bound<'_, PyDict>) -> PyResult<()> {
        let span = self.at(i)?;
        for (k, v) in attrs.iter() {
            set_one(&mut span.attributes, py_key(&k)?, &v)?;
        }
        Ok(())
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
            name: name.into(),
            time_unix_nano: time_ns,
            attributes,
        });
        Ok(true)
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

#[pymethods]
impl SpanHandle {
    #[getter]
    fn span_id(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.record.bind(py).borrow_mut().at(self.index)?.span_id)
    }

    fn set_attribute(&self, py: Python<'_>, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.record
            .bind(py)
            .borrow_mut()
            .set(self.index, key, value)
    }

    /// Every item of a mapping, as `set_attribute` would.
    fn set_attributes(&self, py: Python<'_>, attributes: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = as_dict(attributes)?;
        self.record.bind(py).borrow_mut().update(self.index, &d)
    }

    /// An event now (at most 128 a span).
    #[pyo3(signature = (name, attributes=None))]
    fn add_event(
        &self,
        py: Python<'_>,
        name: &str,
        attributes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let attrs = match attributes {
            Some(a) => self::attributes(as_dict(a)?.as_any())?,
            None => Vec::new(),
        };
        self.record
            .bind(py)
            .borrow_mut()
            .add_event(self.index, key_of(name), attrs)
    }

    /// Failed: `error.type` names `e` (a code, or an exception's code, reason or class).
    fn fail(&self, py: Python<'_>, e: &Bound<'_, PyAny>) -> PyResult<()> {
        let code = error_type(e)?;
        self.record
            .bind(py)
            .borrow_mut()
            .mark_failed(self.index, &code)
    }

    /// Ended (once); exported with the trace's spans when the server span ends, or at once
    /// when that has.
    fn end(&self, py: Python<'_>) -> PyResult<()> {
        self.record.bind(py).borrow_mut().close_at(py, self.index)?;
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (_kind, e, _tb))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: &Bound<'_, PyAny>,
        e: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let code = if e.is_none() {
            None
        } else {
            Some(error_type(e)?)
        };
        let mut record = self.record.bind(py).borrow_mut();
        if let Some(code) = code {
            record.mark_failed(self.index, &code)?;
        }
        record.close_at(py, self.index)?;
        Ok(false)
    }
}

#[pymethods]
impl ConnectHook {
    /// A connection begun at `started_ns` was opened now, or failed with `error`.
    #[pyo3(signature = (started_ns, error=None))]
    fn __call__(
        &self,
        py: Python<'_>,
        started_ns: u64,
        error: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let code = match error {
            Some(e) if !e.is_none() => Some(error_type(e)?),
            _ => None,
        };
        self.record.bind(py).borrow_mut().connect(
            py,
            self.index,
            started_ns,
            &self.host,
            self.port,
            code.as_deref(),
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_otlp_spans, m)?)?;
    m.add_function(wrap_pyfunction!(encode_otlp_trace, m)?)?;
    m.add_function(wrap_pyfunction!(read_traceparent, m)?)?;
    m.add_class::<TraceRecord>()?;
    m.add_class::<SpanHandle>()?;
    m.add_class::<ConnectHook>()?;
    m.add_class::<SpanQueue>()?;
    m.add_function(wrap_pyfunction!(encode_otlp_batch, m)?)
}
