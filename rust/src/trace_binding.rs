//! Tracing's binding: Python values to the types of rust/src/trace.rs and
//! rust/src/otlp_trace.rs, and back.

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::otlp_trace::{self, Attributes, Event, Key, Span, Value};
use crate::trace::{
    self, parse_traceparent, token_count, trace_id_hex, Choice, Generation, NoSuchSpan, Queue,
    Record, INTERNAL,
};

/// A Python str as a key: a copy (the names edgegw writes on the request path are trace.rs's
/// own, static, written by its hooks).
fn py_key(k: &Bound<'_, PyAny>) -> PyResult<Key> {
    let s = k
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("attribute keys must be str"))?;
    Ok(s.to_str()?.to_owned().into())
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
/// `trace_id` with `trace_state`. One call a request, so the GIL is taken once.
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
/// (`parse_traceparent`). One call, in place of the Python reader's header loop, regex and
/// int parsing (bench/README.md has what that cost).
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

/// The export queue (trace::Queue): every request's record writes its ended spans here,
/// the export task (edgegw.telemetry.otelsdk.Pipeline) takes them a batch at a time; all on
/// the event loop's thread.
#[pyclass(module = "edgegw._core")]
struct SpanQueue {
    inner: Queue,
}

#[pymethods]
impl SpanQueue {
    #[new]
    #[pyo3(signature = (limit=2048, batch=512))]
    fn new(limit: usize, batch: usize) -> Self {
        SpanQueue {
            inner: Queue::new(limit, batch),
        }
    }

    #[getter]
    fn limit(&self) -> usize {
        self.inner.limit
    }

    #[setter]
    fn set_limit(&mut self, limit: usize) {
        self.inner.limit = limit;
    }

    /// Spans waiting, taken or not yet.
    #[getter]
    fn pending(&self) -> usize {
        self.inner.pending
    }

    #[setter]
    fn set_pending(&mut self, pending: usize) {
        self.inner.pending = pending;
    }

    #[getter]
    fn exported(&self) -> u64 {
        self.inner.exported
    }

    #[getter]
    fn batch(&self) -> usize {
        self.inner.batch
    }

    /// Spans dropped, by reason: `queue_full` (no room when their trace ended),
    /// `export_failed` (a batch the collector did not take).
    #[getter]
    fn dropped<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("queue_full", self.inner.queue_full)?;
        d.set_item("export_failed", self.inner.export_failed)?;
        Ok(d)
    }

    /// Whether a whole batch waits.
    fn full(&self) -> bool {
        self.inner.full()
    }

    /// The next batch: the `ExportTraceServiceRequest` under one resource and scope, and
    /// how many spans; None when nothing waits. Written once, straight into the bytes object.
    fn take<'py>(
        &mut self,
        py: Python<'py>,
        resource: &Bound<'py, PyAny>,
        scope_name: &str,
        scope_version: &str,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, usize)>> {
        self.inner
            .take(|entries, n| {
                let resource = attributes(resource)?;
                let head =
                    otlp_trace::batch_head(&resource, scope_name, scope_version, entries.len());
                let data = PyBytes::new_with(py, head.len() + entries.len(), |out| {
                    out[..head.len()].copy_from_slice(&head);
                    out[head.len()..].copy_from_slice(entries);
                    Ok(())
                })?;
                Ok((data, n))
            })
            .transpose()
    }

    /// What became of a batch of `n` spans: exported, or dropped (`export_failed`).
    fn done(&mut self, n: usize, ok: bool) {
        self.inner.done(n, ok);
    }

    /// Forget what waits (not counted).
    fn clear(&mut self) {
        self.inner.clear();
    }
}

impl From<NoSuchSpan> for PyErr {
    fn from(_: NoSuchSpan) -> PyErr {
        PyIndexError::new_err("no such span")
    }
}

/// One request's trace (trace::Record), and the hooks the request path calls (a span scope,
/// an upstream attempt and its connect, the GenAI attributes, the end), each one call with
/// no Python frame around it: `Span` is a handle (the record and an index) made here, its
/// scope's `__enter__`/`__exit__` are Rust, and a connection's hook is a Rust callable. No
/// Python object holds a span's attributes, events or times. Spans due for export go to the
/// queue; a record without a queue keeps them for `take_ended`.
#[pyclass(module = "edgegw._core")]
struct TraceRecord {
    inner: Record,
    queue: Option<Py<SpanQueue>>,
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

/// The wall clock, as the spans' times are (time.time_ns()).
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A choice of an answer as Completion.choices gives it: (index, text, finish reason).
type ChoiceArgs<'py> = (Bound<'py, PyInt>, String, Option<String>);

/// A usage member: None when absent or None, else the int (not a bool) in int64 it holds
/// (trace::token_count).
fn usage_member(
    usage: &Bound<'_, PyDict>,
    name: &Bound<'_, PyString>,
) -> PyResult<Option<Option<i64>>> {
    Ok(match usage.get_item(name)? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.is_exact_instance_of::<PyInt>() => Some(v.extract::<i64>().ok()),
        Some(_) => Some(None),
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

/// A mapping's items as a dict (a dict as it is).
fn as_dict<'py>(mapping: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    match mapping.cast::<PyDict>() {
        Ok(d) => Ok(d.clone()),
        Err(_) => PyDict::from_sequence(&mapping.call_method0("items")?),
    }
}

impl TraceRecord {
    /// When spans are `due`, writes them to the queue: whether a whole batch waits there.
    fn export_if(&mut self, py: Python<'_>, due: bool) -> bool {
        match (&self.queue, due) {
            (Some(q), true) => self.inner.export(&mut q.bind(py).borrow_mut().inner),
            _ => false,
        }
    }

    /// Ends span `i` now (once), exporting what is due: whether a whole batch waits.
    fn close(&mut self, py: Python<'_>, i: usize) -> PyResult<bool> {
        let due = self.inner.close(i, now_ns())?;
        Ok(self.export_if(py, due))
    }

    fn set(&mut self, i: usize, key: Key, value: &Bound<'_, PyAny>) -> PyResult<()> {
        // A value the encoder drops (`value` None) leaves the key out.
        Ok(self.inner.set(i, key, self::value(value)?)?)
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
        let this = slf.borrow();
        let (value, state) = this.inner.context(i)?;
        headers.append((PyBytes::new(py, b"traceparent"), PyBytes::new(py, &value)))?;
        if !state.is_empty() {
            headers.append((
                PyBytes::new(py, b"tracestate"),
                PyBytes::new(py, state.as_bytes()),
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
    /// `content`: TELEMETRY_TRACING_CONTENT (the prompt and the answer's text recorded).
    #[pyo3(signature = (trace_id, trace_state, seed=0, queue=None, content=false))]
    fn new(
        trace_id: u128,
        trace_state: String,
        seed: u64,
        queue: Option<Py<SpanQueue>>,
        content: bool,
    ) -> Self {
        TraceRecord {
            inner: Record::new(trace_id, trace_state, seed, content),
            queue,
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
        Ok(self.inner.start(
            name.into(),
            span_id,
            parent_id,
            remote_parent,
            kind,
            start_ns,
            attributes,
        ))
    }

    /// The request's server span, now (trace::Record::open_server). Its index is 0.
    fn open_server(
        &mut self,
        method: &str,
        path: &str,
        request_id: &str,
        parent_id: Option<u64>,
    ) -> usize {
        self.inner
            .open_server(method, path, request_id, parent_id, now_ns())
    }

    /// The trace id, 32 hex digits (the metrics' exemplars, the access line).
    #[getter]
    fn trace_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        let hex = trace_id_hex(self.inner.trace_id());
        // Hex digits: ASCII only.
        PyString::new(py, std::str::from_utf8(&hex).unwrap_or_default())
    }

    /// The server span.
    #[getter]
    fn server(slf: &Bound<'_, Self>) -> SpanHandle {
        handle(slf, 0)
    }

    /// A child span of the server span, now, with `attributes`, for a scope no hook below
    /// names.
    #[pyo3(signature = (name, **attributes))]
    fn span(
        slf: &Bound<'_, Self>,
        name: String,
        attributes: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<SpanHandle> {
        let attrs = match attributes {
            Some(a) => self::attributes(a.as_any())?,
            None => Vec::new(),
        };
        let i = slf
            .borrow_mut()
            .inner
            .child(name.into(), 0, INTERNAL, now_ns(), attrs)?;
        Ok(handle(slf, i))
    }

    /// The `authenticate` span, now (a scope).
    fn authenticate(slf: &Bound<'_, Self>) -> PyResult<SpanHandle> {
        let i = slf.borrow_mut().inner.authenticate(now_ns())?;
        Ok(handle(slf, i))
    }

    /// A routed request's `route.attempt` span for one deployment, now (a scope;
    /// trace::Record::route_attempt).
    fn route_attempt(slf: &Bound<'_, Self>, provider: &str, model: &str) -> PyResult<SpanHandle> {
        let i = slf
            .borrow_mut()
            .inner
            .route_attempt(provider, model, now_ns())?;
        Ok(handle(slf, i))
    }

    /// An MCP tool execution's span, now (a scope; trace::Record::tool).
    fn tool(slf: &Bound<'_, Self>, name: &str, call_id: &str) -> PyResult<SpanHandle> {
        let i = slf.borrow_mut().inner.tool(name, call_id, now_ns())?;
        Ok(handle(slf, i))
    }

    /// The fallback of a local model to its remote profile `to`, now: the server span's
    /// `edgegw.fallback` event (trace::Record::fallback).
    fn fallback(&mut self, reason: &str, to: &str) -> PyResult<()> {
        Ok(self.inner.fallback(reason, to, now_ns())?)
    }

    /// A CLIENT child of the server span, now, to `host`:`port` (a proxied request), ended
    /// by the caller; with its `traceparent` headers and connect hook, as `attempt`.
    fn start_client<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        host: String,
        port: i64,
    ) -> PyResult<Attempt<'py>> {
        let i = slf
            .borrow_mut()
            .inner
            .client(name.into(), &host, port, now_ns())?;
        attempt_of(slf, i, host, port)
    }

    /// An upstream attempt (trace::Record::attempt), ended by `attempt_done` (or failed).
    /// Returned with the headers that name it upstream's parent and the hook
    /// `UpstreamPool.send` calls for each connection it opens (one call for the three:
    /// bench/README.md).
    fn attempt<'py>(
        slf: &Bound<'py, Self>,
        method: &[u8],
        target: &[u8],
        host: String,
        port: i64,
    ) -> PyResult<Attempt<'py>> {
        let i = slf
            .borrow_mut()
            .inner
            .attempt(method, target, &host, port, now_ns())?;
        attempt_of(slf, i, host, port)
    }

    /// The attempt's response head came (trace::Record::attempt_done).
    fn attempt_done(
        &mut self,
        py: Python<'_>,
        span: &SpanHandle,
        status: i64,
        new_connection: bool,
    ) -> PyResult<()> {
        let due = self
            .inner
            .attempt_done(span.index, status, new_connection, now_ns())?;
        self.export_if(py, due);
        Ok(())
    }

    /// `span` failed: `error.type` names `e` (a code, or an exception's code, reason or
    /// class).
    fn fail(&mut self, span: &SpanHandle, e: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(self.inner.mark_failed(span.index, &error_type(e)?)?)
    }

    /// The `parse` span of `body`, from `start_ns` (`time.time_ns()` before parsing) to now,
    /// failed with `error` when parsing raised it; else with TELEMETRY_TRACING_CONTENT the
    /// prompt event (trace::Record::parsed).
    #[pyo3(signature = (start_ns, body, error=None))]
    fn parsed(
        &mut self,
        py: Python<'_>,
        start_ns: u64,
        body: &[u8],
        error: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let code = error.map(error_type).transpose()?;
        let due = self
            .inner
            .parsed(start_ns, now_ns(), body, code.as_deref())?;
        self.export_if(py, due);
        Ok(())
    }

    /// The routing decision's `route` span, from `start_ns` (`time.time_ns()` before it)
    /// to now (trace::Record::route); failed with `error` when routing raised it.
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
        let code = error.map(error_type).transpose()?;
        let due = self
            .inner
            .route(start_ns, now_ns(), model, target, named, code.as_deref())?;
        self.export_if(py, due);
        Ok(())
    }

    /// The GenAI attributes of a chat or completions request, on the server span
    /// (trace::Record::generation; token usage by OpenAI's or Anthropic's member names),
    /// and with TELEMETRY_TRACING_CONTENT a `gen_ai.choice` event for each of `choices`
    /// (index, text, finish reason: edgegw.telemetry.tracing.Completion's).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        *, operation, provider, model, response_model, usage, finish_reasons, ttft_s, choices=None
    ))]
    fn generation(
        &mut self,
        operation: &str,
        provider: &str,
        model: &str,
        response_model: Option<&str>,
        usage: Option<&Bound<'_, PyDict>>,
        finish_reasons: Vec<String>,
        ttft_s: Option<f64>,
        choices: Option<Vec<ChoiceArgs<'_>>>,
    ) -> PyResult<()> {
        let (mut input_tokens, mut output_tokens) = (None, None);
        if let Some(u) = usage {
            let py = u.py();
            // Anthropic's member is looked up only when OpenAI's is absent or null.
            let count = |openai, anthropic| -> PyResult<Option<i64>> {
                let first = usage_member(u, openai)?;
                let other = match first {
                    None => usage_member(u, anthropic)?,
                    Some(_) => None,
                };
                Ok(token_count(first, other))
            };
            input_tokens = count(intern!(py, "prompt_tokens"), intern!(py, "input_tokens"))?;
            output_tokens = count(
                intern!(py, "completion_tokens"),
                intern!(py, "output_tokens"),
            )?;
        }
        let choices: Vec<Choice> = choices
            .unwrap_or_default()
            .into_iter()
            .map(|(index, text, finish_reason)| Choice {
                // An index past int64 is left out, as any such attribute value is.
                index: index.extract::<i64>().ok(),
                text,
                finish_reason,
            })
            .collect();
        let g = Generation {
            operation,
            provider,
            model,
            response_model,
            input_tokens,
            output_tokens,
            finish_reasons: &finish_reasons,
            ttft_s,
            choices: &choices,
        };
        Ok(self.inner.generation(&g, now_ns())?)
    }

    /// Ends the server span (trace::Record::finish). The trace's ended spans go to the
    /// queue; returns whether a whole batch waits there (the export task is then woken).
    #[pyo3(signature = (status, error=None))]
    fn finish(
        &mut self,
        py: Python<'_>,
        status: Option<i64>,
        error: Option<&str>,
    ) -> PyResult<bool> {
        let due = self.inner.finish(status, error, now_ns())?;
        Ok(self.export_if(py, due))
    }

    #[pyo3(name = "set")]
    fn set_item(&mut self, i: usize, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set(i, key.to_owned().into(), value)
    }

    /// Every item of a dict, as `set` would.
    fn update(&mut self, i: usize, attrs: &Bound<'_, PyDict>) -> PyResult<()> {
        self.inner.span(i)?;
        for (k, v) in attrs.iter() {
            self.set(i, py_key(&k)?, &v)?;
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
        Ok(self
            .inner
            .event(i, name.into(), attributes, time_ns, limit)?)
    }

    /// Ends span `i` at `end_ns`, failed if `error`; true once the first span (the
    /// request's server span) has ended, when what ended is to be exported.
    fn end(&mut self, i: usize, end_ns: u64, error: bool) -> PyResult<bool> {
        Ok(self.inner.end(i, end_ns, error)?)
    }

    /// The entries of the spans ended since the last call, and how many.
    fn take_ended<'py>(&mut self, py: Python<'py>) -> (Bound<'py, PyBytes>, usize) {
        let (entries, n) = self.inner.entries();
        (PyBytes::new(py, &entries), n)
    }
}

#[pymethods]
impl SpanHandle {
    #[getter]
    fn span_id(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self
            .record
            .bind(py)
            .borrow()
            .inner
            .span(self.index)?
            .span_id)
    }

    fn set_attribute(&self, py: Python<'_>, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.record
            .bind(py)
            .borrow_mut()
            .set(self.index, key.to_owned().into(), value)
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
        let mut record = self.record.bind(py).borrow_mut();
        Ok(record
            .inner
            .add_event(self.index, name.to_owned().into(), attrs, now_ns())?)
    }

    /// Failed: `error.type` names `e` (a code, or an exception's code, reason or class).
    fn fail(&self, py: Python<'_>, e: &Bound<'_, PyAny>) -> PyResult<()> {
        let code = error_type(e)?;
        let mut record = self.record.bind(py).borrow_mut();
        Ok(record.inner.mark_failed(self.index, &code)?)
    }

    /// Ended (once); exported with the trace's spans when the server span ends, or at once
    /// when that has.
    fn end(&self, py: Python<'_>) -> PyResult<()> {
        self.record.bind(py).borrow_mut().close(py, self.index)?;
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
            record.inner.mark_failed(self.index, &code)?;
        }
        record.close(py, self.index)?;
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
        let mut record = self.record.bind(py).borrow_mut();
        let due = record.inner.connect(
            self.index,
            started_ns,
            now_ns(),
            &self.host,
            self.port,
            code.as_deref(),
        )?;
        record.export_if(py, due);
        Ok(())
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
    m.add("TRACE_MAX_EVENTS", trace::MAX_EVENTS)?;
    m.add("TRACE_MAX_CONTENT_CHARS", trace::MAX_CONTENT_CHARS)?;
    m.add("TRACE_MAX_ATTRIBUTE_CHARS", trace::MAX_ATTRIBUTE_CHARS)?;
    m.add_function(wrap_pyfunction!(encode_otlp_batch, m)?)
}
