//! Request bodies of `/v1/chat/completions` and `/v1/completions`: bytes in, a
//! validated [`Parsed`] out, or one [`Rejection`].
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
//!   2. structured fields (`response_format`, `tools`, `tool_choice`) and cross-field rules;
//!   3. any other unknown field, the alphabetically first one, as `unsupported_field`.
//!
//! JSON `null` counts as absent for every optional field. Nothing is re-serialised:
//! [`Parsed::upstream_body`] writes the original member bytes back with a new `model`.

use crate::error::Rejection;
use crate::json::{self, Value};

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
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;
const U32_MAX: i64 = u32::MAX as i64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

/// How one top-level field is checked.
#[derive(Debug, Clone, Copy)]
enum Rule {
    Model,
    Messages,
    Prompt,
    Int {
        min: i64,
        max: i64,
    },
    Seed,
    /// A finite number in a range; the flags say whether each bound is included.
    Float {
        min: f64,
        min_incl: bool,
        max: f64,
        max_incl: bool,
    },
    Bool,
    Str,
    NonEmptyStr,
    Object,
    Stop,
    N,
    CompletionsN,
    BestOf,
    /// `/v1/completions` `best_of`: OpenAI's [0, 20].
    CompletionsBestOf,
    TopLogprobs,
    LogitBias,
    StreamOptions,
    /// A string hint; a value of another type is ignored and not forwarded (reference behaviour).
    Hint,
    Enum(&'static [&'static str]),
    /// An array of strings, each one of the listed values (`modalities`).
    EnumArray(&'static [&'static str]),
    /// A map of string → string under OpenAI's `metadata` caps.
    Metadata,
    /// The deprecated `functions`: 1 to 128 function objects, each with a `name`.
    Functions,
    /// The deprecated `function_call`: `none`, `auto` or `{"name": ...}`.
    FunctionCall,
    /// Checked in phase 2.
    Structured,
}

/// Which targets can honour a field. The parser accepts every field of its table either
/// way; a route refuses the ones its target cannot honour ([`Parsed::remote_unsupported`],
/// [`Parsed::local_unsupported`]), never silently cutting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// A remote OpenAI-compatible provider and a local SGLang worker.
    Both,
    /// SIE extensions to the OpenAI API: only a local worker honours them.
    LocalOnly,
    /// OpenAI fields outside the SIE contract: only a remote provider honours them.
    RemoteOnly,
}
use Reach::{Both, LocalOnly, RemoteOnly};

// Value ranges shared by the tables.
const OUTPUT_TOKENS: Rule = Rule::Int {
    min: 1,
    max: U32_MAX,
};
const TEMPERATURE: Rule = Rule::Float {
    min: 0.0,
    min_incl: true,
    max: f64::INFINITY,
    max_incl: false,
};
const TOP_P: Rule = Rule::Float {
    min: 0.0,
    min_incl: false,
    max: 1.0,
    max_incl: true,
};
const F_PENALTY: Rule = Rule::Float {
    min: -2.0,
    min_incl: true,
    max: 2.0,
    max_incl: true,
};
const TOP_K: Rule = Rule::Int {
    min: 1,
    max: U32_MAX,
};
const REPETITION_PENALTY: Rule = Rule::Float {
    min: 0.0,
    min_incl: false,
    max: 2.0,
    max_incl: true,
};
const MIN_TOKENS: Rule = Rule::Int {
    min: 0,
    max: U32_MAX,
};
const REASONING_EFFORTS: Rule =
    Rule::Enum(&["none", "minimal", "low", "medium", "high", "xhigh", "max"]);
const REASONING_FORMATS: Rule = Rule::Enum(&["raw", "parsed", "hidden"]);
const SERVICE_TIERS: Rule = Rule::Enum(&["auto", "default", "flex", "scale", "priority", "fast"]);
const VERBOSITIES: Rule = Rule::Enum(&["low", "medium", "high"]);
const CACHE_RETENTIONS: Rule = Rule::Enum(&["in_memory", "24h"]);
const MODALITIES: Rule = Rule::EnumArray(&["text", "audio"]);

/// One allow-list row: the field, how its value is checked, which targets honour it.
type Field = (&'static str, Rule, Reach);

/// The chat allow-list, in check order.
#[rustfmt::skip]
const CHAT_FIELDS: &[Field] = &[
    ("model",                  Rule::Model,         Both),
    ("messages",               Rule::Messages,      Both),
    ("max_completion_tokens",  OUTPUT_TOKENS,       Both),
    ("max_tokens",             OUTPUT_TOKENS,       Both),
    ("temperature",            TEMPERATURE,         Both),
    ("top_p",                  TOP_P,               Both),
    ("stop",                   Rule::Stop,          Both),
    ("frequency_penalty",      F_PENALTY,           Both),
    ("presence_penalty",       F_PENALTY,           Both),
    ("top_k",                  TOP_K,               LocalOnly),
    ("repetition_penalty",     REPETITION_PENALTY,  LocalOnly),
    ("min_tokens",             MIN_TOKENS,          LocalOnly),
    ("chat_template_kwargs",   Rule::Object,        LocalOnly),
    ("n",                      Rule::N,             Both),
    ("best_of",                Rule::BestOf,        LocalOnly),
    ("lora_adapter",           Rule::NonEmptyStr,   LocalOnly),
    ("user",                   Rule::Str,           Both),
    // SIE: accepted and ignored by a local worker (never sent to it); forwarded remotely.
    ("safety_identifier",      Rule::Str,           Both),
    ("seed",                   Rule::Seed,          Both),
    ("logprobs",               Rule::Bool,          Both),
    ("top_logprobs",           Rule::TopLogprobs,   Both),
    ("logit_bias",             Rule::LogitBias,     Both),
    ("prompt_cache_key",       Rule::Hint,          Both),
    ("routing_key",            Rule::Hint,          Both),
    ("stream",                 Rule::Bool,          Both),
    ("stream_options",         Rule::StreamOptions, Both),
    ("parallel_tool_calls",    Rule::Bool,          Both),
    ("reasoning_effort",       REASONING_EFFORTS,   RemoteOnly),
    ("reasoning_format",       REASONING_FORMATS,   RemoteOnly),
    ("store",                  Rule::Bool,          RemoteOnly),
    ("metadata",               Rule::Metadata,      RemoteOnly),
    ("service_tier",           SERVICE_TIERS,       RemoteOnly),
    ("modalities",             MODALITIES,          RemoteOnly),
    ("audio",                  Rule::Object,        RemoteOnly),
    ("prediction",             Rule::Object,        RemoteOnly),
    ("web_search_options",     Rule::Object,        RemoteOnly),
    ("verbosity",              VERBOSITIES,         RemoteOnly),
    ("prompt_cache_retention", CACHE_RETENTIONS,    RemoteOnly),
    ("prompt_cache_options",   Rule::Object,        RemoteOnly),
    ("moderation",             Rule::Object,        RemoteOnly),
    ("functions",              Rule::Functions,     RemoteOnly),
    ("function_call",          Rule::FunctionCall,  RemoteOnly),
    ("response_format",        Rule::Structured,    Both),
    ("tools",                  Rule::Structured,    Both),
    ("tool_choice",            Rule::Structured,    Both),
];

#[rustfmt::skip]
const COMPLETIONS_FIELDS: &[Field] = &[
    ("model",             Rule::Model,                 Both),
    ("prompt",            Rule::Prompt,                Both),
    ("max_tokens",        OUTPUT_TOKENS,               Both),
    ("temperature",       TEMPERATURE,                 Both),
    ("top_p",             TOP_P,                       Both),
    ("stop",              Rule::Stop,                  Both),
    ("frequency_penalty", F_PENALTY,                   Both),
    ("presence_penalty",  F_PENALTY,                   Both),
    ("seed",              Rule::Seed,                  Both),
    ("stream",            Rule::Bool,                  Both),
    ("n",                 Rule::CompletionsN,          Both),
    ("best_of",           Rule::CompletionsBestOf,     RemoteOnly),
    ("echo",              Rule::Bool,                  RemoteOnly),
    ("logprobs",          Rule::Int { min: 0, max: 5 }, RemoteOnly),
    ("suffix",            Rule::Str,                   RemoteOnly),
    ("logit_bias",        Rule::LogitBias,             RemoteOnly),
    ("stream_options",    Rule::StreamOptions,         RemoteOnly),
    ("user",              Rule::Str,                   RemoteOnly),
];

const ROLES: &[&str] = &["system", "user", "assistant", "tool", "developer"];
const MESSAGE_KEYS: &[&str] = &[
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "refusal",
    // The reference's Message schema: a provider's reasoning, sent back in a conversation.
    "reasoning_content",
    "reasoning",
];
/// OpenAI message members outside the SIE contract (a local fault, forwarded remotely).
const REMOTE_MESSAGE_KEYS: &[&str] = &["audio", "function_call"];
/// Members of OpenAI's chat response message, not of its request message, that the official
/// SDKs send back when a returned message is appended to the conversation (openai-python's
/// and openai-node's `annotations` and stream helpers' `parsed`): accepted on an assistant
/// message.
const RESPONSE_MESSAGE_KEYS: &[&str] = &["annotations", "parsed"];

/// Message members a target may not take, as (path below the message, key, name): each is
/// written upstream only to a target whose `keep` list names it ([`Additions::keep`]).
/// The response members come back from the SDKs; `refusal` and the reasoning members are
/// request members that only some providers accept.
#[rustfmt::skip]
const OPTIONAL_MESSAGE_MEMBERS: &[(&[&str], &str, &str)] = &[
    (&[],                        "annotations",      "annotations"),
    (&[],                        "parsed",           "parsed"),
    (&[],                        "refusal",          "refusal"),
    (&[],                        "reasoning_content", "reasoning_content"),
    (&[],                        "reasoning",        "reasoning"),
    // openai-python's `chat.completions.stream()` final message.
    (&["tool_calls"],            "index",            "tool_calls.index"),
    (&["tool_calls", "function"], "parsed_arguments", "tool_calls.function.parsed_arguments"),
];

/// Whether a message member is left out for a target that keeps `keep`: a null value of an
/// optional member (every member but `content`, whose null says "no text" beside tool calls),
/// or an [`OPTIONAL_MESSAGE_MEMBERS`] entry the target does not take.
fn left_out(keep: &[&str], path: &[&str], key: &str, value: &Value<'_>) -> bool {
    (path.is_empty() && value.is_null() && key != "content")
        || OPTIONAL_MESSAGE_MEMBERS
            .iter()
            .any(|&(at, k, name)| at == path && k == key && !keep.contains(&name))
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
    /// The [`OPTIONAL_MESSAGE_MEMBERS`] the messages carry with a value, by name, sorted.
    pub message_members: Vec<&'static str>,
    /// Whether a message has a null member that [`left_out`] drops.
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

impl Parsed {
    /// The request as compact JSON for an upstream: original member bytes, `model`
    /// replaced by `model`, members named in `omit` left out, and members renamed by
    /// `rename` (a provider quirk, such as `max_tokens` → `max_completion_tokens`).
    ///
    /// Each `(from, to)` pair renames the member `from` to `to`, keeping its value bytes
    /// and its place, but only when the body being written has `from` and has no `to`
    /// (a client that sent both keeps both). Pairs apply in order, each to the names the
    /// pairs before it left, so the written object never holds a name twice. `omit` is
    /// applied first: an omitted member is neither renamed nor in the way of a rename.
    pub fn upstream_body(
        &self,
        body: &[u8],
        model: &str,
        omit: &[&str],
        rename: &[(&str, &str)],
    ) -> Vec<u8> {
        self.upstream_body_with(body, model, omit, rename, Additions::default())
    }

    /// [`Parsed::upstream_body`] with `tools` appended to the request's `tools` array (the
    /// array made when the request has none, or `null`): `tools` is the comma-separated
    /// JSON of the tool objects, written as given (the gateway's own tools, serialized once
    /// per catalogue, added without parsing the request again).
    pub fn upstream_body_with_tools(
        &self,
        body: &[u8],
        model: &str,
        omit: &[&str],
        rename: &[(&str, &str)],
        tools: Option<&[u8]>,
    ) -> Vec<u8> {
        let add = Additions {
            tools,
            ..Additions::default()
        };
        self.upstream_body_with(body, model, omit, rename, add)
    }

    /// [`Parsed::upstream_body`] with the gateway's [`Additions`].
    pub fn upstream_body_with(
        &self,
        body: &[u8],
        model: &str,
        omit: &[&str],
        rename: &[(&str, &str)],
        add: Additions<'_>,
    ) -> Vec<u8> {
        let ask = add.ask_usage
            && self.stream
            && !self.include_usage
            && !omit.contains(&"stream_options");
        // The name each forwarded member is written under (None: omitted).
        let mut names: Vec<Option<&str>> = self
            .spans
            .iter()
            .map(|&(name, _, _)| (!omit.contains(&name)).then_some(name))
            .collect();
        for &(from, to) in rename {
            if names.contains(&Some(to)) {
                continue;
            }
            if let Some(slot) = names.iter_mut().find(|n| **n == Some(from)) {
                *slot = Some(to);
            }
        }
        let extra = add.tools.map_or(0, <[u8]>::len);
        let mut out = Vec::with_capacity(body.len() + 48 + extra);
        out.push(b'{');
        let mut first = true;
        let mut tools = add.tools.filter(|t| !t.is_empty());
        let mut asked = false;
        for (&(name, start, end), written) in self.spans.iter().zip(names) {
            let Some(written) = written else {
                continue;
            };
            if !first {
                out.push(b',');
            }
            first = false;
            json::write_string(&mut out, written);
            out.push(b':');
            if name == "model" {
                json::write_string(&mut out, model);
            } else if let (true, Some(added)) = (name == "tools", tools) {
                tools = None;
                append_to_array(&mut out, &body[start..end], added);
            } else if ask && name == "stream_options" {
                self.write_usage_options(&mut out);
                asked = true;
            } else if let (true, Some(keep)) = (name == "messages", add.keep) {
                self.write_messages(&mut out, &body[start..end], keep);
            } else {
                out.extend_from_slice(&body[start..end]);
            }
        }
        if let Some(added) = tools {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(b"\"tools\":[");
            out.extend_from_slice(added);
            out.push(b']');
        }
        if ask && !asked {
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(br#""stream_options":"#);
            self.write_usage_options(&mut out);
        }
        out.push(b'}');
        out
    }

    /// The `messages` member's value for a target that takes the optional members in `keep`
    /// ([`left_out`]); the source bytes when nothing is left out.
    fn write_messages(&self, out: &mut Vec<u8>, value: &[u8], keep: &[&str]) {
        let trims = self.message_nulls || self.message_members.iter().any(|m| !keep.contains(m));
        let mark = out.len();
        if trims
            && json::write_without(out, value, &|path, key, v| left_out(keep, path, key, v)).is_ok()
        {
            return;
        }
        // Validated bytes cannot fail to parse again; if they ever did, they go as they came.
        out.truncate(mark);
        out.extend_from_slice(value);
    }

    fn write_usage_options(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#"{"include_usage":true"#);
        match self.include_obfuscation {
            Some(true) => out.extend_from_slice(br#","include_obfuscation":true"#),
            Some(false) => out.extend_from_slice(br#","include_obfuscation":false"#),
            None => {}
        }
        out.push(b'}');
    }
}

/// What the gateway adds to a body it writes upstream ([`Parsed::upstream_body_with`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Additions<'a> {
    /// Tool objects' JSON, comma-separated, appended to `tools` (MCP).
    pub tools: Option<&'a [u8]>,
    /// A stream that did not ask for usage asks for it: `stream_options` (in its place,
    /// else last) is written as `{"include_usage":true}`, keeping the client's
    /// `include_obfuscation`. Nothing changes for a request that does not stream, asks
    /// already, or omits `stream_options`.
    pub ask_usage: bool,
    /// The [`OPTIONAL_MESSAGE_MEMBERS`] the target takes, by name: the others, and every
    /// null member but `content`, are left out of the messages. None: messages as sent.
    pub keep: Option<&'a [&'a str]>,
}

/// Write `value` (a validated `tools` member: an array or `null`) with `added` appended.
fn append_to_array(out: &mut Vec<u8>, value: &[u8], added: &[u8]) {
    let trimmed = value.trim_ascii();
    match trimmed
        .strip_prefix(b"[")
        .and_then(|v| v.strip_suffix(b"]"))
    {
        Some(inner) if !inner.trim_ascii().is_empty() => {
            out.push(b'[');
            out.extend_from_slice(inner);
            out.push(b',');
        }
        _ => out.push(b'['),
    }
    out.extend_from_slice(added);
    out.push(b']');
}

pub fn parse_chat(body: &[u8]) -> Result<Parsed, Rejection> {
    parse(body, Endpoint::Chat)
}

pub fn parse_completions(body: &[u8]) -> Result<Parsed, Rejection> {
    parse(body, Endpoint::Completions)
}

fn parse(body: &[u8], endpoint: Endpoint) -> Result<Parsed, Rejection> {
    let members = json::parse_object_document(body)?;
    let table: &[Field] = match endpoint {
        Endpoint::Chat => CHAT_FIELDS,
        Endpoint::Completions => COMPLETIONS_FIELDS,
    };
    let get = |name: &str| members.iter().find(|m| m.key == name).map(|m| &m.value);

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
        let value = get(name);
        if matches!(rule, Rule::Structured) {
            continue;
        }
        check_field(&mut p, name, rule, value)?;
    }

    let mut unknown: Vec<&str> = members
        .iter()
        .map(|m| m.key.as_ref())
        .filter(|k| !table.iter().any(|(name, _, _)| name == k))
        .collect();
    unknown.sort_unstable();

    // 2. Structured fields and cross-field rules.
    if endpoint == Endpoint::Chat {
        let rf = check_response_format(&mut p, get("response_format"))?;
        let has_tools = check_tools(&mut p.local_fault, get("tools"))?;
        if has_tools {
            p.tool_names = tool_names(get("tools"));
        }
        check_tool_choice(&mut p.local_fault, get("tool_choice"), has_tools, rf)?;
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
        if let (Some(top), false) = (
            get("top_logprobs").and_then(Value::as_i64),
            logprobs_on(get("logprobs")),
        ) {
            if top > 0 {
                return Err(Rejection::invalid(
                    "top_logprobs",
                    "'top_logprobs' requires 'logprobs': true",
                ));
            }
        }
    }

    if let Some(Value::Array(messages)) = get("messages") {
        p.has_reasoning = messages
            .iter()
            .any(|m| m.get("reasoning_content").is_some() || m.get("reasoning").is_some());
        note_optional_members(&mut p, messages);
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
        let ignored =
            matches!(rule, Rule::Hint) && !matches!(m.value, Value::String(_) | Value::Null);
        if ignored {
            continue;
        }
        // An empty logit_bias counts as absent.
        let absent = m.value.is_null() || (name == "logit_bias" && is_empty_object(&m.value));
        if !absent {
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

/// Fill [`Parsed::message_members`] and [`Parsed::message_nulls`] from validated messages.
fn note_optional_members(p: &mut Parsed, messages: &[Value<'_>]) {
    let mut found = |path: &[&str], key: &str, value: &Value<'_>| {
        if path.is_empty() && value.is_null() && key != "content" {
            p.message_nulls = true;
        } else if let Some(&(_, _, name)) = OPTIONAL_MESSAGE_MEMBERS
            .iter()
            .find(|&&(at, k, _)| at == path && k == key)
        {
            if !value.is_null() && !p.message_members.contains(&name) {
                p.message_members.push(name);
            }
        }
    };
    for m in messages {
        let Value::Object(members) = m else { continue };
        for (key, value) in members {
            found(&[], key, value);
        }
        let Some(Value::Array(calls)) = m.get("tool_calls") else {
            continue;
        };
        for call in calls {
            let Value::Object(members) = call else {
                continue;
            };
            for (key, value) in members {
                found(&["tool_calls"], key, value);
            }
            if let Some(Value::Object(members)) = call.get("function") {
                for (key, value) in members {
                    found(&["tool_calls", "function"], key, value);
                }
            }
        }
    }
    p.message_members.sort_unstable();
}

fn logprobs_on(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Bool(true)))
}

fn is_empty_object(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty())
}

fn check_field(
    p: &mut Parsed,
    name: &'static str,
    rule: Rule,
    value: Option<&Value>,
) -> Result<(), Rejection> {
    let v = match value {
        None | Some(Value::Null) => {
            return match rule {
                Rule::Model => Err(Rejection::invalid("model", "field 'model' is required")),
                Rule::Messages => Err(Rejection::invalid(
                    "messages",
                    "field 'messages' is required",
                )),
                Rule::Prompt => Err(Rejection::invalid("prompt", "field 'prompt' is required")),
                _ => Ok(()),
            };
        }
        Some(v) => v,
    };
    match rule {
        Rule::Model => match v.as_str() {
            Some(s) if !s.is_empty() => p.model = s.to_owned(),
            _ => {
                return Err(Rejection::invalid(
                    name,
                    "'model' must be a non-empty string",
                ))
            }
        },
        Rule::Messages => p.has_images = check_messages(&mut p.local_fault, v)?,
        Rule::Prompt => check_prompt(&mut p.local_fault, v)?,
        Rule::Int { min, max } => {
            let n = int_in(name, v, min, max)?;
            if name == "max_completion_tokens" || (name == "max_tokens" && p.max_tokens.is_none()) {
                p.max_tokens = Some(n as u32);
            }
        }
        Rule::Seed => {
            if !v.is_integer() {
                return Err(Rejection::invalid(name, "'seed' must be an integer"));
            }
            if v.as_i64().is_none() {
                return Err(Rejection::invalid(
                    name,
                    "'seed' must fit in a signed 64-bit integer",
                ));
            }
        }
        Rule::Float {
            min,
            min_incl,
            max,
            max_incl,
        } => {
            let x = v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                Rejection::invalid(name, format!("'{name}' must be a finite number"))
            })?;
            let lo_ok = if min_incl { x >= min } else { x > min };
            let hi_ok = if max_incl { x <= max } else { x < max };
            if !(lo_ok && hi_ok) {
                let lo = if min_incl { '[' } else { '(' };
                let hi = if max_incl { ']' } else { ')' };
                let range = if max.is_infinite() {
                    format!("{lo}{min}, inf)")
                } else {
                    format!("{lo}{min}, {max}{hi}")
                };
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be in {range}"),
                ));
            }
        }
        Rule::Bool => {
            let Value::Bool(b) = v else {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be a boolean"),
                ));
            };
            if name == "stream" {
                p.stream = *b;
            }
        }
        Rule::Str => {
            if v.as_str().is_none() {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be a string"),
                ));
            }
        }
        Rule::NonEmptyStr => {
            if v.as_str().is_none_or(str::is_empty) {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be a non-empty string"),
                ));
            }
        }
        Rule::Object => {
            if !matches!(v, Value::Object(_)) {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be an object"),
                ));
            }
        }
        Rule::Stop => match v {
            Value::String(_) => {}
            Value::Array(items) if items.iter().all(|i| i.as_str().is_some()) => {}
            _ => {
                return Err(Rejection::invalid(
                    name,
                    "'stop' must be a string or an array of strings",
                ))
            }
        },
        Rule::N => {
            if !v.is_integer() {
                return Err(Rejection::invalid(name, "'n' must be a positive integer"));
            }
            match v.as_i64() {
                Some(n) if n < 1 => {
                    return Err(Rejection::invalid(name, "'n' must be a positive integer"))
                }
                Some(n) if n <= MAX_CHOICES => p.n = n as u32,
                _ => {
                    return Err(Rejection::invalid(
                        name,
                        format!("'n' must be in [1, {MAX_CHOICES}]"),
                    ))
                }
            }
        }
        Rule::CompletionsN => {
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
        }
        Rule::BestOf => p.best_of = Some(int_in(name, v, 1, MAX_CHOICES)? as u32),
        Rule::CompletionsBestOf => {
            int_in(name, v, 0, 20)?;
        }
        Rule::TopLogprobs => {
            int_in(name, v, 0, 20)?;
        }
        Rule::LogitBias => check_logit_bias(v)?,
        Rule::StreamOptions => {
            let Value::Object(members) = v else {
                return Err(Rejection::invalid(
                    name,
                    "'stream_options' must be an object",
                ));
            };
            for (k, val) in members {
                let option = match k.as_ref() {
                    "include_usage" => "stream_options.include_usage",
                    "include_obfuscation" => "stream_options.include_obfuscation",
                    _ => return Err(Rejection::unsupported(format!("stream_options.{k}"))),
                };
                match val {
                    Value::Bool(b) if k == "include_usage" => p.include_usage = *b,
                    Value::Bool(b) => {
                        p.include_obfuscation = Some(*b);
                        note(&mut p.local_fault, Rejection::unsupported(option));
                    }
                    Value::Null => {}
                    _ => {
                        return Err(Rejection::invalid(
                            option,
                            format!("'{option}' must be a boolean"),
                        ))
                    }
                }
            }
        }
        Rule::Hint => {}
        Rule::Enum(allowed) => {
            if !v.as_str().is_some_and(|s| allowed.contains(&s)) {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be one of {}", allowed.join(", ")),
                ));
            }
        }
        Rule::EnumArray(allowed) => {
            let ok = matches!(v, Value::Array(items)
                if items.iter().all(|i| i.as_str().is_some_and(|s| allowed.contains(&s))));
            if !ok {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be an array of {}", allowed.join(", ")),
                ));
            }
        }
        Rule::Metadata => check_metadata(v)?,
        Rule::Functions => {
            let ok = matches!(v, Value::Array(items)
                if (1..=MAX_REMOTE_TOOLS).contains(&items.len())
                && items.iter().all(|f| f.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty())));
            if !ok {
                return Err(Rejection::invalid(
                    name,
                    format!("'functions' must be 1 to {MAX_REMOTE_TOOLS} objects with a 'name'"),
                ));
            }
        }
        Rule::FunctionCall => {
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
        }
        Rule::Structured => {}
    }
    Ok(())
}

/// Keep the first SIE-only fault (see [`Parsed::local_fault`]).
fn note(fault: &mut Option<Rejection>, rejection: Rejection) {
    if fault.is_none() {
        *fault = Some(rejection);
    }
}

fn check_metadata(v: &Value) -> Result<(), Rejection> {
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

fn int_in(name: &str, v: &Value, min: i64, max: i64) -> Result<i64, Rejection> {
    if !v.is_integer() {
        return Err(Rejection::invalid(
            name,
            format!("'{name}' must be an integer"),
        ));
    }
    match v.as_i64() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Rejection::invalid(
            name,
            format!("'{name}' must be in [{min}, {max}]"),
        )),
    }
}

/// OpenAI's prompt forms (a string, strings, token ids, arrays of token ids); SIE takes
/// one string (alone or in a one-element array).
fn check_prompt(fault: &mut Option<Rejection>, v: &Value) -> Result<(), Rejection> {
    let tokens = |t: &Value| matches!(t, Value::Array(ids) if !ids.is_empty() && ids.iter().all(Value::is_integer));
    match v {
        Value::String(_) => {}
        Value::Array(items) if items.len() == 1 && items[0].as_str().is_some() => {}
        Value::Array(items) if items.len() > 1 && items.iter().all(|i| i.as_str().is_some()) => {
            note(
                fault,
                Rejection::unsupported_msg(
                    "prompt",
                    "batched array prompts are not supported; send one prompt string",
                ),
            )
        }
        Value::Array(items) if tokens(v) || (!items.is_empty() && items.iter().all(tokens)) => {
            note(
                fault,
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

fn check_logit_bias(v: &Value) -> Result<(), Rejection> {
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

/// Returns whether any message carries an image part.
fn check_messages(fault: &mut Option<Rejection>, v: &Value) -> Result<bool, Rejection> {
    let Value::Array(messages) = v else {
        return Err(Rejection::invalid(
            "messages",
            "'messages' must be a non-empty array",
        ));
    };
    if messages.is_empty() {
        return Err(Rejection::invalid(
            "messages",
            "'messages' must be a non-empty array",
        ));
    }
    let mut has_images = false;
    for (i, m) in messages.iter().enumerate() {
        let Value::Object(members) = m else {
            return Err(Rejection::invalid(
                format!("messages[{i}]"),
                "each message must be an object",
            ));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r) if ROLES.contains(&r) => r,
            // OpenAI's deprecated function result message (`name` + `content`).
            Some(r @ "function") => {
                note(
                    fault,
                    Rejection::invalid(
                        format!("messages[{i}].role"),
                        format!("'role' must be one of {}", ROLES.join(", ")),
                    ),
                );
                r
            }
            _ => {
                return Err(Rejection::invalid(
                    format!("messages[{i}].role"),
                    format!("'role' must be one of {}", ROLES.join(", ")),
                ))
            }
        };
        for (k, value) in members {
            if REMOTE_MESSAGE_KEYS.contains(&k.as_ref()) {
                if !matches!(value, Value::Object(_) | Value::Null) {
                    return Err(Rejection::invalid(
                        format!("messages[{i}].{k}"),
                        format!("'{k}' must be an object"),
                    ));
                }
                // A null member is left out of what a worker is sent.
                if !value.is_null() {
                    note(fault, Rejection::unsupported(format!("messages[{i}].{k}")));
                }
            } else if role == "assistant" && RESPONSE_MESSAGE_KEYS.contains(&k.as_ref()) {
                if k == "annotations" && !matches!(value, Value::Array(_) | Value::Null) {
                    return Err(Rejection::invalid(
                        format!("messages[{i}].annotations"),
                        "'annotations' must be an array",
                    ));
                }
            } else if !MESSAGE_KEYS.contains(&k.as_ref()) {
                return Err(Rejection::unsupported(format!("messages[{i}].{k}")));
            }
        }
        let field = |k: &str| m.get(k).filter(|v| !v.is_null());
        for k in ["reasoning_content", "reasoning"] {
            if field(k).is_some_and(|r| r.as_str().is_none()) {
                return Err(Rejection::invalid(
                    format!("messages[{i}].{k}"),
                    format!("'{k}' must be a string"),
                ));
            }
        }
        if let Some(name) = field("name") {
            if name.as_str().is_none() {
                return Err(Rejection::invalid(
                    format!("messages[{i}].name"),
                    "'name' must be a string",
                ));
            }
        }
        if let Some(refusal) = field("refusal") {
            if role != "assistant" || refusal.as_str().is_none() {
                return Err(Rejection::invalid(
                    format!("messages[{i}].refusal"),
                    "'refusal' must be a string on an assistant message",
                ));
            }
        }
        let has_tool_calls = match field("tool_calls") {
            None => false,
            Some(calls) => {
                if role != "assistant" {
                    return Err(Rejection::invalid(
                        format!("messages[{i}].tool_calls"),
                        "'tool_calls' is allowed only on assistant messages",
                    ));
                }
                check_tool_calls(fault, i, calls)?;
                true
            }
        };
        let tool_call_id_fault = match field("tool_call_id") {
            Some(_) if role != "tool" => Some("'tool_call_id' is allowed only on tool messages"),
            None if role == "tool" => Some("tool messages require 'tool_call_id'"),
            Some(id) if id.as_str().is_none_or(str::is_empty) => {
                Some("'tool_call_id' must be a non-empty string")
            }
            _ => None,
        };
        if let Some(message) = tool_call_id_fault {
            return Err(Rejection::invalid(
                format!("messages[{i}].tool_call_id"),
                message,
            ));
        }
        match field("content") {
            None if role == "assistant" && has_tool_calls => {}
            None if role == "assistant" && field("function_call").is_some() => {}
            None if role == "function" => {}
            None => {
                return Err(Rejection::unsupported_msg(
                    format!("messages[{i}].content"),
                    "'content' is required unless an assistant message carries 'tool_calls'",
                ))
            }
            Some(Value::String(_)) => {}
            Some(Value::Array(parts)) if !parts.is_empty() => {
                for (j, part) in parts.iter().enumerate() {
                    has_images |= check_part(fault, i, j, part)?;
                }
            }
            Some(_) => {
                return Err(Rejection::unsupported_msg(
                    format!("messages[{i}].content"),
                    "'content' must be a string or a non-empty array of content parts",
                ))
            }
        }
    }
    Ok(has_images)
}

fn check_tool_calls(
    fault: &mut Option<Rejection>,
    i: usize,
    calls: &Value,
) -> Result<(), Rejection> {
    let at = |j: usize, tail: &str| format!("messages[{i}].tool_calls[{j}]{tail}");
    let Value::Array(items) = calls else {
        return Err(Rejection::invalid(
            format!("messages[{i}].tool_calls"),
            "'tool_calls' must be an array",
        ));
    };
    if items.is_empty() {
        return Err(Rejection::invalid(
            format!("messages[{i}].tool_calls"),
            "'tool_calls' must not be empty",
        ));
    }
    for (j, call) in items.iter().enumerate() {
        if !matches!(call, Value::Object(_)) {
            return Err(Rejection::invalid(
                at(j, ""),
                "each tool call must be an object",
            ));
        }
        if call
            .get("id")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(Rejection::invalid(
                at(j, ".id"),
                "'id' must be a non-empty string",
            ));
        }
        match call.get("type").and_then(Value::as_str) {
            Some("function") => {}
            // OpenAI's custom tool call: `{"custom": {"name", "input"}}`.
            Some("custom") => {
                let custom = call.get("custom");
                if custom
                    .and_then(|c| c.get("name"))
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                    || custom
                        .and_then(|c| c.get("input"))
                        .and_then(Value::as_str)
                        .is_none()
                {
                    return Err(Rejection::invalid(
                        at(j, ".custom"),
                        "'custom' must be an object with a 'name' and a string 'input'",
                    ));
                }
                note(
                    fault,
                    Rejection::invalid(at(j, ".type"), "'type' must be \"function\""),
                );
                continue;
            }
            _ => {
                return Err(Rejection::invalid(
                    at(j, ".type"),
                    "'type' must be \"function\" or \"custom\"",
                ))
            }
        }
        let Some(f @ Value::Object(_)) = call.get("function") else {
            return Err(Rejection::invalid(
                at(j, ".function"),
                "'function' must be an object",
            ));
        };
        if f.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(Rejection::invalid(
                at(j, ".function.name"),
                "'name' must be a non-empty string",
            ));
        }
        if f.get("arguments").and_then(Value::as_str).is_none() {
            return Err(Rejection::invalid(
                at(j, ".function.arguments"),
                "'arguments' must be a JSON string",
            ));
        }
    }
    Ok(())
}

/// Returns whether the part is an image.
fn check_part(
    fault: &mut Option<Rejection>,
    i: usize,
    j: usize,
    part: &Value,
) -> Result<bool, Rejection> {
    let path = |tail: &str| format!("messages[{i}].content[{j}]{tail}");
    if !matches!(part, Value::Object(_)) {
        return Err(Rejection::invalid(
            path(""),
            "each content part must be an object",
        ));
    }
    let Some(kind) = part.get("type").and_then(Value::as_str) else {
        return Err(Rejection::invalid(path(".type"), "'type' must be a string"));
    };
    match kind {
        "text" | "input_text" => {
            if part.get("text").and_then(Value::as_str).is_none() {
                return Err(Rejection::invalid(path(".text"), "'text' must be a string"));
            }
            Ok(false)
        }
        "image_url" | "input_image" => {
            match part.get("image_url") {
                Some(Value::String(_)) if kind == "input_image" => {}
                Some(obj @ Value::Object(_)) => {
                    if obj.get("url").and_then(Value::as_str).is_none() {
                        return Err(Rejection::invalid(
                            path(".image_url.url"),
                            "'url' must be a string",
                        ));
                    }
                    match obj.get("detail") {
                        None | Some(Value::Null) => {}
                        Some(d)
                            if d.as_str()
                                .is_some_and(|d| ["auto", "low", "high"].contains(&d)) => {}
                        Some(_) => {
                            return Err(Rejection::invalid(
                                path(".image_url.detail"),
                                "'detail' must be one of auto, low, high",
                            ))
                        }
                    }
                }
                _ => {
                    return Err(Rejection::invalid(
                        path(".image_url"),
                        "'image_url' must be an object with a 'url'",
                    ))
                }
            }
            Ok(true)
        }
        // OpenAI's audio, file and (assistant) refusal parts: remote only.
        "input_audio" | "file" | "refusal" => {
            let ok = match kind {
                "input_audio" => matches!(part.get("input_audio"), Some(Value::Object(_))),
                "file" => matches!(part.get("file"), Some(Value::Object(_))),
                _ => part.get("refusal").and_then(Value::as_str).is_some(),
            };
            if !ok {
                return Err(Rejection::invalid(
                    path(&format!(".{kind}")),
                    format!("a '{kind}' part needs its '{kind}' member"),
                ));
            }
            note(
                fault,
                Rejection::unsupported_msg(path(".type"), "unsupported content part type"),
            );
            Ok(false)
        }
        _ => Err(Rejection::unsupported_msg(
            path(".type"),
            "unsupported content part type",
        )),
    }
}

/// The response_format type that constrains decoding, if any.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Constraint {
    None,
    Structured,
}

fn check_response_format(p: &mut Parsed, v: Option<&Value>) -> Result<Constraint, Rejection> {
    let v = match v {
        None | Some(Value::Null) => return Ok(Constraint::None),
        Some(v @ Value::Object(_)) => v,
        Some(_) => {
            return Err(Rejection::invalid(
                "response_format",
                "'response_format' must be an object",
            ))
        }
    };
    let Some(kind) = v.get("type").filter(|t| !t.is_null()) else {
        return Err(Rejection::invalid(
            "response_format.type",
            "'response_format.type' is required",
        ));
    };
    match kind.as_str() {
        Some("text") => Ok(Constraint::None),
        Some("json_object") => Ok(Constraint::Structured),
        Some("json_schema") => {
            let ok = matches!(v.get("json_schema"), Some(js @ Value::Object(_))
                if matches!(js.get("schema"), Some(Value::Object(_)))
                && js.get("name").is_none_or(|n| n.as_str().is_some() || n.is_null())
                && js.get("strict").is_none_or(|s| matches!(s, Value::Bool(_) | Value::Null)));
            if !ok {
                return Err(Rejection::invalid(
                    "response_format.json_schema",
                    "'json_schema' must be an object with an object 'schema'",
                ));
            }
            Ok(Constraint::Structured)
        }
        Some("regex") => {
            if v.get("regex").and_then(Value::as_str).is_none() {
                return Err(Rejection::invalid(
                    "response_format.regex",
                    "'regex' must be a string",
                ));
            }
            p.features.push("response_format.regex");
            Ok(Constraint::Structured)
        }
        Some("grammar") => {
            if v.get("grammar").and_then(Value::as_str).is_none() {
                return Err(Rejection::invalid(
                    "response_format.grammar",
                    "'grammar' must be a string",
                ));
            }
            match v.get("syntax") {
                None | Some(Value::Null) => {}
                Some(s) if matches!(s.as_str(), Some("ebnf" | "lark")) => {}
                Some(_) => {
                    return Err(Rejection::invalid(
                        "response_format.syntax",
                        "'syntax' must be ebnf or lark",
                    ))
                }
            }
            p.features.push("response_format.grammar");
            Ok(Constraint::Structured)
        }
        Some(_) => Err(Rejection::unsupported_msg(
            "response_format.type",
            "unsupported response_format type",
        )),
        None => Err(Rejection::invalid(
            "response_format.type",
            "'response_format.type' must be a string",
        )),
    }
}

/// The names of validated `tools` (a function tool's, a custom tool's).
fn tool_names(v: Option<&Value>) -> Vec<String> {
    let Some(Value::Array(items)) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|t| {
            let kind = t.get("function").or_else(|| t.get("custom"))?;
            kind.get("name")?.as_str().map(str::to_owned)
        })
        .collect()
}

/// Returns whether tools were given. OpenAI's rules (function and custom tools, at most
/// [`MAX_REMOTE_TOOLS`]); SIE's stricter ones (function tools, at most [`MAX_TOOLS`]) are
/// noted as the local fault.
fn check_tools(fault: &mut Option<Rejection>, v: Option<&Value>) -> Result<bool, Rejection> {
    let items = match v {
        None | Some(Value::Null) => return Ok(false),
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_REMOTE_TOOLS => items,
        Some(_) => {
            return Err(Rejection::invalid(
                "tools",
                format!("'tools' must be a non-empty array of at most {MAX_REMOTE_TOOLS} tools"),
            ))
        }
    };
    if items.len() > MAX_TOOLS {
        note(
            fault,
            Rejection::invalid(
                "tools",
                format!("'tools' must be a non-empty array of at most {MAX_TOOLS} tools"),
            ),
        );
    }
    for (i, tool) in items.iter().enumerate() {
        let Value::Object(members) = tool else {
            return Err(Rejection::invalid(
                format!("tools[{i}]"),
                "each tool must be an object",
            ));
        };
        for (k, _) in members {
            if k != "type" && k != "function" && k != "custom" {
                return Err(Rejection::unsupported(format!("tools[{i}].{k}")));
            }
        }
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some("custom") => {
                check_custom_tool(i, tool)?;
                note(
                    fault,
                    Rejection::invalid(format!("tools[{i}].type"), "'type' must be \"function\""),
                );
                continue;
            }
            _ => {
                return Err(Rejection::invalid(
                    format!("tools[{i}].type"),
                    "'type' must be \"function\" or \"custom\"",
                ))
            }
        }
        let Some(Value::Object(fmembers)) = tool.get("function") else {
            return Err(Rejection::invalid(
                format!("tools[{i}].function"),
                "'function' must be an object",
            ));
        };
        for (k, fv) in fmembers {
            let ok = match k.as_ref() {
                "name" => fv.as_str().is_some_and(|s| !s.is_empty()),
                "description" => matches!(fv, Value::String(_) | Value::Null),
                "parameters" => matches!(fv, Value::Object(_) | Value::Null),
                "strict" => matches!(fv, Value::Bool(_) | Value::Null),
                _ => return Err(Rejection::unsupported(format!("tools[{i}].function.{k}"))),
            };
            if !ok {
                return Err(Rejection::invalid(
                    format!("tools[{i}].function.{k}"),
                    format!("bad value for '{k}'"),
                ));
            }
        }
        if !fmembers.iter().any(|(k, _)| k == "name") {
            return Err(Rejection::invalid(
                format!("tools[{i}].function.name"),
                "'name' is required",
            ));
        }
    }
    Ok(true)
}

/// OpenAI's custom tool: `{"type": "custom", "custom": {"name", "description"?, "format"?}}`.
fn check_custom_tool(i: usize, tool: &Value) -> Result<(), Rejection> {
    let Some(custom @ Value::Object(members)) = tool.get("custom") else {
        return Err(Rejection::invalid(
            format!("tools[{i}].custom"),
            "'custom' must be an object",
        ));
    };
    for (k, cv) in members {
        let ok = match k.as_ref() {
            "name" => cv.as_str().is_some_and(|s| !s.is_empty()),
            "description" => matches!(cv, Value::String(_) | Value::Null),
            "format" => matches!(cv, Value::Object(_) | Value::Null),
            _ => return Err(Rejection::unsupported(format!("tools[{i}].custom.{k}"))),
        };
        if !ok {
            return Err(Rejection::invalid(
                format!("tools[{i}].custom.{k}"),
                format!("bad value for '{k}'"),
            ));
        }
    }
    if custom.get("name").is_none() {
        return Err(Rejection::invalid(
            format!("tools[{i}].custom.name"),
            "'name' is required",
        ));
    }
    Ok(())
}

fn check_tool_choice(
    fault: &mut Option<Rejection>,
    v: Option<&Value>,
    has_tools: bool,
    rf: Constraint,
) -> Result<(), Rejection> {
    let named = |obj: &Value, kind: &str| {
        obj.get(kind)
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
    };
    let forcing = match v {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) => match s.as_ref() {
            "auto" | "none" => false,
            "required" => true,
            _ => {
                return Err(Rejection::invalid(
                    "tool_choice",
                    "'tool_choice' must be auto, none, required or a function",
                ))
            }
        },
        Some(obj @ Value::Object(_)) => match obj.get("type").and_then(Value::as_str) {
            Some("function") if named(obj, "function") => true,
            // OpenAI's custom and allowed-tools choices: remote only.
            Some("custom") if named(obj, "custom") => {
                note(fault, tool_choice_object_fault());
                true
            }
            Some("allowed_tools")
                if obj
                    .get("allowed_tools")
                    .is_some_and(|a| matches!(a.get("tools"), Some(Value::Array(_)))) =>
            {
                note(fault, tool_choice_object_fault());
                false
            }
            _ => return Err(tool_choice_object_fault()),
        },
        Some(_) => {
            return Err(Rejection::invalid(
                "tool_choice",
                "'tool_choice' must be a string or an object",
            ))
        }
    };
    if !has_tools {
        return Err(Rejection::invalid(
            "tool_choice",
            "'tool_choice' requires 'tools'",
        ));
    }
    if forcing && rf == Constraint::Structured {
        note(
            fault,
            Rejection::invalid(
                "tool_choice",
                "a forcing 'tool_choice' cannot be combined with a structured 'response_format'",
            ),
        );
    }
    Ok(())
}

fn tool_choice_object_fault() -> Rejection {
    Rejection::invalid(
        "tool_choice",
        "'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}]"#;

    fn chat(extra: &str) -> Result<Parsed, Rejection> {
        let body = if extra.is_empty() {
            format!("{BASE}}}")
        } else {
            format!("{BASE},{extra}}}")
        };
        parse_chat(body.as_bytes())
    }

    fn err(extra: &str) -> (u16, &'static str, Option<String>) {
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
    fn message_rules() {
        let bad = |msgs: &str| {
            let body = format!(r#"{{"model":"m","messages":{msgs}}}"#);
            let e = parse_chat(body.as_bytes()).expect_err(msgs);
            (e.code(), e.param().unwrap().to_owned())
        };
        assert_eq!(bad("[]"), ("invalid_request", "messages".into()));
        assert_eq!(
            bad(r#"[{"role":"bot","content":"x"}]"#),
            ("invalid_request", "messages[0].role".into())
        );
        assert_eq!(
            bad(r#"[{"role":"user","content":"x"},{"role":"user","content":[{"type":"audio"}]}]"#),
            ("unsupported_field", "messages[1].content[0].type".into())
        );
        assert_eq!(
            bad(r#"[{"role":"user"}]"#),
            ("unsupported_field", "messages[0].content".into())
        );
        assert_eq!(
            bad(r#"[{"role":"tool","content":"x"}]"#),
            ("invalid_request", "messages[0].tool_call_id".into())
        );
        let ok = r#"{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"user","content":[{"type":"text","text":"t"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}"#;
        assert!(parse_chat(ok.as_bytes()).unwrap().has_images);
    }

    #[test]
    fn upstream_body_appends_tools() {
        let added = br#"{"type":"function","function":{"name":"mcp_a"}}"#;
        let write = |body: &str| {
            let p = parse_chat(body.as_bytes()).unwrap();
            let out = p.upstream_body_with_tools(body.as_bytes(), "up", &[], &[], Some(added));
            (p.tool_names.clone(), String::from_utf8(out).unwrap())
        };
        let msgs = r#""messages":[{"role":"user","content":"hi"}]"#;
        let (names, out) = write(&format!(
            r#"{{"model":"m",{msgs},"tools":[ {{"type":"function","function":{{"name":"mine"}}}} ] }}"#
        ));
        assert_eq!(names, ["mine"]);
        assert_eq!(
            out,
            format!(
                r#"{{"model":"up",{msgs},"tools":[ {{"type":"function","function":{{"name":"mine"}}}} ,{}]}}"#,
                std::str::from_utf8(added).unwrap()
            )
        );
        let added_only = format!(r#""tools":[{}]"#, std::str::from_utf8(added).unwrap());
        let (names, out) = write(&format!(r#"{{"model":"m",{msgs}}}"#));
        assert!(names.is_empty());
        assert_eq!(out, format!(r#"{{"model":"up",{msgs},{added_only}}}"#));
        let (_, out) = write(&format!(r#"{{"model":"m","tools":null,{msgs}}}"#));
        assert_eq!(out, format!(r#"{{"model":"up",{added_only},{msgs}}}"#));
    }

    #[test]
    fn upstream_body_replaces_model_and_omits() {
        let body = br#"{"model":"openai/gpt-4o", "messages":[{"role":"user","content":"hi"}], "safety_identifier":"u1", "top_k": 3}"#;
        let p = parse_chat(body).unwrap();
        let out = p.upstream_body(body, "gpt-4o", &["top_k"], &[]);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"safety_identifier":"u1"}"#
        );
    }

    #[test]
    fn upstream_body_renames() {
        const MINIMAX: &[(&str, &str)] = &[("max_tokens", "max_completion_tokens")];
        let out = |body: &str, omit: &[&str], rename: &[(&str, &str)]| {
            let p = parse_chat(body.as_bytes()).unwrap();
            String::from_utf8(p.upstream_body(body.as_bytes(), "up", omit, rename)).unwrap()
        };
        // Renamed in place, the value bytes as sent (an escape is not decoded).
        let body = format!("{BASE},\"max_tokens\": 64 ,\"user\":\"\\u0041\"}}");
        assert_eq!(
            out(
                &body,
                &[],
                &[("max_tokens", "max_completion_tokens"), ("user", "u")]
            ),
            r#"{"model":"up","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":64,"u":"\u0041"}"#
        );
        // Both present: nothing renamed. A null `to` still counts as present.
        let both = format!("{BASE},\"max_tokens\":5,\"max_completion_tokens\":7}}");
        assert!(out(&both, &[], MINIMAX).ends_with(r#""max_tokens":5,"max_completion_tokens":7}"#));
        let null_to = format!("{BASE},\"max_tokens\":5,\"max_completion_tokens\":null}}");
        assert!(out(&null_to, &[], MINIMAX).contains(r#""max_tokens":5"#));
        // `from` absent: nothing to do.
        let neither = format!("{BASE},\"top_k\":3}}");
        assert!(out(&neither, &[], MINIMAX).ends_with(r#""top_k":3}"#));
        // omit first: an omitted `to` does not block the rename, an omitted `from` is gone.
        assert!(out(&both, &["max_completion_tokens"], MINIMAX)
            .ends_with(r#""max_completion_tokens":5}"#));
        assert!(!out(&both, &["max_tokens"], MINIMAX).contains(r#""max_tokens""#));
        // Two pairs onto one name: the second finds it taken, so no name appears twice.
        let two = format!("{BASE},\"top_k\":3,\"seed\":4}}");
        assert!(out(&two, &[], &[("top_k", "x"), ("seed", "x")]).ends_with(r#""x":3,"seed":4}"#));
        // A `to` that needs escaping is written as a JSON string.
        assert!(out(&neither, &[], &[("top_k", "a\"b")]).ends_with(r#""a\"b":3}"#));
    }

    #[test]
    fn upstream_body_asks_usage() {
        let out = |extra: &str, omit: &[&str]| {
            let body = format!("{BASE},{extra}}}");
            let p = parse_chat(body.as_bytes()).unwrap();
            let add = Additions {
                ask_usage: true,
                ..Additions::default()
            };
            String::from_utf8(p.upstream_body_with(body.as_bytes(), "up", omit, &[], add)).unwrap()
        };
        let msgs = r#""messages":[{"role":"user","content":"hi"}]"#;
        assert_eq!(
            out(r#""stream":true"#, &[]),
            format!(
                r#"{{"model":"up",{msgs},"stream":true,"stream_options":{{"include_usage":true}}}}"#
            )
        );
        assert_eq!(
            out(
                r#""stream_options":{"include_obfuscation":false,"include_usage":false},"stream":true"#,
                &[]
            ),
            format!(
                r#"{{"model":"up",{msgs},"stream_options":{{"include_usage":true,"include_obfuscation":false}},"stream":true}}"#
            )
        );
        // Asked already, not streaming, or the provider takes no stream_options: as sent.
        let asked = r#""stream":true,"stream_options":{ "include_usage": true }"#;
        assert!(out(asked, &[]).ends_with(r#""stream_options":{ "include_usage": true }}"#));
        assert!(!out(r#""stream":false"#, &[]).contains("stream_options"));
        assert!(!out(r#""stream":true"#, &["stream_options"]).contains("stream_options"));
    }

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

    /// What the official SDKs send back when a returned message is appended to the
    /// conversation: accepted for every target, written to each as its `keep` says.
    #[test]
    fn response_members_round_trip() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!","refusal":null,"annotations":[],"audio":null,"function_call":null,"tool_calls":null,"parsed":null},{"role":"assistant","content":null,"refusal":"no","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{}","parsed_arguments":{}}}]},{"role":"tool","tool_call_id":"c1","content":"1"}]}"#;
        let p = parse_chat(body).unwrap();
        assert!(p.local_fault.is_none(), "{:?}", p.local_fault);
        assert!(p.message_nulls);
        assert_eq!(
            p.message_members,
            [
                "annotations",
                "refusal",
                "tool_calls.function.parsed_arguments",
                "tool_calls.index"
            ]
        );
        let write = |keep: Option<&[&str]>| {
            let add = Additions {
                keep,
                ..Additions::default()
            };
            let out = p.upstream_body_with(body, "up", &[], &[], add);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            write(Some(&[])),
            r#"{"model":"up","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"1"}]}"#
        );
        let kept = write(Some(&["annotations", "refusal"]));
        assert!(
            kept.contains(r#""content":"Hello!","annotations":[]}"#),
            "{kept}"
        );
        assert!(
            kept.contains(r#""refusal":"no","tool_calls":[{"id":"c1""#),
            "{kept}"
        );
        // None: the messages exactly as sent.
        assert!(write(None).contains(r#""refusal":null,"annotations":[],"audio":null"#));
        // Nothing to leave out: the source bytes, spacing included.
        let plain = br#"{"model":"m","messages":[ {"role":"user", "content":"Hi"} ]}"#;
        let q = parse_chat(plain).unwrap();
        let add = Additions {
            keep: Some(&[]),
            ..Additions::default()
        };
        let out = q.upstream_body_with(plain, "m", &[], &[], add);
        assert_eq!(out, plain.as_slice());
        // Response members are an assistant's only, and still checked; others stay refused.
        for (msgs, code, param) in [
            (
                r#"[{"role":"user","content":"a","annotations":[]}]"#,
                "unsupported_field",
                "messages[0].annotations",
            ),
            (
                r#"[{"role":"assistant","content":"a","annotations":{}}]"#,
                "invalid_request",
                "messages[0].annotations",
            ),
            (
                r#"[{"role":"assistant","content":"a","logprobs":null}]"#,
                "unsupported_field",
                "messages[0].logprobs",
            ),
        ] {
            let e =
                parse_chat(format!(r#"{{"model":"m","messages":{msgs}}}"#).as_bytes()).unwrap_err();
            assert_eq!((e.code(), e.param()), (code, Some(param)), "{msgs}");
        }
    }
}
