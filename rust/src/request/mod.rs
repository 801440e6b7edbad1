//! Request bodies of `/v1/chat/completions` and `/v1/completions`: bytes in, a
//! validated [`Parsed`] out, or one [`Rejection`].
//!
//! Split by concern: [`fields`] holds the tables and the fields' own rules, [`values`] the
//! generic value rules, [`messages`] the rules of `messages` ([`parts`] those of their
//! content parts), [`structured`] those of `response_format`, `tools` and `tool_choice`, and
//! [`body`] the upstream body writer. This module walks the tables and names no field:
//! what is particular to one is in its row.
//!
//! The allow-lists are tables of field → ([`Rule`], [`Reach`]) ([`CHAT_FIELDS`],
//! [`COMPLETIONS_FIELDS`]): how the value is checked, and which targets honour the field.
//! A table holds every field of OpenAI's request schema (`CreateChatCompletionRequest`,
//! `CreateCompletionRequest` and what they inherit) and the SIE extensions; any other
//! field is refused for every target. Value rules are OpenAI's; where the SIE contract of
//! a local worker is stricter (64 tools, function tools only, no forcing `tool_choice`
//! beside a structured `response_format`, one completions prompt, ...), the stricter rule
//! does not refuse the body: its first fault is kept in [`Parsed::local_fault`], which a
//! route answers when the target is local. Checks run in the reference gateway's order,
//! so that a body with several faults reports the same one:
//!   1. typed checks of the known fields, in table order;
//!   2. the structured fields' rules ([`Rule::Late`]: `response_format`, `tools`,
//!      `tool_choice`), in table order, then the rules across fields ([`CHAT_CROSS`]);
//!   3. any other unknown field, the alphabetically first one, as `unsupported_field`.
//!
//! JSON `null` counts as absent for every optional field. Nothing is re-serialised:
//! [`Parsed::upstream_body`] writes the original member bytes back with a new `model`.

mod body;
mod fields;
mod messages;
mod parts;
pub mod retrieval;
mod structured;
mod values;

pub use body::Additions;

use crate::error::Rejection;
use crate::json::{self, Member, Value};

use fields::{Cross, Field, Reach, Rule};
use fields::{CHAT_CROSS, CHAT_FIELDS, COMPLETIONS_CROSS, COMPLETIONS_FIELDS};
use structured::Decoding;
use Reach::{Both, LocalOnly, RemoteOnly};

/// Largest `n` and `best_of` (the spec's [1, 128]).
pub const MAX_CHOICES: i64 = 128;
/// Most `logit_bias` entries; beyond it the map is a denial-of-service vector for the sampler.
pub const MAX_LOGIT_BIAS_KEYS: usize = 1024;
/// Most tools in one request to a local worker (SIE's cap).
pub const MAX_TOOLS: usize = 64;
/// Most tools in one request to a remote provider (OpenAI's documented limit).
pub const MAX_REMOTE_TOOLS: usize = 128;
/// OpenAI's `metadata`: at most 16 pairs, keys up to 64 and values up to 512 characters.
pub const MAX_METADATA_PAIRS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

/// A validated request. Owns no body bytes: spans index the body it was parsed from.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub endpoint: Endpoint,
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    /// `stream_options.include_obfuscation`, when the client set it.
    pub include_obfuscation: Option<bool>,
    pub n: u32,
    pub best_of: Option<u32>,
    /// `max_completion_tokens`, else `max_tokens`, when the client set one.
    pub max_tokens: Option<u32>,
    pub has_images: bool,
    /// Whether a message carries `reasoning_content` or `reasoning` (null included).
    pub has_reasoning: bool,
    /// The [`OPTIONAL_MESSAGE_MEMBERS`](messages::OPTIONAL_MESSAGE_MEMBERS) the messages carry with a value, by name, sorted.
    pub message_members: Vec<&'static str>,
    /// Whether a message has a null member that [`left_out`](messages::left_out) drops.
    pub message_nulls: bool,
    /// Top-level fields present with a non-null value, sorted (what a target must honour).
    pub fields: Vec<&'static str>,
    /// Value-level extensions a target must also honour (`response_format.regex`, ...).
    pub features: Vec<&'static str>,
    /// The `fields` a remote OpenAI-compatible provider cannot honour ([`Reach::LocalOnly`]),
    /// sorted. `features` are not fields: a remote target refuses those too.
    pub remote_unsupported: Vec<&'static str>,
    /// The `fields` a local worker cannot honour ([`Reach::RemoteOnly`]), sorted.
    pub local_unsupported: Vec<&'static str>,
    /// The first value the SIE contract refuses where OpenAI's schema accepts it (65
    /// tools, a custom tool, an audio part, ...): a local target answers it, after
    /// `local_unsupported`; a remote target forwards the value.
    pub local_fault: Option<Rejection>,
    /// The names of the request's `tools` (validated; function and custom tools), in order.
    pub tool_names: Vec<String>,
    /// Members to forward: (name, start, end) into the body, in source order.
    spans: Vec<(&'static str, usize, usize)>,
}

pub fn parse_chat(body: &[u8]) -> Result<Parsed, Rejection> {
    parse(body, Endpoint::Chat)
}

pub fn parse_completions(body: &[u8]) -> Result<Parsed, Rejection> {
    parse(body, Endpoint::Completions)
}

fn parse(body: &[u8], endpoint: Endpoint) -> Result<Parsed, Rejection> {
    let members = json::parse_object_document(body)?;
    let (table, cross): (&[Field], &[Cross]) = match endpoint {
        Endpoint::Chat => (CHAT_FIELDS, CHAT_CROSS),
        Endpoint::Completions => (COMPLETIONS_FIELDS, COMPLETIONS_CROSS),
    };
    let get = |name: &str| member(&members, name).filter(|v| !v.is_null());

    let mut p = Parsed {
        endpoint,
        model: String::new(),
        stream: false,
        include_usage: false,
        include_obfuscation: None,
        n: 1,
        best_of: None,
        max_tokens: None,
        has_images: false,
        has_reasoning: false,
        message_members: Vec::new(),
        message_nulls: false,
        fields: Vec::new(),
        features: Vec::new(),
        remote_unsupported: Vec::new(),
        local_unsupported: Vec::new(),
        local_fault: None,
        tool_names: Vec::new(),
        spans: Vec::with_capacity(members.len()),
    };

    // 1. Typed checks of known fields, in table order.
    for &(name, rule, _) in table {
        match (rule, get(name)) {
            (Rule::Required(_), None) => {
                return Err(Rejection::invalid(
                    name,
                    format!("field '{name}' is required"),
                ))
            }
            (Rule::Late(_), _) | (_, None) => {}
            (Rule::Is(shape), Some(v)) => values::check(shape, name, v)?,
            (Rule::Own(check) | Rule::Required(check) | Rule::Map(check), Some(v)) => {
                check(&mut p, name, v)?
            }
        }
    }

    let mut unknown: Vec<&str> = members
        .iter()
        .map(|m| m.key.as_ref())
        .filter(|k| !table.iter().any(|(name, _, _)| name == k))
        .collect();
    unknown.sort_unstable();

    // 2. Structured fields, in table order, then the rules across fields.
    let mut decoding = Decoding::default();
    for &(name, rule, _) in table {
        let Rule::Late(check) = rule else { continue };
        if let Some(v) = get(name) {
            check(&mut p, &mut decoding, name, v)?;
        }
    }
    for rule in cross {
        rule(&p, &members)?;
    }

    // 3. Any other field this endpoint does not take; the alphabetically first is reported.
    if let Some(name) = unknown.first() {
        return Err(Rejection::unsupported(*name));
    }

    // Record what is present and what is forwarded.
    for m in &members {
        let Some(&(name, rule, reach)) = table.iter().find(|(n, _, _)| *n == m.key) else {
            continue;
        };
        if !rule.forwards(&m.value) {
            continue;
        }
        if rule.present(&m.value) {
            p.fields.push(name);
            match reach {
                LocalOnly => p.remote_unsupported.push(name),
                RemoteOnly => p.local_unsupported.push(name),
                Both => {}
            }
        }
        p.spans.push((name, m.start, m.end));
    }
    p.fields.sort_unstable();
    p.remote_unsupported.sort_unstable();
    p.local_unsupported.sort_unstable();
    Ok(p)
}

/// The value of the top-level member `name`, if the body has it.
fn member<'m, 'a>(members: &'m [Member<'a>], name: &str) -> Option<&'m Value<'a>> {
    members.iter().find(|m| m.key == name).map(|m| &m.value)
}

/// Keep the first SIE-only fault (see [`Parsed::local_fault`]).
pub(super) fn note(fault: &mut Option<Rejection>, rejection: Rejection) {
    if fault.is_none() {
        *fault = Some(rejection);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(super) const BASE: &str =
        r#"{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}]"#;

    pub(super) fn chat(extra: &str) -> Result<Parsed, Rejection> {
        let body = if extra.is_empty() {
            format!("{BASE}}}")
        } else {
            format!("{BASE},{extra}}}")
        };
        parse_chat(body.as_bytes())
    }

    pub(super) fn err(extra: &str) -> (u16, &'static str, Option<String>) {
        let e = chat(extra).expect_err(extra);
        (e.status(), e.code(), e.param().map(str::to_owned))
    }

    #[test]
    fn accepts_a_typical_request() {
        let p = chat(
            r#""temperature":0.2,"stream":true,"stream_options":{"include_usage":true},"n":2"#,
        )
        .unwrap();
        assert_eq!(p.model, "openai/gpt-4o");
        assert!(p.stream && p.include_usage);
        assert_eq!(p.n, 2);
        assert_eq!(
            p.fields,
            vec![
                "messages",
                "model",
                "n",
                "stream",
                "stream_options",
                "temperature"
            ]
        );
    }

    #[test]
    fn value_rules() {
        let cases: &[(&str, &str, &str)] = &[
            (r#""temperature":-1"#, "invalid_request", "temperature"),
            (r#""temperature":"hot""#, "invalid_request", "temperature"),
            (r#""top_p":0"#, "invalid_request", "top_p"),
            (r#""n":0"#, "invalid_request", "n"),
            (r#""n":129"#, "invalid_request", "n"),
            (r#""seed":1.5"#, "invalid_request", "seed"),
            (r#""seed":9223372036854775808"#, "invalid_request", "seed"),
            (
                r#""best_of":2,"stream":true"#,
                "unsupported_field",
                "best_of",
            ),
            (r#""best_of":1,"n":2"#, "invalid_request", "best_of"),
            (r#""top_logprobs":2"#, "invalid_request", "top_logprobs"),
            (r#""logit_bias":{"-1":1}"#, "invalid_request", "logit_bias"),
            (
                r#""logit_bias":{"5":101}"#,
                "invalid_request",
                "logit_bias.5",
            ),
            (
                r#""stream_options":{"x":1}"#,
                "unsupported_field",
                "stream_options.x",
            ),
            (
                r#""response_format":{"type":"xml"}"#,
                "unsupported_field",
                "response_format.type",
            ),
            (
                r#""response_format":{}"#,
                "invalid_request",
                "response_format.type",
            ),
            (r#""tool_choice":"auto""#, "invalid_request", "tool_choice"),
            (r#""zeta":1,"alpha":2"#, "unsupported_field", "alpha"),
            (r#""alpha":1,"store":true"#, "unsupported_field", "alpha"),
            (r#""store":"yes""#, "invalid_request", "store"),
            (
                r#""service_tier":"cheap""#,
                "invalid_request",
                "service_tier",
            ),
            (r#""modalities":["video"]"#, "invalid_request", "modalities"),
            (r#""metadata":{"a":1}"#, "invalid_request", "metadata"),
            (r#""verbosity":"loud""#, "invalid_request", "verbosity"),
            (r#""audio":"alloy""#, "invalid_request", "audio"),
            (
                r#""function_call":"always""#,
                "invalid_request",
                "function_call",
            ),
            (
                r#""stream_options":{"include_obfuscation":1}"#,
                "invalid_request",
                "stream_options.include_obfuscation",
            ),
            (
                r#""zeta":1,"tool_choice":"auto""#,
                "invalid_request",
                "tool_choice",
            ),
            (r#""functions":[]"#, "invalid_request", "functions"),
            (
                r#""temperature":-1,"zzz":1"#,
                "invalid_request",
                "temperature",
            ),
        ];
        for &(extra, code, param) in cases {
            assert_eq!(err(extra), (400, code, Some(param.to_string())), "{extra}");
        }
    }

    #[test]
    fn completions_rules() {
        let bad = |body: &str| {
            let e = parse_completions(body.as_bytes()).expect_err(body);
            (e.code(), e.param().map(str::to_owned))
        };
        let local = |body: &str| {
            let p = parse_completions(body.as_bytes()).expect(body);
            let e = p.local_fault.expect(body);
            (e.code(), e.param().map(str::to_owned))
        };
        assert_eq!(
            bad(r#"{"model":"m","prompt":"p","echo":true,"temperature":-5}"#),
            ("invalid_request", Some("temperature".into()))
        );
        assert_eq!(
            local(r#"{"model":"m","prompt":["a","b"]}"#),
            ("unsupported_field", Some("prompt".into()))
        );
        assert_eq!(
            local(r#"{"model":"m","prompt":[[1,2],[3]]}"#),
            ("invalid_request", Some("prompt".into()))
        );
        assert_eq!(
            bad(r#"{"model":"m","prompt":[]}"#),
            ("invalid_request", Some("prompt".into()))
        );
        assert_eq!(
            bad(r#"{"model":"m","prompt":[[]]}"#),
            ("invalid_request", Some("prompt".into()))
        );
        assert_eq!(
            local(r#"{"model":"m","prompt":"p","n":2}"#),
            ("unsupported_field", Some("n".into()))
        );
        assert_eq!(
            bad(r#"{"model":"m","prompt":"p","n":0}"#),
            ("invalid_request", Some("n".into()))
        );
        assert_eq!(
            bad(r#"{"model":"m","prompt":"p","logprobs":6}"#),
            ("invalid_request", Some("logprobs".into()))
        );
        assert_eq!(
            bad(r#"{"model":"m","prompt":"p","top_k":2}"#),
            ("unsupported_field", Some("top_k".into()))
        );
        let p = parse_completions(br#"{"model":"m","prompt":["one"],"max_tokens":5}"#).unwrap();
        assert!(p.local_fault.is_none());
        let p = parse_completions(
            br#"{"model":"m","prompt":"p","echo":true,"suffix":"s","best_of":2,"user":"u"}"#,
        )
        .unwrap();
        assert_eq!(p.local_unsupported, ["best_of", "echo", "suffix", "user"]);
    }

    /// OpenAI values the SIE contract refuses: accepted, the first kept as the local fault.
    #[test]
    fn local_faults() {
        let tools = |n: usize| {
            let one = r#"{"type":"function","function":{"name":"f"}}"#;
            format!(r#""tools":[{}]"#, vec![one; n].join(","))
        };
        let custom = r#"{"type":"custom","custom":{"name":"c"}}"#;
        let audio_part = r#"{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}"#;
        let cases: Vec<(String, &str, &str)> = vec![
            (tools(65), "invalid_request", "tools"),
            (tools(128), "invalid_request", "tools"),
            (format!(r#""tools":[{custom}]"#), "invalid_request", "tools[0].type"),
            (
                format!(r#"{},"tool_choice":"required","response_format":{{"type":"json_object"}}"#, tools(1)),
                "invalid_request",
                "tool_choice",
            ),
            (
                format!(r#"{},"tool_choice":{{"type":"allowed_tools","allowed_tools":{{"mode":"auto","tools":[]}}}}"#, tools(1)),
                "invalid_request",
                "tool_choice",
            ),
            (
                r#""stream_options":{"include_obfuscation":false}"#.into(),
                "unsupported_field",
                "stream_options.include_obfuscation",
            ),
            (
                format!(r#""messages":[{{"role":"user","content":[{audio_part}]}}]"#),
                "unsupported_field",
                "messages[0].content[0].type",
            ),
            (
                r#""messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","audio":{"id":"x"}}]"#.into(),
                "unsupported_field",
                "messages[1].audio",
            ),
            (
                r#""messages":[{"role":"function","name":"f","content":"r"}]"#.into(),
                "invalid_request",
                "messages[0].role",
            ),
            (
                r#""messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"c","input":"x"}}]}]"#.into(),
                "invalid_request",
                "messages[0].tool_calls[0].type",
            ),
        ];
        let parse = |extra: &str| {
            if extra.starts_with(r#""messages""#) {
                parse_chat(format!(r#"{{"model":"m",{extra}}}"#).as_bytes())
            } else {
                chat(extra)
            }
        };
        for (extra, code, param) in &cases {
            let p = parse(extra).unwrap_or_else(|e| panic!("{extra}: {e}"));
            let f = p.local_fault.expect(extra);
            assert_eq!((f.code(), f.param()), (*code, Some(*param)), "{extra}");
        }
        // Past OpenAI's own bounds: refused for every target.
        assert_eq!(
            err(&tools(129)),
            (400, "invalid_request", Some("tools".into()))
        );
        assert!(chat(&tools(64)).unwrap().local_fault.is_none());
        // The reference's reasoning members, on any message.
        let p = parse(r#""messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":"r","reasoning":null}]"#).unwrap();
        assert!(p.local_fault.is_none() && p.has_reasoning);
        assert!(!chat("").unwrap().has_reasoning);
        let e =
            parse(r#""messages":[{"role":"assistant","content":"a","reasoning":5}]"#).unwrap_err();
        assert_eq!(
            (e.code(), e.param()),
            ("invalid_request", Some("messages[0].reasoning"))
        );
    }
}
