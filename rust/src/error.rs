//! The one rejection type of the core. Every fallible core function returns
//! `Result<_, Rejection>`; `lib.rs` maps it to `RequestError` with one exhaustive match.

use std::fmt;

/// What the gateway tells the client, in the OpenAI error envelope's terms.
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
    /// An upstream SSE event exceeded the size bound: an upstream fault, never a client one.
    SseEventTooLarge { limit: usize },
    /// An upstream HTTP response that breaks the protocol.
    BadUpstreamResponse(String),
    /// The upstream closed the connection in the middle of a response.
    UpstreamClosed,
    /// A (decoded) request payload is larger than the endpoint accepts.
    PayloadTooLarge { limit: usize },
    /// A `Content-Encoding: gzip` body that is not valid gzip (bad header, checksum,
    /// truncated, trailing garbage).
    InvalidGzip,
    /// An OTLP payload that does not decode as `ExportMetricsServiceRequest`.
    InvalidOtlp,
    /// An OTLP payload with more data points or attributes than one request may carry.
    TooManyDataPoints { limit: usize },
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
            Rejection::SseEventTooLarge { .. }
            | Rejection::BadUpstreamResponse(_)
            | Rejection::UpstreamClosed => 502,
        }
    }

    pub fn error_type(&self) -> &'static str {
        match self {
            Rejection::InvalidJson(_)
            | Rejection::NotAnObject
            | Rejection::InvalidValue { .. }
            | Rejection::UnsupportedField { .. }
            | Rejection::PayloadTooLarge { .. }
            | Rejection::InvalidGzip
            | Rejection::InvalidOtlp
            | Rejection::TooManyDataPoints { .. } => "invalid_request_error",
            Rejection::SseEventTooLarge { .. }
            | Rejection::BadUpstreamResponse(_)
            | Rejection::UpstreamClosed => "upstream_error",
        }
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
            Rejection::SseEventTooLarge { .. } => "upstream_event_too_large",
            Rejection::BadUpstreamResponse(_) => "bad_upstream_response",
            Rejection::UpstreamClosed => "upstream_connection_lost",
        }
    }

    pub fn param(&self) -> Option<&str> {
        match self {
            Rejection::InvalidJson(_)
            | Rejection::NotAnObject
            | Rejection::SseEventTooLarge { .. }
            | Rejection::BadUpstreamResponse(_)
            | Rejection::UpstreamClosed
            | Rejection::PayloadTooLarge { .. }
            | Rejection::InvalidGzip
            | Rejection::InvalidOtlp
            | Rejection::TooManyDataPoints { .. } => None,
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
            Rejection::BadUpstreamResponse(m) => {
                format!("the upstream sent a malformed response: {m}")
            }
            Rejection::UpstreamClosed => {
                "the upstream closed the connection mid-response".to_string()
            }
            Rejection::SseEventTooLarge { limit } => {
                format!("upstream sent an SSE event larger than {limit} bytes")
            }
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
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for Rejection {}
