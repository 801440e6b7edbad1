//! edgegw's Rust core. The pure modules know nothing of Python; the `python` feature
//! (turned on by maturin) adds the binding below, the only code that touches pyo3.

pub mod error;
pub mod guard;
pub mod head;
pub mod http1;
pub mod json;
pub mod limits;
pub mod otlp;
pub mod otlp_trace;
pub mod passthrough;
pub mod relay;
pub mod relay_loop;
pub mod request;
pub mod respond;
pub mod sse;
pub mod trace;

#[cfg(feature = "python")]
mod binding {
    use std::borrow::Cow;

    use pyo3::create_exception;
    use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError, PyValueError};
    use pyo3::intern;
    use pyo3::prelude::*;
    use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

    use crate::error::{Rejection, UpstreamFault};
    use crate::guard;
    use crate::head;
    use crate::http1;
    use crate::otlp;
    use crate::passthrough;
    use crate::request::{self, retrieval, Endpoint, Parsed};
    use crate::respond;
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
        // Made once: a request's route reads its model a handful of times.
        model: Py<PyString>,
        inner: Parsed,
    }

    #[pymethods]
    impl ParsedRequest {
        #[getter]
        fn endpoint<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
            // Interned: no new string for each of a request's reads.
            match self.inner.endpoint {
                Endpoint::Chat => intern!(py, "chat").clone(),
                Endpoint::Completions => intern!(py, "completions").clone(),
            }
        }
        #[getter]
        fn model(&self, py: Python<'_>) -> Py<PyString> {
            self.model.clone_ref(py)
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
        /// The optional message members the messages carry (response members the SDKs
        /// send back, `refusal`, reasoning), by name, sorted.
        #[getter]
        fn message_members<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, &self.inner.message_members)
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
        /// `keep`: the optional message members the target takes (`message_members`);
        /// the others and null members are left out. None: messages as sent.
        #[pyo3(signature = (model, omit = Vec::new(), *, rename = Vec::new(), tools = None, ask_usage = false, keep = None))]
        #[allow(clippy::too_many_arguments)]
        fn upstream_body<'py>(
            &self,
            py: Python<'py>,
            model: &str,
            omit: Vec<String>,
            rename: Vec<(String, String)>,
            tools: Option<&[u8]>,
            ask_usage: bool,
            keep: Option<Vec<String>>,
        ) -> Bound<'py, PyBytes> {
            let omit: Vec<&str> = omit.iter().map(String::as_str).collect();
            let rename: Vec<(&str, &str)> = rename
                .iter()
                .map(|(from, to)| (from.as_str(), to.as_str()))
                .collect();
            let keep: Option<Vec<&str>> = keep
                .as_ref()
                .map(|k| k.iter().map(String::as_str).collect());
            let add = request::Additions {
                tools,
                ask_usage,
                keep: keep.as_deref(),
            };
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
                match self.inner.endpoint {
                    Endpoint::Chat => "chat",
                    Endpoint::Completions => "completions",
                },
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
            model: PyString::new(body.py(), &inner.model).unbind(),
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

    /// A checked `/v1/embeddings` or `/v1/rerank` body: `.model`, `.items` (inputs or
    /// documents), `.single` and `.tokens` (embeddings: one input; token ids).
    #[pyclass(frozen, module = "edgegw._core")]
    struct RetrievalRequest {
        #[pyo3(get)]
        model: String,
        #[pyo3(get)]
        items: usize,
        #[pyo3(get)]
        single: bool,
        #[pyo3(get)]
        tokens: bool,
    }

    fn retrieval_with(
        body: &Bound<'_, PyAny>,
        parse: fn(&[u8], &retrieval::Bounds) -> Result<retrieval::Retrieval, Rejection>,
        bounds: retrieval::Bounds,
    ) -> PyResult<RetrievalRequest> {
        let bytes = body
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("body must be bytes"))?;
        let r = parse(bytes.as_bytes(), &bounds)?;
        Ok(RetrievalRequest {
            model: r.model,
            items: r.items,
            single: r.single,
            tokens: r.tokens,
        })
    }

    /// Parse and validate a `/v1/embeddings` body under the operator's bounds.
    #[pyfunction]
    fn parse_embeddings_request(
        body: &Bound<'_, PyAny>,
        max_inputs: usize,
        max_input_bytes: usize,
    ) -> PyResult<RetrievalRequest> {
        let bounds = retrieval::Bounds {
            max_items: max_inputs,
            max_input_bytes,
            items_setting: "EDGEGW_EMBEDDINGS_MAX_INPUTS",
        };
        retrieval_with(body, retrieval::parse_embeddings, bounds)
    }

    /// Parse and validate a `/v1/rerank` body under the operator's bounds.
    #[pyfunction]
    fn parse_rerank_request(
        body: &Bound<'_, PyAny>,
        max_documents: usize,
        max_input_bytes: usize,
    ) -> PyResult<RetrievalRequest> {
        let bounds = retrieval::Bounds {
            max_items: max_documents,
            max_input_bytes,
            items_setting: "EDGEGW_RERANK_MAX_DOCUMENTS",
        };
        retrieval_with(body, retrieval::parse_rerank, bounds)
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

    /// Whole SSE events written again without the usage the client did not ask for (the
    /// pump's; the core's relay does the same to its streams): a chunk with only usage is
    /// dropped, a content chunk loses its `usage`.
    #[pyfunction]
    fn without_usage<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let events = sse::SseSplitter::new(sse::DEFAULT_MAX_EVENT_BYTES).feed(data)?;
        Ok(PyBytes::new(py, &crate::relay::without_usage(&events)))
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
    pub(crate) struct ResponseParser {
        pub(crate) inner: http1::ResponseParser,
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

    /// A request's body framing, its head screened: `feed(bytes) -> ResponseFeed` (`.body`,
    /// `.done`), `done`, `take_trailing()` (what came after the body: the next request).
    #[pyclass(module = "edgegw._core")]
    struct RequestBody {
        inner: http1::ResponseParser,
    }

    #[pymethods]
    impl RequestBody {
        #[new]
        fn new(content_length: Option<u64>, chunked: bool) -> Self {
            RequestBody {
                inner: http1::ResponseParser::request_body(content_length, chunked),
            }
        }

        /// `RequestError` (400 `invalid_request`) for malformed chunked framing: the client's
        /// bytes, not an upstream's.
        fn feed(&mut self, py: Python<'_>, data: Cow<'_, [u8]>) -> PyResult<ResponseFeed> {
            let p = self
                .inner
                .feed(&data)
                .map_err(|e| Rejection::BodyFraming(e.to_string()))?;
            ResponseParser::convert(py, p)
        }

        #[getter]
        fn done(&self) -> bool {
            self.inner.is_done()
        }

        fn take_trailing<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
            PyBytes::new(py, &self.inner.take_trailing())
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
        /// The field lines as ASGI wants them: (lower-cased name, value), in order.
        #[pyo3(get)]
        headers: Py<PyList>,
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
        let headers = h.fields.iter().map(|(name, value)| {
            (
                PyBytes::new(py, &name.to_ascii_lowercase()),
                PyBytes::new(py, value),
            )
        });
        Ok(HeadInfo {
            headers: PyList::new(py, headers)?.unbind(),
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

    /// Every code the core raises and the status it is answered with, sorted
    /// (error.rs `all_codes`): the catalogue's check.
    #[pyfunction]
    fn error_codes() -> Vec<(&'static str, u16)> {
        crate::error::all_codes()
    }

    type BytePairs<'py> = Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>;

    /// (name, value) bytes pairs out of any iterable of 2-item sequences.
    fn byte_pairs<'py>(headers: &Bound<'py, PyAny>) -> PyResult<BytePairs<'py>> {
        let mut pairs: BytePairs<'py> = Vec::with_capacity(16);
        for item in headers.try_iter()? {
            let item = item?;
            let (name, value) = match item.cast::<PyTuple>() {
                Ok(t) if t.len() == 2 => (t.get_item(0)?, t.get_item(1)?),
                _ => (item.get_item(0)?, item.get_item(1)?),
            };
            let bytes = |v: Bound<'py, PyAny>| {
                v.cast_into::<PyBytes>()
                    .map_err(|_| PyTypeError::new_err("header names and values are bytes"))
            };
            pairs.push((bytes(name)?, bytes(value)?));
        }
        Ok(pairs)
    }

    /// An upstream request in one buffer (respond.rs `upstream_request`): the request line,
    /// host, `headers` ((name, value) bytes pairs), `framing` (a header line or b""), the
    /// user agent, then `body`. ValueError naming the byte's place when one could split it.
    #[pyfunction]
    #[allow(clippy::too_many_arguments)]
    fn upstream_request<'py>(
        py: Python<'py>,
        method: &[u8],
        target: &[u8],
        host: &[u8],
        headers: &Bound<'py, PyAny>,
        framing: &[u8],
        user_agent: &[u8],
        body: &[u8],
    ) -> PyResult<Bound<'py, PyBytes>> {
        let pairs = byte_pairs(headers)?;
        let rh = respond::RequestHead {
            method,
            target,
            host,
            framing,
            user_agent,
        };
        let out = respond::upstream_request(
            rh,
            pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            body,
        )
        .map_err(|f| PyValueError::new_err(f.message()))?;
        Ok(PyBytes::new(py, &out))
    }

    /// The head of a response with the app's `headers` ((name, value) bytes pairs): (head,
    /// framing as respond.rs `Framing`'s number, Content-Length or None, keep-alive).
    #[pyfunction]
    fn response_head<'py>(
        py: Python<'py>,
        status: u16,
        reason: &[u8],
        headers: &Bound<'py, PyAny>,
        http11: bool,
        head_request: bool,
        keep_alive: bool,
    ) -> PyResult<(Bound<'py, PyBytes>, u8, Option<u64>, bool)> {
        let pairs = byte_pairs(headers)?;
        let cx = respond::Context {
            status,
            reason,
            http11,
            head_request,
            keep_alive,
        };
        let head =
            respond::response_head(cx, pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
                .map_err(|f| PyRuntimeError::new_err(f.message()))?;
        Ok((
            PyBytes::new(py, &head.bytes),
            head.framing as u8,
            head.length,
            head.keep_alive,
        ))
    }

    /// RFC 9110's IMF-fixdate of a Unix time.
    #[pyfunction]
    fn imf_fixdate(py: Python<'_>, unix: u64) -> Bound<'_, PyBytes> {
        PyBytes::new(py, &respond::imf_fixdate(unix))
    }

    /// The Date header value now (RFC 9110's IMF-fixdate), formatted once a second.
    #[pyfunction]
    fn http_date(py: Python<'_>) -> Bound<'_, PyBytes> {
        PyBytes::new(py, &respond::http_date())
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
        m.add_class::<RequestBody>()?;
        m.add_class::<ResponseFeed>()?;
        m.add_class::<ResponseHead>()?;
        m.add_function(wrap_pyfunction!(parse_chat_request, m)?)?;
        m.add_function(wrap_pyfunction!(parse_completions_request, m)?)?;
        m.add_class::<PassthroughRequest>()?;
        m.add_function(wrap_pyfunction!(parse_passthrough, m)?)?;
        m.add_class::<RetrievalRequest>()?;
        m.add_function(wrap_pyfunction!(parse_embeddings_request, m)?)?;
        m.add_function(wrap_pyfunction!(parse_rerank_request, m)?)?;
        m.add("MAX_JSON_DEPTH", crate::json::MAX_DEPTH)?;
        m.add_function(wrap_pyfunction!(gunzip_capped, m)?)?;
        m.add_function(wrap_pyfunction!(without_usage, m)?)?;
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
        m.add_function(wrap_pyfunction!(error_codes, m)?)?;
        m.add_function(wrap_pyfunction!(response_head, m)?)?;
        m.add_function(wrap_pyfunction!(upstream_request, m)?)?;
        m.add_function(wrap_pyfunction!(http_date, m)?)?;
        m.add_function(wrap_pyfunction!(imf_fixdate, m)?)?;
        crate::trace_binding::register(m)?;
        crate::limits_binding::register(m)?;
        crate::relay_binding::register(m)?;
        Ok(())
    }
}

/// Tracing's binding (rust/src/trace.rs, rust/src/otlp_trace.rs), apart from the rest.
#[cfg(feature = "python")]
mod trace_binding;

/// The tenants' ledger's binding (rust/src/limits.rs).
#[cfg(feature = "python")]
mod limits_binding;

/// The core relay's binding (rust/src/relay.rs, rust/src/relay_loop.rs).
#[cfg(feature = "python")]
mod relay_binding;
