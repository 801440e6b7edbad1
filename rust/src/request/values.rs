//! Value rules of the top-level fields.

use super::fields::Rule;
use super::messages::check_messages;
use super::{note, Parsed, MAX_CHOICES, MAX_LOGIT_BIAS_KEYS, MAX_METADATA_PAIRS, MAX_REMOTE_TOOLS};
use crate::error::Rejection;
use crate::json::Value;

const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;

pub(super) fn logprobs_on(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Bool(true)))
}

pub(super) fn is_empty_object(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty())
}

pub(super) fn check_field(
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
