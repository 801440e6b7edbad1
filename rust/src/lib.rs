//! edgegw's Rust core. The pure modules know nothing of Python; the `python` feature
//! (turned on by maturin) adds the binding below, the only code that touches pyo3.

pub mod error;
pub mod guard;
pub mod head;
pub mod http1;
pub mod json;
pub mod otlp;
pub mod otlp_trace;
pub mod passthrough;
pub mod request;
pub mod sse;

#[cfg(feature = "python")]
mod binding {
    use std::borrow::Cow;

    use pyo3::create_exception;
    use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
    use pyo3::prelude::*;
    use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyTuple};

    use crate::error::{Rejection, UpstreamFault};
    use crate::guard;
    use crate::head;
    use crate::http1;
    use crate::otlp;
    use crate::passthrough;
    use crate::request::{self, Endpoint, Parsed};
    use crate::sse;

    create_exception!(
        _core,
        RequestError,
        PyValueError,
        "A client request the gateway refuses: .status, .type, .code, .param, message in args[0]."
    );

    create_exception!(
        _core,
        UpstreamProtocolError,
        PyException,
        "An upstream response that breaks HTTP/1.1 or SSE framing (never the client's fault): \
         .code, message in args[0]."
    );

    /// Raise `err` with `attrs` set on the exception value.
    fn with_attrs(err: PyErr, attrs: &[(&str, Bound<'_, PyAny>)]) -> PyErr {
        Python::attach(|py| {
            let value = err.value(py);
            for (name, v) in attrs {
                if let Err(e) = value.setattr(*name, v) {
                    return e;
                }
            }
            err
        })
    }

    /// A `Rejection` is always a `RequestError` (its `status`, `code`... are exhaustive
    /// matches in error.rs).
    impl From<Rejection> for PyErr {
        fn from(r: Rejection) -> PyErr {
            Python::attach(|py| -> PyResult<PyErr> {
                let attrs = [
                    ("status", r.status().into_pyobject(py)?.into_any()),
                    ("type", r.error_type().into_pyobject(py)?.into_any()),
                    ("code", r.code().into_pyobject(py)?.into_any()),
                    ("param", r.param().into_pyobject(py)?.into_any()),
                ];
                Ok(with_attrs(RequestError::new_err(r.message()), &attrs))
            })
            .unwrap_or_else(|e| e)
        }
    }

    /// An `UpstreamFault` is always an `UpstreamProtocolError`.
    impl From<UpstreamFault> for PyErr {
        fn from(f: UpstreamFault) -> PyErr {
            Python::attach(|py| -> PyResult<PyErr> {
                let attrs = [("code", f.code().into_pyobject(py)?.into_any())];
                Ok(with_attrs(
                    UpstreamProtocolError::new_err(f.message()),
                    &attrs,
                ))
            })
            .unwrap_or_else(|e| e)
        }
    }

    /// A validated chat or completions request, holding the body it was parsed from.
    #[pyclass(frozen, module = "edgegw._core")]
    struct ParsedRequest {
        body: Py<PyBytes>,
        inner: Parsed,
    }

    #[pymethods]
    impl ParsedRequest {
        #[getter]
        fn endpoint(&self) -> &'static str {
            match self.inner.endpoint {
                Endpoint::Chat => "chat",
                Endpoint::Completions => "completions",
            }
        }
        #[getter]
        fn model(&self) -> &str {
            &self.inner.model
        }
        #[getter]
        fn stream(&self) -> bool {
            self.inner.stream
        }
        #[getter]
        fn include_usage(&self) -> bool {
            self.inner.include_usage
        }
        #[getter]
        fn n(&self) -> u32 {
            self.inner.n
        }
        #[getter]
        fn best_of(&self) -> Option<u32> {
            self.inner.best_of
        }
        #[getter]
        fn max_tokens(&self) -> Option<u32> {
            self.inner.max_tokens
        }
        #[getter]
        fn has_images(&self) -> bool {
            self.inner.has_images
        }
        #[getter]
        fn has_reasoning(&self) -> bool {
            self.inner.has_reasoning
        }
        #[getter]
        fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, &self.inner.fields)
        }
        #[getter]
        fn features<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, &self.inner.features)
        }
        /// Present fields a remote OpenAI-compatible provider cannot honour, sorted.
        #[getter]
        fn remote_unsupported<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, &self.inner.remote_unsupported)
        }
        /// Present fields a local worker cannot honour, sorted.
        #[getter]
        fn local_unsupported<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, &self.inner.local_unsupported)
        }
        /// The function names of the request's `tools`, in order.
        #[getter]
        fn tool_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, &self.inner.tool_names)
        }
        /// The SIE contract's first refusal of a value OpenAI's schema accepts, as a
        /// `RequestError` for a local target to raise; None when there is none.
        #[getter]
        fn local_rejection(&self, py: Python<'_>) -> Option<Py<PyAny>> {
            let fault = self.inner.local_fault.clone()?;
            Some(PyErr::from(fault).into_value(py).into_any())
        }
        #[getter]
        fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
            self.body.bind(py).clone()
        }

        /// Compact JSON for the upstream: `model` replaced, `omit` fields left out, each
        /// `rename` (from, to) applied when the body has `from` and no `to`.
        /// `tools`: the JSON of tool objects, comma-separated, appended to `tools`.
        /// With `ask_usage`, a stream that did not ask for usage asks for it.
        #[pyo3(signature = (model, omit = Vec::new(), *, rename = Vec::new(), tools = None, ask_usage = false))]
        fn upstream_body<'py>(
            &self,
            py: Python<'py>,
            model: &str,
            omit: Vec<String>,
            rename: Vec<(String, String)>,
            tools: Option<&[u8]>,
            ask_usage: bool,
        ) -> Bound<'py, PyBytes> {
            let omit: Vec<&str> = omit.iter().map(String::as_str).collect();
            let rename: Vec<(&str, &str)> = rename
                .iter()
                .map(|(from, to)| (from.as_str(), to.as_str()))
                .collect();
            let add = request::Additions { tools, ask_usage };
            let out = self.inner.upstream_body_with(
                self.body.bind(py).as_bytes(),
                model,
                &omit,
                &rename,
                add,
            );
            PyBytes::new(py, &out)
        }

        fn __repr__(&self) -> String {
            format!(
                "ParsedRequest(endpoint={:?}, model={:?}, stream={}, fields={:?})",
                self.endpoint(),
                self.inner.model,
                self.inner.stream,
                self.inner.fields
            )
        }
    }

    fn parse_with(
        body: &Bound<'_, PyAny>,
        parse: fn(&[u8]) -> Result<Parsed, Rejection>,
    ) -> PyResult<ParsedRequest> {
        let bytes = body
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("body must be bytes"))?;
        let inner = parse(bytes.as_bytes())?;
        Ok(ParsedRequest {
            body: bytes.clone().unbind(),
            inner,
        })
    }

    /// Parse and validate a `/v1/chat/completions` body.
    #[pyfunction]
    fn parse_chat_request(body: &Bound<'_, PyAny>) -> PyResult<ParsedRequest> {
        parse_with(body, request::parse_chat)
    }

    /// Parse and validate a `/v1/completions` body.
    #[pyfunction]
    fn parse_completions_request(body: &Bound<'_, PyAny>) -> PyResult<ParsedRequest> {
        parse_with(body, request::parse_completions)
    }

    /// A passthrough body: `.model`, `.stream`, `.with_model(model) -> bytes`.
    #[pyclass(frozen, module = "edgegw._core")]
    struct PassthroughRequest {
        body: Py<PyBytes>,
        inner: passthrough::Passthrough,
    }

    #[pymethods]
    impl PassthroughRequest {
        #[getter]
        fn model(&self) -> Option<&str> {
            self.inner.model.as_deref()
        }
        #[getter]
        fn stream(&self) -> bool {
            self.inner.stream
        }
        fn with_model<'py>(&self, py: Python<'py>, model: &str) -> Bound<'py, PyBytes> {
            PyBytes::new(
                py,
                &self.inner.with_model(self.body.bind(py).as_bytes(), model),
            )
        }
    }

    /// Parse a passthrough body (strict JSON object; reads only `model` and `stream`).
    #[pyfunction]
    fn parse_passthrough(body: &Bound<'_, PyAny>) -> PyResult<PassthroughRequest> {
        let bytes = body
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("body must be bytes"))?;
        let inner = passthrough::parse_passthrough(bytes.as_bytes())?;
        Ok(PassthroughRequest {
            body: bytes.clone().unbind(),
            inner,
        })
    }

    #[pyclass(frozen, module = "edgegw._core")]
    struct SseEvent {
        #[pyo3(get)]
        event: Option<String>,
        #[pyo3(get)]
        data: Py<PyBytes>,
        #[pyo3(get)]
        id: Option<String>,
        #[pyo3(get)]
        retry: Option<u64>,
        #[pyo3(get)]
        is_done: bool,
    }

    #[pymethods]
    impl SseEvent {
        fn __repr__(&self, py: Python<'_>) -> String {
            format!(
                "SseEvent(event={:?}, data={:?}, id={:?}, retry={:?})",
                self.event,
                String::from_utf8_lossy(self.data.bind(py).as_bytes()),
                self.id,
                self.retry
            )
        }
    }

    /// Incremental SSE splitter: `feed(bytes) -> list[SseEvent]`, `finish() -> bool`,
    /// `pending` (the tail after the last complete block, in bytes).
    #[pyclass(module = "edgegw._core")]
    struct SseSplitter {
        inner: sse::SseSplitter,
    }

    #[pymethods]
    impl SseSplitter {
        #[new]
        #[pyo3(signature = (max_event_bytes = sse::DEFAULT_MAX_EVENT_BYTES))]
        fn new(max_event_bytes: usize) -> Self {
            SseSplitter {
                inner: sse::SseSplitter::new(max_event_bytes),
            }
        }

        fn feed(&mut self, py: Python<'_>, chunk: &[u8]) -> PyResult<Vec<SseEvent>> {
            let events = self.inner.feed(chunk)?;
            Ok(events
                .into_iter()
                .map(|e| SseEvent {
                    is_done: e.is_done(),
                    event: e.event,
                    data: PyBytes::new(py, &e.data).unbind(),
                    id: e.id,
                    retry: e.retry,
                })
                .collect())
        }

        /// For a relay: (events completed, whether `[DONE]` was one, the data of the
        /// events the usage tap reads), with no object for any other event.
        fn feed_tapped<'py>(
            &mut self,
            py: Python<'py>,
            chunk: &[u8],
        ) -> PyResult<(usize, bool, Vec<Bound<'py, PyBytes>>)> {
            let t = self.inner.feed_tapped(chunk)?;
            let data = t.data.iter().map(|d| PyBytes::new(py, d)).collect();
            Ok((t.events, t.done, data))
        }

        /// End of stream; true when an incomplete event was discarded.
        fn finish(&mut self) -> bool {
            self.inner.finish()
        }

        /// Bytes fed after the end of the last complete block: hold these back and what
        /// was sent ends on an event boundary.
        #[getter]
        fn pending(&self) -> usize {
            self.inner.pending()
        }
    }

    /// Decode gzip (concatenated members too) into at most `cap` bytes, without the GIL.
    #[pyfunction]
    fn gunzip_capped<'py>(
        py: Python<'py>,
        data: &[u8],
        cap: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let out = py.detach(|| otlp::gunzip_capped(data, cap))?;
        Ok(PyBytes::new(py, &out))
    }

    fn otlp_attributes(py: Python<'_>, attrs: otlp::Attributes) -> PyResult<Bound<'_, PyDict>> {
        let dict = PyDict::new(py);
        for (k, v) in attrs {
            dict.set_item(k, v)?;
        }
        Ok(dict)
    }

    fn otlp_points(py: Python<'_>, points: otlp::Points) -> PyResult<Bound<'_, PyList>> {
        let mut out: Vec<Bound<'_, PyAny>> = Vec::with_capacity(points.len());
        match points {
            otlp::Points::Number(points) => {
                for p in points {
                    let value = match p.value {
                        None => py.None().into_bound(py),
                        Some(otlp::Number::Int(i)) => i.into_pyobject(py)?.into_any(),
                        Some(otlp::Number::Double(d)) => d.into_pyobject(py)?.into_any(),
                    };
                    let attrs = otlp_attributes(py, p.attributes)?;
                    out.push((attrs, value).into_pyobject(py)?.into_any());
                }
            }
            otlp::Points::Histogram(points) => {
                for p in points {
                    let attrs = otlp_attributes(py, p.attributes)?;
                    let point = (attrs, p.count, p.sum, p.bucket_counts, p.explicit_bounds);
                    out.push(point.into_pyobject(py)?.into_any());
                }
            }
            otlp::Points::Other(points) => {
                for attrs in points {
                    let attrs = otlp_attributes(py, attrs)?;
                    out.push((attrs,).into_pyobject(py)?.into_any());
                }
            }
        }
        PyList::new(py, out)
    }

    /// Decode a protobuf `ExportMetricsServiceRequest` (the shape is in _core.pyi).
    #[pyfunction]
    fn decode_otlp_metrics<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let resources = py.detach(|| otlp::decode_metrics(data))?;
        let mut out = Vec::with_capacity(resources.len());
        for r in resources {
            let mut metrics = Vec::with_capacity(r.metrics.len());
            for m in r.metrics {
                let points = otlp_points(py, m.points)?;
                let metric = (m.name, m.kind.as_str(), m.temporality, m.monotonic, points);
                metrics.push(metric.into_pyobject(py)?);
            }
            out.push((r.service_name, PyList::new(py, metrics)?).into_pyobject(py)?);
        }
        PyList::new(py, out)
    }

    /// A protobuf `ExportMetricsServiceResponse` (empty when nothing was rejected).
    #[pyfunction]
    fn encode_otlp_metrics_response<'py>(
        py: Python<'py>,
        rejected_data_points: i64,
        error_message: &str,
    ) -> Bound<'py, PyBytes> {
        PyBytes::new(
            py,
            &otlp::encode_response(rejected_data_points, error_message),
        )
    }

    /// A final response head: `.status`, `.headers` (names lower-cased, in order).
    #[pyclass(frozen, module = "edgegw._core")]
    struct ResponseHead {
        #[pyo3(get)]
        status: u16,
        #[pyo3(get)]
        headers: Py<PyList>,
    }

    #[pymethods]
    impl ResponseHead {
        fn __repr__(&self, py: Python<'_>) -> String {
            format!(
                "ResponseHead(status={}, headers=<{} fields>)",
                self.status,
                self.headers.bind(py).len()
            )
        }
    }

    /// What one `ResponseParser.feed()` or `.feed_eof()` produced: `.head` (the final
    /// head, on the feed that completed it, else None), `.body` (decoded body bytes,
    /// maybe empty) and `.done` (the response ended).
    ///
    /// Every field is a `Py<...>` on a frozen class, so pyo3 exposes them as struct
    /// members that CPython reads directly, with no getter call: this object is made and
    /// read once per upstream read, and a `bool` or `Option` field would cost a getter
    /// call each (measured: the commit that introduced this class).
    #[pyclass(frozen, module = "edgegw._core")]
    struct ResponseFeed {
        /// None or a `ResponseHead`.
        #[pyo3(get)]
        head: Py<PyAny>,
        #[pyo3(get)]
        body: Py<PyBytes>,
        #[pyo3(get)]
        done: Py<PyBool>,
    }

    #[pymethods]
    impl ResponseFeed {
        fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
            Ok(format!(
                "ResponseFeed(head={}, body=<{} bytes>, done={})",
                self.head.bind(py).repr()?,
                self.body.bind(py).as_bytes().len(),
                self.done.bind(py).repr()?
            ))
        }
    }

    /// HTTP/1.1 response framing for the upstream client:
    /// `feed(bytes) -> ResponseFeed`, `feed_eof() -> ResponseFeed`, `reusable`, `done`.
    #[pyclass(module = "edgegw._core")]
    struct ResponseParser {
        inner: http1::ResponseParser,
    }

    impl ResponseParser {
        fn convert(py: Python<'_>, p: http1::Progress) -> PyResult<ResponseFeed> {
            let head = match p.head {
                None => py.None(),
                Some(h) => {
                    let headers = h
                        .headers
                        .iter()
                        .map(|(k, v)| (PyBytes::new(py, k), PyBytes::new(py, v)));
                    let head = ResponseHead {
                        status: h.status,
                        headers: PyList::new(py, headers)?.unbind(),
                    };
                    Py::new(py, head)?.into_any()
                }
            };
            Ok(ResponseFeed {
                head,
                body: PyBytes::new(py, &p.body).unbind(),
                done: PyBool::new(py, p.done).to_owned().unbind(),
            })
        }
    }

    #[pymethods]
    impl ResponseParser {
        #[new]
        #[pyo3(signature = (head_request = false))]
        fn new(head_request: bool) -> Self {
            ResponseParser {
                inner: http1::ResponseParser::new(head_request),
            }
        }

        /// `data` may be bytes or a bytearray (trio's `receive_some()` is typed as either).
        fn feed(&mut self, py: Python<'_>, data: Cow<'_, [u8]>) -> PyResult<ResponseFeed> {
            let p = self.inner.feed(&data)?;
            Self::convert(py, p)
        }

        fn feed_eof(&mut self, py: Python<'_>) -> PyResult<ResponseFeed> {
            let p = self.inner.feed_eof()?;
            Self::convert(py, p)
        }

        #[getter]
        fn reusable(&self) -> bool {
            self.inner.reusable()
        }

        #[getter]
        fn done(&self) -> bool {
            self.inner.is_done()
        }
    }

    /// A request head that passed the screen (`screen_request_head`).
    #[pyclass(frozen, module = "edgegw._core")]
    struct HeadInfo {
        #[pyo3(get)]
        method: Py<PyBytes>,
        #[pyo3(get)]
        target: Py<PyBytes>,
        /// `b"1.0"` or `b"1.1"`.
        #[pyo3(get)]
        http_version: Py<PyBytes>,
        #[pyo3(get)]
        content_length: Option<u64>,
        #[pyo3(get)]
        chunked: bool,
        #[pyo3(get)]
        keep_alive: bool,
        #[pyo3(get)]
        expect_continue: bool,
        #[pyo3(get)]
        upgrade: bool,
    }

    #[pymethods]
    impl HeadInfo {
        /// In Python's terms; the target is left out (a query string may carry a secret).
        fn __repr__(&self, py: Python<'_>) -> String {
            let flag = |b: bool| if b { "True" } else { "False" };
            let length = self
                .content_length
                .map_or_else(|| "None".to_string(), |n| n.to_string());
            format!(
                "HeadInfo(method={}, http_version={}, content_length={length}, chunked={}, \
                 keep_alive={}, expect_continue={}, upgrade={})",
                self.method
                    .bind(py)
                    .repr()
                    .map_or_else(|_| "?".into(), |r| r.to_string()),
                self.http_version
                    .bind(py)
                    .repr()
                    .map_or_else(|_| "?".into(), |r| r.to_string()),
                flag(self.chunked),
                flag(self.keep_alive),
                flag(self.expect_continue),
                flag(self.upgrade),
            )
        }
    }

    /// Screen a whole request head (request line to CRLF CRLF, included) against RFC 9112
    /// and `max_bytes`; `RequestError` (400, or 431 for size and count) if refused.
    #[pyfunction]
    fn screen_request_head(
        py: Python<'_>,
        head: Cow<'_, [u8]>,
        max_bytes: usize,
    ) -> PyResult<HeadInfo> {
        let h = head::screen_request_head(&head, max_bytes)?;
        Ok(HeadInfo {
            method: PyBytes::new(py, h.method).unbind(),
            target: PyBytes::new(py, h.target).unbind(),
            http_version: PyBytes::new(py, h.http_version).unbind(),
            content_length: h.content_length,
            chunked: h.chunked,
            keep_alive: h.keep_alive,
            expect_continue: h.expect_continue,
            upgrade: h.upgrade,
        })
    }

    create_exception!(
        _core,
        PolicyError,
        PyValueError,
        "A guardrails policy that cannot be loaded or cannot decide: .kind (compile, input, \
         eval, decision), message in args[0]."
    );

    /// A `PolicyFault` is always a `PolicyError`.
    impl From<guard::PolicyFault> for PyErr {
        fn from(f: guard::PolicyFault) -> PyErr {
            Python::attach(|py| -> PyResult<PyErr> {
                let attrs = [("kind", f.kind().into_pyobject(py)?.into_any())];
                Ok(with_attrs(
                    PolicyError::new_err(f.message().to_string()),
                    &attrs,
                ))
            })
            .unwrap_or_else(|e| e)
        }
    }

    /// The guardrails policy, compiled once; `evaluate` runs without the GIL.
    #[pyclass(frozen, module = "edgegw._core")]
    struct GuardPolicy {
        inner: guard::Policy,
    }

    #[pymethods]
    impl GuardPolicy {
        /// Compile `modules` (file name, source) for `data.guardrails.main`.
        #[new]
        fn new(py: Python<'_>, modules: Vec<(String, String)>) -> PyResult<Self> {
            let inner = py.detach(|| guard::Policy::compile(&modules))?;
            Ok(GuardPolicy { inner })
        }

        #[getter]
        fn empty(&self) -> bool {
            self.inner.is_empty()
        }

        /// (action, message) for the input document (JSON bytes).
        fn evaluate(&self, py: Python<'_>, input: &[u8]) -> PyResult<(&'static str, String)> {
            let input = std::str::from_utf8(input)
                .map_err(|_| PyErr::from(guard::PolicyFault::Input("not UTF-8".into())))?;
            let d = py.detach(|| self.inner.evaluate(input))?;
            Ok((d.action.as_str(), d.message))
        }
    }

    /// The built-in detectors that find something in `text` (each once).
    #[pyfunction]
    fn detect_sensitive(py: Python<'_>, text: &str) -> Vec<&'static str> {
        py.detach(|| guard::detect(text))
            .into_iter()
            .map(guard::Detector::as_str)
            .collect()
    }

    /// `text` with the redactable secrets replaced by "[REDACTED]".
    #[pyfunction]
    fn redact_text(py: Python<'_>, text: &str) -> String {
        py.detach(|| guard::redact_text(text).into_owned())
    }

    /// A JSON document with every string value redacted (the same bytes when nothing was).
    #[pyfunction]
    fn redact_json<'py>(
        py: Python<'py>,
        body: &Bound<'py, PyBytes>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let data = body.as_bytes();
        match py.detach(|| guard::redact_json(data))? {
            Some(out) => Ok(PyBytes::new(py, &out)),
            None => Ok(body.clone()),
        }
    }

    #[pymodule]
    fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("RequestError", m.py().get_type::<RequestError>())?;
        m.add(
            "UpstreamProtocolError",
            m.py().get_type::<UpstreamProtocolError>(),
        )?;
        m.add_class::<ParsedRequest>()?;
        m.add_class::<SseEvent>()?;
        m.add_class::<SseSplitter>()?;
        m.add_class::<ResponseParser>()?;
        m.add_class::<ResponseFeed>()?;
        m.add_class::<ResponseHead>()?;
        m.add_function(wrap_pyfunction!(parse_chat_request, m)?)?;
        m.add_function(wrap_pyfunction!(parse_completions_request, m)?)?;
        m.add_class::<PassthroughRequest>()?;
        m.add_function(wrap_pyfunction!(parse_passthrough, m)?)?;
        m.add("MAX_JSON_DEPTH", crate::json::MAX_DEPTH)?;
        m.add_function(wrap_pyfunction!(gunzip_capped, m)?)?;
        m.add_function(wrap_pyfunction!(decode_otlp_metrics, m)?)?;
        m.add_function(wrap_pyfunction!(encode_otlp_metrics_response, m)?)?;
        m.add("OTLP_MAX_DECODED_BYTES", otlp::MAX_DECODED_BYTES)?;
        m.add("OTLP_MAX_DATA_POINTS", otlp::MAX_DATA_POINTS)?;
        m.add("OTLP_MAX_ATTRIBUTES", otlp::MAX_ATTRIBUTES)?;
        m.add_class::<HeadInfo>()?;
        m.add_function(wrap_pyfunction!(screen_request_head, m)?)?;
        m.add("MAX_HEADER_LINES", head::MAX_HEADER_LINES)?;
        m.add("PolicyError", m.py().get_type::<PolicyError>())?;
        m.add_class::<GuardPolicy>()?;
        m.add_function(wrap_pyfunction!(detect_sensitive, m)?)?;
        m.add_function(wrap_pyfunction!(redact_text, m)?)?;
        m.add_function(wrap_pyfunction!(redact_json, m)?)?;
        crate::trace_binding::register(m)?;
        Ok(())
    }
}

/// The OTLP trace encoder's binding (rust/src/otlp_trace.rs), apart from the rest.
#[cfg(feature = "python")]
mod trace_binding {
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
        let data =
            py.detach(|| otlp_trace::encode_spans(&resource, scope_name, scope_version, &spans));
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
}
