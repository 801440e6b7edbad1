//! Rules of `messages`, and the message members a target may not take.

use super::parts::check_part;
use super::{note, Parsed};
use crate::error::Rejection;
use crate::json::Value;

const ROLES: &[&str] = &["system", "user", "assistant", "tool", "developer"];

/// How one message member is checked; each rule sees the message's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// Read first: the other members' rules depend on it.
    Role,
    /// A string.
    Str,
    /// The reference's Message schema: a provider's reasoning, sent back in a conversation.
    /// A string; a message that has it, null included, sets [`Parsed::has_reasoning`].
    Reasoning,
    /// A string, on an assistant message only.
    AssistantStr,
    /// An assistant's tool calls.
    ToolCalls,
    /// The call a tool message answers: a tool message's, and it must have one.
    ToolCallId,
    /// A string or content parts; required unless the message says why not. Its null is
    /// kept: it says "no text" beside tool calls.
    Content,
    /// An OpenAI member outside the SIE contract: an object (a local fault, forwarded
    /// remotely; a null one is left out of what a worker is sent).
    Remote,
    /// A member of OpenAI's chat response message, not of its request message, that the
    /// official SDKs send back when a returned message is appended to the conversation
    /// (openai-python's and openai-node's `annotations` and stream helpers' `parsed`):
    /// accepted on an assistant message, as an array when `array`.
    Response { array: bool },
}

/// The members a message may have, with their rules, in check order.
#[rustfmt::skip]
const MESSAGE_MEMBERS: &[(&str, Member)] = &[
    ("role",              Member::Role),
    ("reasoning_content", Member::Reasoning),
    ("reasoning",         Member::Reasoning),
    ("name",              Member::Str),
    ("refusal",           Member::AssistantStr),
    ("tool_calls",        Member::ToolCalls),
    ("tool_call_id",      Member::ToolCallId),
    ("content",           Member::Content),
    ("audio",             Member::Remote),
    ("function_call",     Member::Remote),
    ("annotations",       Member::Response { array: true }),
    ("parsed",            Member::Response { array: false }),
];

/// The row of the member `key` in [`MESSAGE_MEMBERS`].
fn member_row(key: &str) -> Option<usize> {
    MESSAGE_MEMBERS.iter().position(|&(k, _)| k == key)
}

/// Whether a null message member says nothing (every member's null but `content`'s).
fn null_says_nothing(key: &str) -> bool {
    member_row(key).is_none_or(|at| MESSAGE_MEMBERS[at].1 != Member::Content)
}

/// Message members a target may not take, as (path below the message, key, name): each is
/// written upstream only to a target whose `keep` list names it ([`super::Additions::keep`]).
/// The response members come back from the SDKs; `refusal` and the reasoning members are
/// request members that only some providers accept.
#[rustfmt::skip]
pub(super) const OPTIONAL_MESSAGE_MEMBERS: &[(&[&str], &str, &str)] = &[
    (&[],                        "annotations",      "annotations"),
    (&[],                        "parsed",           "parsed"),
    (&[],                        "refusal",          "refusal"),
    (&[],                        "reasoning_content", "reasoning_content"),
    (&[],                        "reasoning",        "reasoning"),
    // openai-python's `chat.completions.stream()` final message.
    (&["tool_calls"],            "index",            "tool_calls.index"),
    (&["tool_calls", "function"], "parsed_arguments", "tool_calls.function.parsed_arguments"),
];

/// Whether a message member is left out for a target that keeps `keep`: a null value that
/// says nothing ([`null_says_nothing`]), or an [`OPTIONAL_MESSAGE_MEMBERS`] entry the target
/// does not take.
pub(super) fn left_out(keep: &[&str], path: &[&str], key: &str, value: &Value<'_>) -> bool {
    (path.is_empty() && value.is_null() && null_says_nothing(key))
        || OPTIONAL_MESSAGE_MEMBERS
            .iter()
            .any(|&(at, k, name)| at == path && k == key && !keep.contains(&name))
}

/// Fill [`Parsed::message_members`] and [`Parsed::message_nulls`] from validated messages.
fn note_optional_members(p: &mut Parsed, messages: &[Value<'_>]) {
    let mut found = |path: &[&str], key: &str, value: &Value<'_>| {
        if path.is_empty() && value.is_null() && null_says_nothing(key) {
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

/// The rule of `messages` ([`super::fields::Check`]).
pub(super) fn check(p: &mut Parsed, _: &'static str, v: &Value) -> Result<(), Rejection> {
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
    for (i, m) in messages.iter().enumerate() {
        check_message(p, i, m)?;
    }
    note_optional_members(p, messages);
    Ok(())
}

fn check_message(p: &mut Parsed, i: usize, m: &Value) -> Result<(), Rejection> {
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
                &mut p.local_fault,
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
    // Which members the message has, in source order; each value is kept by its row.
    let mut values: [Option<&Value>; MESSAGE_MEMBERS.len()] = [None; MESSAGE_MEMBERS.len()];
    for (k, value) in members {
        let Some(at) = member_row(k) else {
            return Err(Rejection::unsupported(format!("messages[{i}].{k}")));
        };
        values[at] = Some(value).filter(|v| !v.is_null());
        match MESSAGE_MEMBERS[at].1 {
            Member::Remote => {
                if !matches!(value, Value::Object(_) | Value::Null) {
                    return Err(Rejection::invalid(
                        format!("messages[{i}].{k}"),
                        format!("'{k}' must be an object"),
                    ));
                }
                if !value.is_null() {
                    note(
                        &mut p.local_fault,
                        Rejection::unsupported(format!("messages[{i}].{k}")),
                    );
                }
            }
            Member::Response { array } => {
                if role != "assistant" {
                    return Err(Rejection::unsupported(format!("messages[{i}].{k}")));
                }
                if array && !matches!(value, Value::Array(_) | Value::Null) {
                    return Err(Rejection::invalid(
                        format!("messages[{i}].{k}"),
                        format!("'{k}' must be an array"),
                    ));
                }
            }
            Member::Reasoning => p.has_reasoning = true,
            _ => {}
        }
    }
    // Their values, in table order (the rows above were checked as the members were walked).
    for (&(key, rule), value) in MESSAGE_MEMBERS.iter().zip(values) {
        if !matches!(
            rule,
            Member::Role | Member::Remote | Member::Response { .. }
        ) {
            check_member(p, i, m, role, key, rule, value)?;
        }
    }
    Ok(())
}

/// The rule of the member `key` of the message `m` (whose role is `role`), with its value
/// (None: absent or null).
fn check_member(
    p: &mut Parsed,
    i: usize,
    m: &Value,
    role: &str,
    key: &str,
    rule: Member,
    value: Option<&Value>,
) -> Result<(), Rejection> {
    let at = || format!("messages[{i}].{key}");
    match (rule, value) {
        (Member::Str | Member::Reasoning, Some(v)) if v.as_str().is_none() => {
            return Err(Rejection::invalid(
                at(),
                format!("'{key}' must be a string"),
            ));
        }
        (Member::AssistantStr, Some(v)) if role != "assistant" || v.as_str().is_none() => {
            return Err(Rejection::invalid(
                at(),
                format!("'{key}' must be a string on an assistant message"),
            ));
        }
        (Member::ToolCalls, Some(calls)) => {
            if role != "assistant" {
                return Err(Rejection::invalid(
                    at(),
                    format!("'{key}' is allowed only on assistant messages"),
                ));
            }
            check_tool_calls(&mut p.local_fault, i, calls)?;
        }
        (Member::ToolCallId, id) => {
            let fault = match id {
                Some(_) if role != "tool" => {
                    Some("'tool_call_id' is allowed only on tool messages")
                }
                None if role == "tool" => Some("tool messages require 'tool_call_id'"),
                Some(id) if id.as_str().is_none_or(str::is_empty) => {
                    Some("'tool_call_id' must be a non-empty string")
                }
                _ => None,
            };
            if let Some(message) = fault {
                return Err(Rejection::invalid(at(), message));
            }
        }
        (Member::Content, content) => {
            let present = |k: &str| m.get(k).is_some_and(|v| !v.is_null());
            match content {
                None if role == "assistant" && present("tool_calls") => {}
                None if role == "assistant" && present("function_call") => {}
                None if role == "function" => {}
                None => {
                    return Err(Rejection::unsupported_msg(
                        at(),
                        "'content' is required unless an assistant message carries 'tool_calls'",
                    ))
                }
                Some(Value::String(_)) => {}
                Some(Value::Array(parts)) if !parts.is_empty() => {
                    for (j, part) in parts.iter().enumerate() {
                        p.has_images |= check_part(&mut p.local_fault, i, j, part)?;
                    }
                }
                Some(_) => {
                    return Err(Rejection::unsupported_msg(
                        at(),
                        "'content' must be a string or a non-empty array of content parts",
                    ))
                }
            }
        }
        _ => {}
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::super::*;

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
