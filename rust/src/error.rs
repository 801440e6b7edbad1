//! The core's two error types, one per party at fault.
//!
//! [`Rejection`]: the client's request is refused (bad JSON, a field out of its rules, a
//! payload too large). `lib.rs` raises it as `RequestError` with `.status .type .code .param`.
//!
//! [`UpstreamFault`]: what an upstream (a provider or a local worker) sent breaks HTTP/1.1
//! or SSE framing. Never the client's fault, so never a `RequestError`: `lib.rs` raises it as
//! `UpstreamProtocolError` with `.code`, and the gateway answers 502 (or ends the stream).
//!
//! The parsers' signatures say which one they return (`request`/`passthrough`/`otlp`/`json`/
//! `head`: `Rejection`; `http1`/`sse`: `UpstreamFault`), so the Python exception is fixed by the type,
//! and each enum's `code()`/`message()` are exhaustive matches: a new variant cannot go
//! unmapped.

use std::fmt;

/// A client request the gateway refuses, in the OpenAI error envelope's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The body is not strict JSON (or not an object). `param` is always null.
    InvalidJson(String),
    /// Valid JSON, but the body must be an object.
    NotAnObject,
    /// A known field has a bad value. `param` is the field path.
    InvalidValue { param: String, message: String },
    /// A field (or value) this endpoint does not accept. `param` is the field path.
    UnsupportedField { param: String, message: String },
    /// A (decoded) request payload is larger than the endpoint accepts.
    PayloadTooLarge { limit: usize },
    /// A `Content-Encoding: gzip` body that is not valid gzip (bad header, checksum,
    /// truncated, trailing garbage).
    InvalidGzip,
    /// An OTLP payload that does not decode as `ExportMetricsServiceRequest`.
    InvalidOtlp,
    /// An OTLP payload with more data points or attributes than one request may carry.
    TooManyDataPoints { limit: usize },
    /// A request head that breaks RFC 9112 (or a limit): answer, then close.
    Head(HeadFault),
}

impl Rejection {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Rejection::InvalidValue {
            param: param.into(),
            message: message.into(),
        }
    }

    pub fn unsupported(param: impl Into<String>) -> Self {
        let param = param.into();
        let message = format!("'{param}' is not supported by this endpoint");
        Rejection::UnsupportedField { param, message }
    }

    pub fn unsupported_msg(param: impl Into<String>, message: impl Into<String>) -> Self {
        Rejection::UnsupportedField {
            param: param.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            Rejection::InvalidJson(_)
            | Rejection::NotAnObject
            | Rejection::InvalidValue { .. }
            | Rejection::UnsupportedField { .. }
            | Rejection::InvalidGzip
            | Rejection::InvalidOtlp => 400,
            Rejection::PayloadTooLarge { .. } | Rejection::TooManyDataPoints { .. } => 413,
            Rejection::Head(f) => f.status(),
        }
    }

    /// The envelope's `type`: every rejection is the client's request.
    pub fn error_type(&self) -> &'static str {
        "invalid_request_error"
    }

    pub fn code(&self) -> &'static str {
        match self {
            Rejection::InvalidJson(_)
            | Rejection::NotAnObject
            | Rejection::InvalidValue { .. }
            | Rejection::InvalidGzip
            | Rejection::InvalidOtlp => "invalid_request",
            Rejection::PayloadTooLarge { .. } | Rejection::TooManyDataPoints { .. } => {
                "payload_too_large"
            }
            Rejection::UnsupportedField { .. } => "unsupported_field",
            Rejection::Head(f) => f.code(),
        }
    }

    pub fn param(&self) -> Option<&str> {
        match self {
            Rejection::InvalidJson(_)
            | Rejection::NotAnObject
            | Rejection::PayloadTooLarge { .. }
            | Rejection::InvalidGzip
            | Rejection::InvalidOtlp
            | Rejection::TooManyDataPoints { .. }
            | Rejection::Head(_) => None,
            Rejection::InvalidValue { param, .. } | Rejection::UnsupportedField { param, .. } => {
                Some(param)
            }
        }
    }

    pub fn message(&self) -> String {
        match self {
            Rejection::InvalidJson(m) => format!("invalid JSON: {m}"),
            Rejection::NotAnObject => "request body must be a JSON object".to_string(),
            Rejection::InvalidValue { message, .. }
            | Rejection::UnsupportedField { message, .. } => message.clone(),
            Rejection::PayloadTooLarge { limit } => {
                if *limit >= 1 << 20 && limit % (1 << 20) == 0 {
                    format!("Payload exceeds {} MiB limit", limit >> 20)
                } else {
                    format!("Payload exceeds {limit} bytes limit")
                }
            }
            Rejection::InvalidGzip => "Failed to decompress gzip payload".to_string(),
            Rejection::InvalidOtlp => "Failed to decode OTLP payload".to_string(),
            Rejection::TooManyDataPoints { limit } => {
                format!("OTLP payload carries more than {limit} data points or attributes")
            }
            Rejection::Head(f) => f.message(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for Rejection {}

/// Why a request head is refused (`head.rs`, which documents the order of the checks).
/// Every one is answered and the connection closed; none names a header value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadFault {
    /// The head is longer than the caller's bound.
    TooLarge { limit: usize },
    /// More field lines than `head::MAX_HEADER_LINES`.
    TooManyHeaders { limit: usize },
    /// The bytes do not end with CRLF CRLF.
    Incomplete,
    /// A bare CR or a bare LF.
    BadLineEnding,
    /// Not `token SP target SP HTTP/1.0|HTTP/1.1`, or a target in no form the gateway takes.
    BadRequestLine,
    /// A field line starting with SP or HTAB (obsolete line folding).
    ObsFold,
    /// A field name that is not a token (whitespace before the colon included), or no colon.
    BadHeaderName,
    /// A field value with a CTL other than HTAB, or DEL.
    BadHeaderValue,
    /// Content-Length and Transfer-Encoding both present.
    ConflictingFraming,
    /// Content-Length not one field of digits only.
    BadContentLength,
    /// Transfer-Encoding not one field of exactly `chunked`, or in an HTTP/1.0 request.
    BadTransferEncoding,
    /// One Transfer-Encoding field in HTTP/1.1 naming one coding other than `chunked`
    /// (RFC 9112 §6.1: a server that does not understand a coding answers 501).
    UnsupportedTransferCoding,
    /// An HTTP/1.1 request without Host.
    MissingHost,
    /// More than one Host field.
    DuplicateHost,
}

impl HeadFault {
    pub fn status(&self) -> u16 {
        match self {
            HeadFault::TooLarge { .. } | HeadFault::TooManyHeaders { .. } => 431,
            HeadFault::UnsupportedTransferCoding => 501,
            HeadFault::Incomplete
            | HeadFault::BadLineEnding
            | HeadFault::BadRequestLine
            | HeadFault::ObsFold
            | HeadFault::BadHeaderName
            | HeadFault::BadHeaderValue
            | HeadFault::ConflictingFraming
            | HeadFault::BadContentLength
            | HeadFault::BadTransferEncoding
            | HeadFault::MissingHost
            | HeadFault::DuplicateHost => 400,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            HeadFault::TooLarge { .. } => "head_too_large",
            HeadFault::TooManyHeaders { .. } => "too_many_headers",
            HeadFault::Incomplete => "incomplete_head",
            HeadFault::BadLineEnding => "bad_line_ending",
            HeadFault::BadRequestLine => "bad_request_line",
            HeadFault::ObsFold => "obs_fold",
            HeadFault::BadHeaderName => "bad_header_name",
            HeadFault::BadHeaderValue => "bad_header_value",
            HeadFault::ConflictingFraming => "conflicting_framing",
            HeadFault::BadContentLength => "bad_content_length",
            HeadFault::BadTransferEncoding => "bad_transfer_encoding",
            HeadFault::UnsupportedTransferCoding => "not_implemented",
            HeadFault::MissingHost => "missing_host",
            HeadFault::DuplicateHost => "duplicate_host",
        }
    }

    pub fn message(&self) -> String {
        match self {
            HeadFault::TooLarge { limit } => format!("request head larger than {limit} bytes"),
            HeadFault::TooManyHeaders { limit } => format!("more than {limit} header fields"),
            HeadFault::Incomplete => "the request head does not end with an empty line".into(),
            HeadFault::BadLineEnding => "bare CR or LF in the request head".into(),
            HeadFault::BadRequestLine => {
                "malformed request line (expected: METHOD target HTTP/1.1)".into()
            }
            HeadFault::ObsFold => "obsolete line folding in a header field".into(),
            HeadFault::BadHeaderName => {
                "malformed header field name (expected: token ':' value)".into()
            }
            HeadFault::BadHeaderValue => "control character in a header field value".into(),
            HeadFault::ConflictingFraming => "both Content-Length and Transfer-Encoding".into(),
            HeadFault::BadContentLength => "Content-Length must be one decimal number".into(),
            HeadFault::BadTransferEncoding => {
                "Transfer-Encoding must be one field of exactly 'chunked', in HTTP/1.1".into()
            }
            HeadFault::UnsupportedTransferCoding => {
                "only Transfer-Encoding: chunked is supported".into()
            }
            HeadFault::MissingHost => "an HTTP/1.1 request needs a Host header".into(),
            HeadFault::DuplicateHost => "more than one Host header".into(),
        }
    }
}

/// An upstream response that breaks the protocol (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamFault {
    /// An SSE event exceeded the splitter's size bound.
    EventTooLarge { limit: usize },
    /// An HTTP/1.1 response that breaks the protocol (head, framing, chunk syntax).
    BadResponse(String),
    /// The upstream closed the connection in the middle of a response.
    Closed,
}

impl UpstreamFault {
    /// The stable code the gateway reports (the error envelope's or SSE error event's `code`).
    pub fn code(&self) -> &'static str {
        match self {
            UpstreamFault::EventTooLarge { .. } => "upstream_event_too_large",
            UpstreamFault::BadResponse(_) => "bad_upstream_response",
            UpstreamFault::Closed => "upstream_connection_lost",
        }
    }

    pub fn message(&self) -> String {
        match self {
            UpstreamFault::EventTooLarge { limit } => {
                format!("upstream sent an SSE event larger than {limit} bytes")
            }
            UpstreamFault::BadResponse(m) => {
                format!("the upstream sent a malformed response: {m}")
            }
            UpstreamFault::Closed => "the upstream closed the connection mid-response".to_string(),
        }
    }
}

impl fmt::Display for UpstreamFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for UpstreamFault {}
