//! Passthrough request bodies: bytes in, the two fields a route reads ([`Passthrough`]) out,
//! or one [`Rejection`]. Unlike [`crate::request`] there is no allow-list: the body goes
//! upstream as sent, with only its `model` value rewritten.

use crate::error::Rejection;
use crate::json::{self, Value};

/// A passthrough body (`/v1/responses`, `/v1/messages`, image generations): strict JSON
/// object, forwarded byte for byte except `model`. Only `model` and `stream` are read.
#[derive(Debug, Clone)]
pub struct Passthrough {
    pub model: Option<String>,
    pub stream: bool,
    model_span: Option<(usize, usize)>,
}

pub fn parse_passthrough(body: &[u8]) -> Result<Passthrough, Rejection> {
    let members = json::parse_object_document(body)?;
    let mut p = Passthrough {
        model: None,
        stream: false,
        model_span: None,
    };
    for m in &members {
        match (m.key.as_ref(), &m.value) {
            ("model", Value::Null) => {}
            ("model", Value::String(s)) if !s.is_empty() => {
                p.model = Some(s.to_string());
                p.model_span = Some((m.start, m.end));
            }
            ("model", _) => {
                return Err(Rejection::invalid(
                    "model",
                    "'model' must be a non-empty string",
                ))
            }
            ("stream", Value::Bool(b)) => p.stream = *b,
            ("stream", Value::Null) => {}
            ("stream", _) => {
                return Err(Rejection::invalid("stream", "'stream' must be a boolean"))
            }
            _ => {}
        }
    }
    Ok(p)
}

impl Passthrough {
    /// The body with the `model` value replaced and every other byte as sent.
    pub fn with_model(&self, body: &[u8], model: &str) -> Vec<u8> {
        match self.model_span {
            None => body.to_vec(),
            Some((start, end)) => {
                let mut out = Vec::with_capacity(body.len() + 8);
                out.extend_from_slice(&body[..start]);
                json::write_string(&mut out, model);
                out.extend_from_slice(&body[end..]);
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_is_replaced_and_the_rest_kept_byte_for_byte() {
        let body = br#"{ "input": [ {"model": "not this"} ],  "model" : "openai/gpt-4o", "stream": true }"#;
        let p = parse_passthrough(body).unwrap();
        assert_eq!(p.model.as_deref(), Some("openai/gpt-4o"));
        assert!(p.stream);
        assert_eq!(
            p.with_model(body, "gpt-4o"),
            br#"{ "input": [ {"model": "not this"} ],  "model" : "gpt-4o", "stream": true }"#
                .to_vec()
        );
        let none = parse_passthrough(br#"{"prompt":"x"}"#).unwrap();
        assert_eq!(
            none.with_model(br#"{"prompt":"x"}"#, "m"),
            br#"{"prompt":"x"}"#.to_vec()
        );
        assert!(parse_passthrough(br#"{"model":1}"#).is_err());
        assert!(parse_passthrough(br#"{"model":"a","model":"b"}"#).is_err());
    }
}
