//! The allow-lists: one row per field, its value [`Rule`] and its [`Reach`].

/// Outputs are counted in u32.
const U32_MAX: i64 = u32::MAX as i64;

/// How one top-level field is checked.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rule {
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
pub(super) type Field = (&'static str, Rule, Reach);

/// The chat allow-list, in check order.
#[rustfmt::skip]
pub(super) const CHAT_FIELDS: &[Field] = &[
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
pub(super) const COMPLETIONS_FIELDS: &[Field] = &[
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
