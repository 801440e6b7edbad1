//! Rules of a message's content parts, by type.

use super::note;
use crate::error::Rejection;
use crate::json::Value;

/// How a content part of one type is checked.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// `text`: a string.
    Text,
    /// `image_url`: an object with a `url` (and a `detail`), or the URL alone when `bare_url`.
    Image { bare_url: bool },
    /// OpenAI's parts outside the SIE contract (a local fault): the member named as the type,
    /// a string when `string`, else an object.
    Remote { string: bool },
}

/// The content part types, by `type`.
#[rustfmt::skip]
const PART_TYPES: &[(&str, Part)] = &[
    ("text",        Part::Text),
    ("input_text",  Part::Text),
    ("image_url",   Part::Image { bare_url: false }),
    ("input_image", Part::Image { bare_url: true }),
    // OpenAI's audio, file and (assistant) refusal parts: remote only.
    ("input_audio", Part::Remote { string: false }),
    ("file",        Part::Remote { string: false }),
    ("refusal",     Part::Remote { string: true }),
];

const IMAGE_DETAILS: &[&str] = &["auto", "low", "high"];

/// Returns whether the part is an image.
pub(super) fn check_part(
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
    let Some(&(_, rule)) = PART_TYPES.iter().find(|&&(k, _)| k == kind) else {
        return Err(Rejection::unsupported_msg(
            path(".type"),
            "unsupported content part type",
        ));
    };
    match rule {
        Part::Text => {
            if part.get("text").and_then(Value::as_str).is_none() {
                return Err(Rejection::invalid(path(".text"), "'text' must be a string"));
            }
            Ok(false)
        }
        Part::Image { bare_url } => {
            match part.get("image_url") {
                Some(Value::String(_)) if bare_url => {}
                Some(obj @ Value::Object(_)) => {
                    if obj.get("url").and_then(Value::as_str).is_none() {
                        return Err(Rejection::invalid(
                            path(".image_url.url"),
                            "'url' must be a string",
                        ));
                    }
                    match obj.get("detail") {
                        None | Some(Value::Null) => {}
                        Some(d) if d.as_str().is_some_and(|d| IMAGE_DETAILS.contains(&d)) => {}
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
        Part::Remote { string } => {
            let ok = match part.get(kind) {
                Some(Value::String(_)) => string,
                Some(Value::Object(_)) => !string,
                _ => false,
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
    }
}
