//! Request bodies of `/v1/embeddings` and `/v1/rerank`: bytes in, a checked [`Retrieval`]
//! out, or one [`Rejection`].
//!
//! One allow-list per route ([`EMBEDDINGS_FIELDS`], [`RERANK_FIELDS`]), each row a field, whether
//! it is required, and its rule: a generic [`Shape`] or the field's own rule. The walk is the
//! chat tables' (`mod.rs`): JSON `null` counts as absent, the rows are checked in table order,
//! then any other member is refused as `unsupported_field` (the alphabetically first).
//!
//! `/v1/embeddings` is OpenAI's `CreateEmbeddingRequest`: `input` a non-empty string, an array
//! of them, an array of token ids, or an array of non-empty token-id arrays. `/v1/rerank` is the
//! shape SGLang, Cohere, Jina and Voyage share: `query`, `documents` (strings), `top_n`,
//! `return_documents`. The bounds are the operator's ([`Bounds`]): inputs (documents) a request
//! and the UTF-8 bytes of one text, as `too_many_inputs` / `input_too_long`.

use super::values::{check, Shape};
use crate::error::Rejection;
use crate::json::{self, Value};

/// What a route needs to know of a checked body (the values it reads from the JSON itself).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Retrieval {
    pub model: String,
    /// Inputs (embeddings) or documents (rerank).
    pub items: usize,
    /// Embeddings: one input (a string or one token array), not a list of them.
    pub single: bool,
    /// Embeddings: token ids, not text.
    pub tokens: bool,
}

/// The operator's bounds on one request.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Inputs (embeddings) or documents (rerank).
    pub max_items: usize,
    /// UTF-8 bytes of one input text, query or document.
    pub max_input_bytes: usize,
    /// The variable that sets `max_items`, named in the refusal.
    pub items_setting: &'static str,
}

/// Largest token id and `dimensions` / `top_n`: what an i32 holds.
const I32_MAX: i64 = i32::MAX as i64;

type Own = fn(&mut Retrieval, &Bounds, &'static str, &Value<'_>) -> Result<(), Rejection>;

#[derive(Clone, Copy)]
enum Rule {
    Is(Shape),
    Own(Own),
}

/// One row: the field, whether it is required, its rule.
type Field = (&'static str, bool, Rule);

#[rustfmt::skip]
const EMBEDDINGS_FIELDS: &[Field] = &[
    ("model",           true,  Rule::Own(model)),
    ("input",           true,  Rule::Own(input)),
    ("encoding_format", false, Rule::Is(Shape::Enum(&["float", "base64"]))),
    ("dimensions",      false, Rule::Is(Shape::Int { min: 1, max: I32_MAX })),
    ("user",            false, Rule::Is(Shape::Str)),
];

#[rustfmt::skip]
const RERANK_FIELDS: &[Field] = &[
    ("model",            true,  Rule::Own(model)),
    ("query",            true,  Rule::Own(query)),
    ("documents",        true,  Rule::Own(documents)),
    ("top_n",            false, Rule::Is(Shape::Int { min: 1, max: I32_MAX })),
    ("return_documents", false, Rule::Is(Shape::Bool)),
];

pub fn parse_embeddings(body: &[u8], bounds: &Bounds) -> Result<Retrieval, Rejection> {
    parse(body, EMBEDDINGS_FIELDS, bounds)
}

pub fn parse_rerank(body: &[u8], bounds: &Bounds) -> Result<Retrieval, Rejection> {
    parse(body, RERANK_FIELDS, bounds)
}

fn parse(body: &[u8], table: &[Field], bounds: &Bounds) -> Result<Retrieval, Rejection> {
    let members = json::parse_object_document(body)?;
    let mut r = Retrieval::default();
    for &(name, required, rule) in table {
        let value = members
            .iter()
            .find(|m| m.key == name)
            .map(|m| &m.value)
            .filter(|v| !v.is_null());
        match (value, rule) {
            (None, _) if required => {
                return Err(Rejection::invalid(
                    name,
                    format!("field '{name}' is required"),
                ))
            }
            (None, _) => {}
            (Some(v), Rule::Is(shape)) => check(shape, name, v)?,
            (Some(v), Rule::Own(own)) => own(&mut r, bounds, name, v)?,
        }
    }
    let unknown = members
        .iter()
        .map(|m| m.key.as_ref())
        .filter(|k| !table.iter().any(|(name, _, _)| name == k))
        .min();
    if let Some(name) = unknown {
        return Err(Rejection::unsupported(name));
    }
    Ok(r)
}

fn model(r: &mut Retrieval, _: &Bounds, name: &'static str, v: &Value) -> Result<(), Rejection> {
    check(Shape::NonEmptyStr, name, v)?;
    r.model = v.as_str().unwrap_or_default().to_owned();
    Ok(())
}

fn query(_: &mut Retrieval, b: &Bounds, name: &'static str, v: &Value) -> Result<(), Rejection> {
    check(Shape::NonEmptyStr, name, v)?;
    text_bytes(b, name, None, v.as_str().unwrap_or_default())
}

fn documents(
    r: &mut Retrieval,
    b: &Bounds,
    name: &'static str,
    v: &Value,
) -> Result<(), Rejection> {
    match v {
        Value::Array(items) if !items.is_empty() => {
            count(b, name, items.len())?;
            texts(b, name, items)?;
            r.items = items.len();
            Ok(())
        }
        _ => Err(Rejection::invalid(
            name,
            format!("'{name}' must be a non-empty array of strings"),
        )),
    }
}

fn input(r: &mut Retrieval, b: &Bounds, name: &'static str, v: &Value) -> Result<(), Rejection> {
    let (items, single, tokens) = match v {
        Value::String(s) if !s.is_empty() => {
            text_bytes(b, name, None, s)?;
            (1, true, false)
        }
        Value::Array(items) if !items.is_empty() => match &items[0] {
            Value::String(_) => {
                count(b, name, items.len())?;
                texts(b, name, items)?;
                (items.len(), false, false)
            }
            Value::Number(_) => {
                token_ids(name, items)?;
                (1, true, true)
            }
            Value::Array(_) => {
                count(b, name, items.len())?;
                for item in items {
                    match item {
                        Value::Array(ids) if !ids.is_empty() => token_ids(name, ids)?,
                        _ => return Err(token_arrays(name)),
                    }
                }
                (items.len(), false, true)
            }
            _ => return Err(input_shape(name)),
        },
        _ => return Err(input_shape(name)),
    };
    r.items = items;
    r.single = single;
    r.tokens = tokens;
    Ok(())
}

fn input_shape(name: &str) -> Rejection {
    Rejection::invalid(
        name,
        format!(
            "'{name}' must be a non-empty string, array of strings, array of token ids, \
             or array of token-id arrays"
        ),
    )
}

fn token_arrays(name: &str) -> Rejection {
    Rejection::invalid(
        name,
        format!("'{name}' token arrays must be non-empty lists of token ids"),
    )
}

fn token_ids(name: &str, ids: &[Value]) -> Result<(), Rejection> {
    let ok = ids
        .iter()
        .all(|t| t.is_integer() && t.as_i64().is_some_and(|n| (0..=I32_MAX).contains(&n)));
    if ok {
        Ok(())
    } else {
        Err(token_arrays(name))
    }
}

fn texts(b: &Bounds, name: &str, items: &[Value]) -> Result<(), Rejection> {
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(s) if !s.is_empty() => text_bytes(b, name, Some(i), s)?,
            _ => {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}[{i}]' must be a non-empty string"),
                ))
            }
        }
    }
    Ok(())
}

fn count(b: &Bounds, name: &str, n: usize) -> Result<(), Rejection> {
    if n > b.max_items {
        return Err(Rejection::TooManyInputs {
            param: name.to_owned(),
            message: format!(
                "'{name}' has {n} items; at most {} are accepted ({})",
                b.max_items, b.items_setting
            ),
        });
    }
    Ok(())
}

fn text_bytes(b: &Bounds, name: &str, i: Option<usize>, s: &str) -> Result<(), Rejection> {
    if s.len() > b.max_input_bytes {
        let at = i.map_or(name.to_owned(), |i| format!("{name}[{i}]"));
        return Err(Rejection::InputTooLong {
            param: name.to_owned(),
            message: format!(
                "'{at}' is longer than {} bytes (EDGEGW_RETRIEVAL_MAX_INPUT_BYTES)",
                b.max_input_bytes
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        max_items: 3,
        max_input_bytes: 8,
        items_setting: "EDGEGW_EMBEDDINGS_MAX_INPUTS",
    };

    fn embeddings(body: &str) -> Result<Retrieval, Rejection> {
        parse_embeddings(body.as_bytes(), &BOUNDS)
    }

    fn err(r: Result<Retrieval, Rejection>) -> (u16, &'static str, Option<String>) {
        let e = r.expect_err("refused");
        (e.status(), e.code(), e.param().map(str::to_owned))
    }

    #[test]
    fn accepts_every_input_shape() {
        let r = embeddings(r#"{"model":"m","input":"hi","encoding_format":"base64"}"#).unwrap();
        assert_eq!(
            (r.model.as_str(), r.items, r.single, r.tokens),
            ("m", 1, true, false)
        );
        let r = embeddings(r#"{"model":"m","input":["a","b"],"dimensions":8,"user":"u"}"#).unwrap();
        assert_eq!((r.items, r.single, r.tokens), (2, false, false));
        let r = embeddings(r#"{"model":"m","input":[1,2,3]}"#).unwrap();
        assert_eq!((r.items, r.single, r.tokens), (1, true, true));
        let r = embeddings(r#"{"model":"m","input":[[1],[2,3]],"user":null}"#).unwrap();
        assert_eq!((r.items, r.single, r.tokens), (2, false, true));
    }

    #[test]
    fn embeddings_refusals() {
        let invalid = |p: &str| (400, "invalid_request", Some(p.to_owned()));
        let cases = [
            (r#"{"input":"a"}"#, invalid("model")),
            (r#"{"model":"m"}"#, invalid("input")),
            (r#"{"model":"m","input":null}"#, invalid("input")),
            (r#"{"model":"","input":"a"}"#, invalid("model")),
            (r#"{"model":"m","input":""}"#, invalid("input")),
            (r#"{"model":"m","input":[]}"#, invalid("input")),
            (r#"{"model":"m","input":["a",1]}"#, invalid("input")),
            (r#"{"model":"m","input":["a",""]}"#, invalid("input")),
            (r#"{"model":"m","input":[1,"a"]}"#, invalid("input")),
            (r#"{"model":"m","input":[1,-1]}"#, invalid("input")),
            (r#"{"model":"m","input":[1.5]}"#, invalid("input")),
            (r#"{"model":"m","input":[1,2147483648]}"#, invalid("input")),
            (r#"{"model":"m","input":[[1],[]]}"#, invalid("input")),
            (r#"{"model":"m","input":[[1],2]}"#, invalid("input")),
            (r#"{"model":"m","input":{"a":1}}"#, invalid("input")),
            (
                r#"{"model":"m","input":"a","encoding_format":"int8"}"#,
                invalid("encoding_format"),
            ),
            (
                r#"{"model":"m","input":"a","dimensions":0}"#,
                invalid("dimensions"),
            ),
            (
                r#"{"model":"m","input":"a","dimensions":"8"}"#,
                invalid("dimensions"),
            ),
            (r#"{"model":"m","input":"a","user":1}"#, invalid("user")),
            (
                r#"{"model":"m","input":"a","zeta":1,"input_type":"q"}"#,
                (400, "unsupported_field", Some("input_type".to_owned())),
            ),
            (
                r#"{"model":"m","input":["a","b","c","d"]}"#,
                (400, "too_many_inputs", Some("input".to_owned())),
            ),
            (
                r#"{"model":"m","input":[[1],[1],[1],[1]]}"#,
                (400, "too_many_inputs", Some("input".to_owned())),
            ),
            (
                r#"{"model":"m","input":"123456789"}"#,
                (400, "input_too_long", Some("input".to_owned())),
            ),
            // UTF-8 bytes, not characters: five 2-byte characters are 10 bytes.
            (
                r#"{"model":"m","input":["ok","ééééé"]}"#,
                (400, "input_too_long", Some("input".to_owned())),
            ),
            (
                r#"{"model":"m","input":"a","input":"b"}"#,
                (400, "invalid_request", None),
            ),
            (r#"["m"]"#, (400, "invalid_request", None)),
        ];
        for (body, want) in cases {
            assert_eq!(err(embeddings(body)), want, "{body}");
        }
        // A token array is not bounded by the item count (one input) nor by bytes.
        assert!(embeddings(r#"{"model":"m","input":[1,2,3,4,5,6,7,8,9,10]}"#).is_ok());
    }

    #[test]
    fn rerank_rules() {
        let rerank = |body: &str| parse_rerank(body.as_bytes(), &BOUNDS);
        let r = rerank(
            r#"{"model":"m","query":"q","documents":["a","b"],"top_n":1,"return_documents":true}"#,
        )
        .unwrap();
        assert_eq!((r.model.as_str(), r.items), ("m", 2));
        let invalid = |p: &str| (400, "invalid_request", Some(p.to_owned()));
        let cases = [
            (r#"{"model":"m","documents":["a"]}"#, invalid("query")),
            (
                r#"{"model":"m","query":"","documents":["a"]}"#,
                invalid("query"),
            ),
            (r#"{"model":"m","query":"q"}"#, invalid("documents")),
            (
                r#"{"model":"m","query":"q","documents":[]}"#,
                invalid("documents"),
            ),
            (
                r#"{"model":"m","query":"q","documents":[{"text":"a"}]}"#,
                invalid("documents"),
            ),
            (
                r#"{"model":"m","query":"q","documents":["a"],"top_n":0}"#,
                invalid("top_n"),
            ),
            (
                r#"{"model":"m","query":"q","documents":["a"],"return_documents":1}"#,
                invalid("return_documents"),
            ),
            (
                r#"{"model":"m","query":"q","documents":["a"],"rank_fields":["x"]}"#,
                (400, "unsupported_field", Some("rank_fields".to_owned())),
            ),
            (
                r#"{"model":"m","query":"q","documents":["a","b","c","d"]}"#,
                (400, "too_many_inputs", Some("documents".to_owned())),
            ),
            (
                r#"{"model":"m","query":"123456789","documents":["a"]}"#,
                (400, "input_too_long", Some("query".to_owned())),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(err(rerank(body)), want, "{body}");
        }
    }
}
