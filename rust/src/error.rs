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
    /// More inputs (embeddings) or documents (rerank) than the route's bound.
    TooManyInputs { param: String, message: String },
    /// One input text longer than the route's bound (bytes, or tokens where counted).
    InputTooLong { param: String, message: String },
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
    /// A request body whose chunked framing is malformed (the reason): answer, then close.
    BodyFraming(String),
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
            | Rejection::TooManyInputs { .. }
            | Rejection::InputTooLong { .. }
            | Rejection::InvalidGzip
            | Rejection::InvalidOtlp
            | Rejection::BodyFraming(_) => 400,
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
            | Rejection::InvalidOtlp
            | Rejection::BodyFraming(_) => "invalid_request",
            Rejection::PayloadTooLarge { .. } | Rejection::TooManyDataPoints { .. } => {
                "payload_too_large"
            }
            Rejection::UnsupportedField { .. } => "unsupported_field",
            Rejection::TooManyInputs { .. } => "too_many_inputs",
            Rejection::InputTooLong { .. } => "input_too_long",
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
            | Rejection::Head(_)
            | Rejection::BodyFraming(_) => None,
            Rejection::InvalidValue { param, .. }
            | Rejection::UnsupportedField { param, .. }
            | Rejection::TooManyInputs { param, .. }
            | Rejection::InputTooLong { param, .. } => Some(param),
        }
    }

    pub fn message(&self) -> String {
        match self {
            Rejection::InvalidJson(m) => format!("invalid JSON: {m}"),
            Rejection::NotAnObject => "request body must be a JSON object".to_string(),
            Rejection::InvalidValue { message, .. }
            | Rejection::UnsupportedField { message, .. }
            | Rejection::TooManyInputs { message, .. }
            | Rejection::InputTooLong { message, .. } => message.clone(),
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
            Rejection::BodyFraming(why) => format!("malformed request body framing: {why}"),
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

/// Every code the core raises, with the status the gateway answers it with (an upstream's
/// fault: 502), sorted: the Python catalogue (`edgegw.errors.CATALOGUE`) is checked against
/// it, as pydantic-core's `list_all_errors` lets its users check theirs.
pub fn all_codes() -> Vec<(&'static str, u16)> {
    let mut out: Vec<(&'static str, u16)> = rejection_samples()
        .iter()
        .map(|r| (r.code(), r.status()))
        .chain(upstream_samples().iter().map(|u| (u.code(), 502)))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// One value of each variant. A new variant gets an arm in `variant_index` (its matches
/// have no wildcard, so it does not compile until then) and then a sample here (the tests
/// fail until then).
fn rejection_samples() -> Vec<Rejection> {
    let mut out = vec![
        Rejection::InvalidJson(String::new()),
        Rejection::NotAnObject,
        Rejection::invalid("p", "m"),
        Rejection::unsupported("p"),
        Rejection::TooManyInputs {
            param: "p".into(),
            message: "m".into(),
        },
        Rejection::InputTooLong {
            param: "p".into(),
            message: "m".into(),
        },
        Rejection::PayloadTooLarge { limit: 0 },
        Rejection::InvalidGzip,
        Rejection::InvalidOtlp,
        Rejection::TooManyDataPoints { limit: 0 },
        Rejection::BodyFraming(String::new()),
    ];
    out.extend(head_samples().into_iter().map(Rejection::Head));
    out
}

fn head_samples() -> [HeadFault; 14] {
    [
        HeadFault::TooLarge { limit: 0 },
        HeadFault::TooManyHeaders { limit: 0 },
        HeadFault::Incomplete,
        HeadFault::BadLineEnding,
        HeadFault::BadRequestLine,
        HeadFault::ObsFold,
        HeadFault::BadHeaderName,
        HeadFault::BadHeaderValue,
        HeadFault::ConflictingFraming,
        HeadFault::BadContentLength,
        HeadFault::BadTransferEncoding,
        HeadFault::UnsupportedTransferCoding,
        HeadFault::MissingHost,
        HeadFault::DuplicateHost,
    ]
}

fn upstream_samples() -> [UpstreamFault; 3] {
    [
        UpstreamFault::EventTooLarge { limit: 0 },
        UpstreamFault::BadResponse(String::new()),
        UpstreamFault::Closed,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn rejection_index(r: &Rejection) -> usize {
        match r {
            Rejection::InvalidJson(_) => 0,
            Rejection::NotAnObject => 1,
            Rejection::InvalidValue { .. } => 2,
            Rejection::UnsupportedField { .. } => 3,
            Rejection::PayloadTooLarge { .. } => 4,
            Rejection::InvalidGzip => 5,
            Rejection::InvalidOtlp => 6,
            Rejection::TooManyDataPoints { .. } => 7,
            Rejection::TooManyInputs { .. } => 8,
            Rejection::InputTooLong { .. } => 9,
            Rejection::BodyFraming(_) => 10,
            Rejection::Head(h) => 11 + head_index(h),
        }
    }

    fn head_index(h: &HeadFault) -> usize {
        match h {
            HeadFault::TooLarge { .. } => 0,
            HeadFault::TooManyHeaders { .. } => 1,
            HeadFault::Incomplete => 2,
            HeadFault::BadLineEnding => 3,
            HeadFault::BadRequestLine => 4,
            HeadFault::ObsFold => 5,
            HeadFault::BadHeaderName => 6,
            HeadFault::BadHeaderValue => 7,
            HeadFault::ConflictingFraming => 8,
            HeadFault::BadContentLength => 9,
            HeadFault::BadTransferEncoding => 10,
            HeadFault::UnsupportedTransferCoding => 11,
            HeadFault::MissingHost => 12,
            HeadFault::DuplicateHost => 13,
        }
    }

    fn upstream_index(u: &UpstreamFault) -> usize {
        match u {
            UpstreamFault::EventTooLarge { .. } => 0,
            UpstreamFault::BadResponse(_) => 1,
            UpstreamFault::Closed => 2,
        }
    }

    #[test]
    fn the_samples_hold_every_variant_once() {
        let rejections: BTreeSet<usize> = rejection_samples().iter().map(rejection_index).collect();
        assert_eq!(rejections, (0..11 + 14).collect());
        assert_eq!(rejection_samples().len(), 11 + 14);
        let upstream: BTreeSet<usize> = upstream_samples().iter().map(upstream_index).collect();
        assert_eq!(upstream, (0..3).collect());
    }

    #[test]
    fn every_code_once_with_its_status() {
        let codes = all_codes();
        assert!(
            codes.windows(2).all(|w| w[0].0 < w[1].0),
            "one status per code: {codes:?}"
        );
        assert!(codes.contains(&("unsupported_field", 400)));
        assert!(codes.contains(&("head_too_large", 431)));
        assert!(codes.contains(&("not_implemented", 501)));
        assert!(codes.contains(&("upstream_connection_lost", 502)));
    }
}
