//! The allow-lists: one row per field, with its [`Rule`] and its [`Reach`]. The walk in
//! `mod.rs` reads only the rows: whatever is particular to one field is the rule its row
//! names, a generic [`Shape`] or one of the field's own rules below.

use super::structured::{response_format, tool_choice, tools, Decoding};
use super::values::{bool_of, int_in, is_empty_object, Shape};
use super::{member, messages, note, Parsed};
use super::{MAX_CHOICES, MAX_LOGIT_BIAS_KEYS, MAX_METADATA_PAIRS, MAX_REMOTE_TOOLS};
use crate::error::Rejection;
use crate::json::{Member, Value};

/// Outputs are counted in u32.
const U32_MAX: i64 = u32::MAX as i64;
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;

/// A field's own rule: checks a present, non-null value and records in [`Parsed`] what the
/// request needs from it.
pub(super) type Check = fn(&mut Parsed, &'static str, &Value<'_>) -> Result<(), Rejection>;

/// A structured field's rule: a [`Check`] that also reads and writes what the structured
/// fields before it found.
pub(super) type LateCheck =
    fn(&mut Parsed, &mut Decoding, &'static str, &Value<'_>) -> Result<(), Rejection>;

/// A rule across fields: the request as the rows found it, and the body's members.
pub(super) type Cross = fn(&Parsed, &[Member<'_>]) -> Result<(), Rejection>;

/// How one top-level field is checked. JSON `null` counts as absent for every rule.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rule {
    /// A generic shape ([`super::values`]).
    Is(Shape),
    /// The field's own rule.
    Own(Check),
    /// The field's own rule, and the field is required.
    Required(Check),
    /// The field's own rule over a map; an empty map counts as absent, like null.
    Map(Check),
    /// A structured field's rule, checked in phase 2: after every other row, in table order.
    Late(LateCheck),
}

impl Rule {
    /// Whether a value the rule passed is forwarded: a hint of another type is not.
    pub(super) fn forwards(self, v: &Value) -> bool {
        !matches!(self, Rule::Is(Shape::Hint)) || matches!(v, Value::String(_) | Value::Null)
    }

    /// Whether a value the rule passed counts as present.
    pub(super) fn present(self, v: &Value) -> bool {
        !(v.is_null() || matches!(self, Rule::Map(_)) && is_empty_object(v))
    }
}

/// Which targets can honour a field. The parser accepts every field of its table either
/// way; a route refuses the ones its target cannot honour ([`super::Parsed::remote_unsupported`],
/// [`super::Parsed::local_unsupported`]), never silently cutting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// A remote OpenAI-compatible provider and a local SGLang worker.
    Both,
    /// SIE extensions to the OpenAI API: only a local worker honours them.
    LocalOnly,
    /// OpenAI fields outside the SIE contract: only a remote provider honours them.
    RemoteOnly,
}
use Reach::{Both, LocalOnly, RemoteOnly};

// Shapes shared by the tables.
const BOOL: Rule = Rule::Is(Shape::Bool);
const STR: Rule = Rule::Is(Shape::Str);
const NON_EMPTY_STR: Rule = Rule::Is(Shape::NonEmptyStr);
const OBJECT: Rule = Rule::Is(Shape::Object);
const HINT: Rule = Rule::Is(Shape::Hint);
const STOP: Rule = Rule::Is(Shape::StrOrStrs);
const SEED: Rule = Rule::Is(Shape::I64);
const TEMPERATURE: Rule = Rule::Is(Shape::Float {
    min: 0.0,
    min_incl: true,
    max: f64::INFINITY,
    max_incl: false,
});
const TOP_P: Rule = Rule::Is(Shape::Float {
    min: 0.0,
    min_incl: false,
    max: 1.0,
    max_incl: true,
});
const F_PENALTY: Rule = Rule::Is(Shape::Float {
    min: -2.0,
    min_incl: true,
    max: 2.0,
    max_incl: true,
});
const TOP_K: Rule = Rule::Is(Shape::Int {
    min: 1,
    max: U32_MAX,
});
const REPETITION_PENALTY: Rule = Rule::Is(Shape::Float {
    min: 0.0,
    min_incl: false,
    max: 2.0,
    max_incl: true,
});
const MIN_TOKENS: Rule = Rule::Is(Shape::Int {
    min: 0,
    max: U32_MAX,
});
const TOP_LOGPROBS: Rule = Rule::Is(Shape::Int { min: 0, max: 20 });
/// `/v1/completions` `best_of`: OpenAI's [0, 20].
const COMPLETIONS_BEST_OF: Rule = Rule::Is(Shape::Int { min: 0, max: 20 });
const COMPLETIONS_LOGPROBS: Rule = Rule::Is(Shape::Int { min: 0, max: 5 });
const REASONING_EFFORTS: Rule = Rule::Is(Shape::Enum(&[
    "none", "minimal", "low", "medium", "high", "xhigh", "max",
]));
const REASONING_FORMATS: Rule = Rule::Is(Shape::Enum(&["raw", "parsed", "hidden"]));
const SERVICE_TIERS: Rule = Rule::Is(Shape::Enum(&[
    "auto", "default", "flex", "scale", "priority", "fast",
]));
const VERBOSITIES: Rule = Rule::Is(Shape::Enum(&["low", "medium", "high"]));
const CACHE_RETENTIONS: Rule = Rule::Is(Shape::Enum(&["in_memory", "24h"]));
const MODALITIES: Rule = Rule::Is(Shape::EnumArray(&["text", "audio"]));

/// One allow-list row: the field, how its value is checked, which targets honour it.
pub(super) type Field = (&'static str, Rule, Reach);

/// The chat allow-list, in check order.
#[rustfmt::skip]
pub(super) const CHAT_FIELDS: &[Field] = &[
    ("model",                  Rule::Required(model),            Both),
    ("messages",               Rule::Required(messages::check),  Both),
    ("max_completion_tokens",  Rule::Own(max_completion_tokens), Both),
    ("max_tokens",             Rule::Own(max_tokens),            Both),
    ("temperature",            TEMPERATURE,                      Both),
    ("top_p",                  TOP_P,                            Both),
    ("stop",                   STOP,                             Both),
    ("frequency_penalty",      F_PENALTY,                        Both),
    ("presence_penalty",       F_PENALTY,                        Both),
    ("top_k",                  TOP_K,                            LocalOnly),
    ("repetition_penalty",     REPETITION_PENALTY,               LocalOnly),
    ("min_tokens",             MIN_TOKENS,                       LocalOnly),
    ("chat_template_kwargs",   OBJECT,                           LocalOnly),
    ("n",                      Rule::Own(n),                     Both),
    ("best_of",                Rule::Own(best_of),               LocalOnly),
    ("lora_adapter",           NON_EMPTY_STR,                    LocalOnly),
    ("user",                   STR,                              Both),
    // SIE: accepted and ignored by a local worker (never sent to it); forwarded remotely.
    ("safety_identifier",      STR,                              Both),
    ("seed",                   SEED,                             Both),
    ("logprobs",               BOOL,                             Both),
    ("top_logprobs",           TOP_LOGPROBS,                     Both),
    ("logit_bias",             Rule::Map(logit_bias),            Both),
    ("prompt_cache_key",       HINT,                             Both),
    ("routing_key",            HINT,                             Both),
    ("stream",                 Rule::Own(stream),                Both),
    ("stream_options",         Rule::Own(stream_options),        Both),
    ("parallel_tool_calls",    BOOL,                             Both),
    ("reasoning_effort",       REASONING_EFFORTS,                RemoteOnly),
    ("reasoning_format",       REASONING_FORMATS,                RemoteOnly),
    ("store",                  BOOL,                             RemoteOnly),
    ("metadata",               Rule::Own(metadata),              RemoteOnly),
    ("service_tier",           SERVICE_TIERS,                    RemoteOnly),
    ("modalities",             MODALITIES,                       RemoteOnly),
    ("audio",                  OBJECT,                           RemoteOnly),
    ("prediction",             OBJECT,                           RemoteOnly),
    ("web_search_options",     OBJECT,                           RemoteOnly),
    ("verbosity",              VERBOSITIES,                      RemoteOnly),
    ("prompt_cache_retention", CACHE_RETENTIONS,                 RemoteOnly),
    ("prompt_cache_options",   OBJECT,                           RemoteOnly),
    ("moderation",             OBJECT,                           RemoteOnly),
    ("functions",              Rule::Own(functions),             RemoteOnly),
    ("function_call",          Rule::Own(function_call),         RemoteOnly),
    ("response_format",        Rule::Late(response_format),      Both),
    ("tools",                  Rule::Late(tools),                Both),
    ("tool_choice",            Rule::Late(tool_choice),          Both),
];

/// The chat rules across fields, checked after the structured fields, in order.
pub(super) const CHAT_CROSS: &[Cross] = &[best_of_beside_stream_and_n, top_logprobs_need_logprobs];

#[rustfmt::skip]
pub(super) const COMPLETIONS_FIELDS: &[Field] = &[
    ("model",             Rule::Required(model),     Both),
    ("prompt",            Rule::Required(prompt),    Both),
    ("max_tokens",        Rule::Own(max_tokens),     Both),
    ("temperature",       TEMPERATURE,               Both),
    ("top_p",             TOP_P,                     Both),
    ("stop",              STOP,                      Both),
    ("frequency_penalty", F_PENALTY,                 Both),
    ("presence_penalty",  F_PENALTY,                 Both),
    ("seed",              SEED,                      Both),
    ("stream",            Rule::Own(stream),         Both),
    ("n",                 Rule::Own(completions_n),  Both),
    ("best_of",           COMPLETIONS_BEST_OF,       RemoteOnly),
    ("echo",              BOOL,                      RemoteOnly),
    ("logprobs",          COMPLETIONS_LOGPROBS,      RemoteOnly),
    ("suffix",            STR,                       RemoteOnly),
    ("logit_bias",        Rule::Map(logit_bias),     RemoteOnly),
    ("stream_options",    Rule::Own(stream_options), RemoteOnly),
    ("user",              STR,                       RemoteOnly),
];

pub(super) const COMPLETIONS_CROSS: &[Cross] = &[];

// The fields' own rules, in table order.

fn model(p: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    match v.as_str() {
        Some(s) if !s.is_empty() => p.model = s.to_owned(),
        _ => {
            return Err(Rejection::invalid(
                name,
                "'model' must be a non-empty string",
            ))
        }
    }
    Ok(())
}

/// The output bound, before `max_tokens`.
fn max_completion_tokens(p: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    p.max_tokens = Some(int_in(name, v, 1, U32_MAX)? as u32);
    Ok(())
}

/// The output bound, unless `max_completion_tokens` gave one.
fn max_tokens(p: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    let n = int_in(name, v, 1, U32_MAX)? as u32;
    p.max_tokens.get_or_insert(n);
    Ok(())
}

fn n(p: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    if !v.is_integer() {
        return Err(Rejection::invalid(name, "'n' must be a positive integer"));
    }
    match v.as_i64() {
        Some(n) if n < 1 => return Err(Rejection::invalid(name, "'n' must be a positive integer")),
        Some(n) if n <= MAX_CHOICES => p.n = n as u32,
        _ => {
            return Err(Rejection::invalid(
                name,
                format!("'n' must be in [1, {MAX_CHOICES}]"),
            ))
        }
    }
    Ok(())
}

fn completions_n(p: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    let n = int_in(name, v, 1, MAX_CHOICES)?;
    if n > 1 {
        note(
            &mut p.local_fault,
            Rejection::unsupported_msg(
                name,
                "'n' > 1 is not supported on /v1/completions; use /v1/chat/completions",
            ),
        );
    }
    Ok(())
}

fn best_of(p: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    p.best_of = Some(int_in(name, v, 1, MAX_CHOICES)? as u32);
    Ok(())
}

fn logit_bias(_: &mut Parsed, _: &'static str, v: &Value) -> Result<(), Rejection> {
    let Value::Object(members) = v else {
        return Err(Rejection::invalid(
            "logit_bias",
            "'logit_bias' must be an object",
        ));
    };
    if members.len() > MAX_LOGIT_BIAS_KEYS {
        return Err(Rejection::invalid(
            "logit_bias",
            format!("'logit_bias' may have at most {MAX_LOGIT_BIAS_KEYS} entries"),
        ));
    }
    for (key, bias) in members {
        let key_ok = !key.is_empty()
            && key.len() <= 19
            && key.bytes().all(|b| b.is_ascii_digit())
            && key.parse::<i64>().is_ok();
        if !key_ok {
            // The key is not echoed back: it is client bytes of any length.
            return Err(Rejection::invalid(
                "logit_bias",
                "'logit_bias' keys must be non-negative integer token ids",
            ));
        }
        let ok = bias
            .as_f64()
            .is_some_and(|b| b.is_finite() && (-100.0..=100.0).contains(&b));
        if !ok {
            return Err(Rejection::invalid(
                format!("logit_bias.{key}"),
                "'logit_bias' values must be numbers in [-100, 100]",
            ));
        }
    }
    Ok(())
}

fn stream(p: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    p.stream = bool_of(name, v)?;
    Ok(())
}

/// What a boolean option sets, given the option's `param`.
type SetOption = fn(&mut Parsed, &'static str, bool);

/// The members of `stream_options`: (key, its `param`, what a boolean sets).
#[rustfmt::skip]
const STREAM_OPTIONS: &[(&str, &str, SetOption)] = &[
    ("include_usage",       "stream_options.include_usage",       include_usage),
    ("include_obfuscation", "stream_options.include_obfuscation", include_obfuscation),
];

fn stream_options(p: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    let Value::Object(members) = v else {
        return Err(Rejection::invalid(
            name,
            "'stream_options' must be an object",
        ));
    };
    for (k, val) in members {
        let Some(&(_, option, set)) = STREAM_OPTIONS.iter().find(|(key, _, _)| k == key) else {
            return Err(Rejection::unsupported(format!("{name}.{k}")));
        };
        match val {
            Value::Bool(b) => set(p, option, *b),
            Value::Null => {}
            _ => {
                return Err(Rejection::invalid(
                    option,
                    format!("'{option}' must be a boolean"),
                ))
            }
        }
    }
    Ok(())
}

fn include_usage(p: &mut Parsed, _: &'static str, on: bool) {
    p.include_usage = on;
}

/// OpenAI's, outside the SIE contract: a local fault.
fn include_obfuscation(p: &mut Parsed, option: &'static str, on: bool) {
    p.include_obfuscation = Some(on);
    note(&mut p.local_fault, Rejection::unsupported(option));
}

/// A map of string → string under OpenAI's `metadata` caps.
fn metadata(_: &mut Parsed, _: &'static str, v: &Value) -> Result<(), Rejection> {
    let Value::Object(members) = v else {
        return Err(Rejection::invalid(
            "metadata",
            "'metadata' must be an object",
        ));
    };
    if members.len() > MAX_METADATA_PAIRS {
        return Err(Rejection::invalid(
            "metadata",
            format!("'metadata' may have at most {MAX_METADATA_PAIRS} pairs"),
        ));
    }
    for (key, value) in members {
        let ok = key.chars().count() <= MAX_METADATA_KEY
            && value
                .as_str()
                .is_some_and(|s| s.chars().count() <= MAX_METADATA_VALUE);
        if !ok {
            // The key is not echoed back: it is client bytes of any length.
            return Err(Rejection::invalid(
                "metadata",
                format!(
                    "'metadata' keys are strings of at most {MAX_METADATA_KEY} characters, \
                     values strings of at most {MAX_METADATA_VALUE}"
                ),
            ));
        }
    }
    Ok(())
}

/// The deprecated `functions`: 1 to 128 function objects, each with a `name`.
fn functions(_: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    let ok = matches!(v, Value::Array(items)
        if (1..=MAX_REMOTE_TOOLS).contains(&items.len())
        && items.iter().all(|f| f.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty())));
    if !ok {
        return Err(Rejection::invalid(
            name,
            format!("'functions' must be 1 to {MAX_REMOTE_TOOLS} objects with a 'name'"),
        ));
    }
    Ok(())
}

/// The deprecated `function_call`: `none`, `auto` or `{"name": ...}`.
fn function_call(_: &mut Parsed, name: &'static str, v: &Value) -> Result<(), Rejection> {
    let ok = match v {
        Value::String(s) => matches!(s.as_ref(), "none" | "auto"),
        obj @ Value::Object(_) => obj.get("name").and_then(Value::as_str).is_some(),
        _ => false,
    };
    if !ok {
        return Err(Rejection::invalid(
            name,
            "'function_call' must be none, auto or {\"name\": ...}",
        ));
    }
    Ok(())
}

/// OpenAI's prompt forms (a string, strings, token ids, arrays of token ids); SIE takes
/// one string (alone or in a one-element array).
fn prompt(p: &mut Parsed, _: &'static str, v: &Value) -> Result<(), Rejection> {
    let tokens = |t: &Value| matches!(t, Value::Array(ids) if !ids.is_empty() && ids.iter().all(Value::is_integer));
    match v {
        Value::String(_) => {}
        Value::Array(items) if items.len() == 1 && items[0].as_str().is_some() => {}
        Value::Array(items) if items.len() > 1 && items.iter().all(|i| i.as_str().is_some()) => {
            note(
                &mut p.local_fault,
                Rejection::unsupported_msg(
                    "prompt",
                    "batched array prompts are not supported; send one prompt string",
                ),
            )
        }
        Value::Array(items) if tokens(v) || (!items.is_empty() && items.iter().all(tokens)) => {
            note(
                &mut p.local_fault,
                Rejection::invalid("prompt", "'prompt' must be a string"),
            )
        }
        _ => {
            return Err(Rejection::invalid(
                "prompt",
                "'prompt' must be a string, an array of strings or token ids",
            ))
        }
    }
    Ok(())
}

// The rules across fields.

/// `best_of` (a local worker's) does not stream, and is at least `n`.
fn best_of_beside_stream_and_n(p: &Parsed, _: &[Member<'_>]) -> Result<(), Rejection> {
    if let Some(best_of) = p.best_of {
        if p.stream {
            return Err(Rejection::unsupported_msg(
                "best_of",
                "'best_of' is not supported with stream: true",
            ));
        }
        if best_of < p.n {
            return Err(Rejection::invalid(
                "best_of",
                "'best_of' must be greater than or equal to 'n'",
            ));
        }
    }
    Ok(())
}

/// A positive `top_logprobs` asks for `logprobs`.
fn top_logprobs_need_logprobs(_: &Parsed, members: &[Member<'_>]) -> Result<(), Rejection> {
    if let (Some(top), false) = (
        member(members, "top_logprobs").and_then(Value::as_i64),
        matches!(member(members, "logprobs"), Some(Value::Bool(true))),
    ) {
        if top > 0 {
            return Err(Rejection::invalid(
                "top_logprobs",
                "'top_logprobs' requires 'logprobs': true",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::tests::chat;

    /// Every row's reach, spelled out: what edgegw/providers.py (OPENAI_CHAT_FIELDS,
    /// OPENAI_COMPLETIONS_FIELDS) and edgegw/local/contract.py (LOCAL_UNSUPPORTED) held
    /// when the reach moved here; tests/test_core_rules.py checks the same against them.
    #[test]
    fn reach_of_every_field() {
        let names = |table: &[Field], reach: Reach| -> Vec<&str> {
            let mut v: Vec<&str> = table.iter().filter(|f| f.2 == reach).map(|f| f.0).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(
            names(CHAT_FIELDS, LocalOnly),
            [
                "best_of",
                "chat_template_kwargs",
                "lora_adapter",
                "min_tokens",
                "repetition_penalty",
                "top_k"
            ]
        );
        assert_eq!(
            names(CHAT_FIELDS, RemoteOnly),
            [
                "audio",
                "function_call",
                "functions",
                "metadata",
                "modalities",
                "moderation",
                "prediction",
                "prompt_cache_options",
                "prompt_cache_retention",
                "reasoning_effort",
                "reasoning_format",
                "service_tier",
                "store",
                "verbosity",
                "web_search_options"
            ]
        );
        assert_eq!(names(CHAT_FIELDS, Both).len(), CHAT_FIELDS.len() - 21);
        assert_eq!(
            names(COMPLETIONS_FIELDS, RemoteOnly),
            [
                "best_of",
                "echo",
                "logit_bias",
                "logprobs",
                "stream_options",
                "suffix",
                "user"
            ]
        );
        assert!(names(COMPLETIONS_FIELDS, LocalOnly).is_empty());

        let p = chat(r#""top_k":3,"reasoning_effort":"low","min_tokens":null,"safety_identifier":"s","best_of":1,"store":true"#).unwrap();
        assert_eq!(p.remote_unsupported, ["best_of", "top_k"]);
        assert_eq!(p.local_unsupported, ["reasoning_effort", "store"]);
        assert!(p.fields.contains(&"safety_identifier"));
        let p = chat("").unwrap();
        assert!(p.remote_unsupported.is_empty() && p.local_unsupported.is_empty());
    }
}
