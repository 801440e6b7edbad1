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
            | Rejection::UnsupportedField { .. } => 400,
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
            | Rejection::UnsupportedField { .. } => "invalid_request_error",
            Rejection::SseEventTooLarge { .. }
            | Rejection::BadUpstreamResponse(_)
            | Rejection::UpstreamClosed => "upstream_error",
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Rejection::InvalidJson(_) | Rejection::NotAnObject | Rejection::InvalidValue { .. } => {
                "invalid_request"
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
            | Rejection::UpstreamClosed => None,
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
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for Rejection {}
