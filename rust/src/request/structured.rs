//! Rules of the structured fields: `response_format`, `tools` and `tool_choice`. Their rows
//! ([`super::fields::Rule::Late`]) are checked in phase 2, in table order, after every other
//! row; what one tells the next is kept in [`Decoding`].

use super::values::{check_members, MemberRow, Slot};
use super::{note, Parsed, MAX_REMOTE_TOOLS, MAX_TOOLS};
use crate::error::Rejection;
use crate::json::Value;

/// The members of a tool.
const TOOL_MEMBERS: &[&str] = &["type", "function", "custom"];

/// The members of a function tool's `function`.
#[rustfmt::skip]
const FUNCTION_MEMBERS: &[MemberRow] = &[
    ("name",        Slot::NonEmptyStr,  true),
    ("description", Slot::StrOrNull,    false),
    ("parameters",  Slot::ObjectOrNull, false),
    ("strict",      Slot::BoolOrNull,   false),
];

/// The members of a custom tool's `custom`.
#[rustfmt::skip]
const CUSTOM_MEMBERS: &[MemberRow] = &[
    ("name",        Slot::NonEmptyStr,  true),
    ("description", Slot::StrOrNull,    false),
    ("format",      Slot::ObjectOrNull, false),
];

/// What the structured fields tell each other.
#[derive(Debug, Default)]
pub(super) struct Decoding {
    /// `tools` were given.
    tools: bool,
    /// What `response_format` does to decoding.
    constraint: Constraint,
}

/// The response_format type that constrains decoding, if any.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Constraint {
    #[default]
    None,
    Structured,
}

pub(super) fn response_format(
    p: &mut Parsed,
    d: &mut Decoding,
    _: &'static str,
    v: &Value,
) -> Result<(), Rejection> {
    d.constraint = check_response_format(p, v)?;
    Ok(())
}

pub(super) fn tools(
    p: &mut Parsed,
    d: &mut Decoding,
    _: &'static str,
    v: &Value,
) -> Result<(), Rejection> {
    check_tools(&mut p.local_fault, v)?;
    d.tools = true;
    p.tool_names = tool_names(v);
    Ok(())
}

pub(super) fn tool_choice(
    p: &mut Parsed,
    d: &mut Decoding,
    _: &'static str,
    v: &Value,
) -> Result<(), Rejection> {
    check_tool_choice(&mut p.local_fault, v, d.tools, d.constraint)
}

fn check_response_format(p: &mut Parsed, v: &Value) -> Result<Constraint, Rejection> {
    if !matches!(v, Value::Object(_)) {
        return Err(Rejection::invalid(
            "response_format",
            "'response_format' must be an object",
        ));
    }
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
fn tool_names(v: &Value) -> Vec<String> {
    let Value::Array(items) = v else {
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

/// OpenAI's rules (function and custom tools, at most
/// [`MAX_REMOTE_TOOLS`]); SIE's stricter ones (function tools, at most [`MAX_TOOLS`]) are
/// noted as the local fault.
fn check_tools(fault: &mut Option<Rejection>, v: &Value) -> Result<(), Rejection> {
    let items = match v {
        Value::Array(items) if !items.is_empty() && items.len() <= MAX_REMOTE_TOOLS => items,
        _ => {
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
        if let Some((k, _)) = members
            .iter()
            .find(|(k, _)| !TOOL_MEMBERS.contains(&k.as_ref()))
        {
            return Err(Rejection::unsupported(format!("tools[{i}].{k}")));
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
        check_members(fmembers, FUNCTION_MEMBERS, &|k| {
            format!("tools[{i}].function.{k}")
        })?;
    }
    Ok(())
}

/// OpenAI's custom tool: `{"type": "custom", "custom": {"name", "description"?, "format"?}}`.
fn check_custom_tool(i: usize, tool: &Value) -> Result<(), Rejection> {
    let Some(Value::Object(members)) = tool.get("custom") else {
        return Err(Rejection::invalid(
            format!("tools[{i}].custom"),
            "'custom' must be an object",
        ));
    };
    check_members(members, CUSTOM_MEMBERS, &|k| {
        format!("tools[{i}].custom.{k}")
    })
}

fn check_tool_choice(
    fault: &mut Option<Rejection>,
    v: &Value,
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
        Value::String(s) => match s.as_ref() {
            "auto" | "none" => false,
            "required" => true,
            _ => {
                return Err(Rejection::invalid(
                    "tool_choice",
                    "'tool_choice' must be auto, none, required or a function",
                ))
            }
        },
        obj @ Value::Object(_) => match obj.get("type").and_then(Value::as_str) {
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
        _ => {
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
