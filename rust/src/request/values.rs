//! Generic value rules: the shapes a table row can ask of a field's value. A shape knows
//! the field only by the name it puts in `param` and in the message.

use std::borrow::Cow;

use crate::error::Rejection;
use crate::json::Value;

/// A value shape, checked the same way whichever field's row names it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shape {
    /// An integer in [min, max].
    Int {
        min: i64,
        max: i64,
    },
    /// An integer literal that fits in a signed 64-bit integer.
    I64,
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
    /// A string or an array of strings.
    StrOrStrs,
    /// A string hint: any value passes, and one of another type is not forwarded
    /// ([`super::fields::Rule::forwards`], reference behaviour).
    Hint,
    /// One of the listed strings.
    Enum(&'static [&'static str]),
    /// An array of strings, each one of the listed values.
    EnumArray(&'static [&'static str]),
}

/// Check a present, non-null value of the field `name` against `shape`.
pub(super) fn check(shape: Shape, name: &str, v: &Value) -> Result<(), Rejection> {
    match shape {
        Shape::Int { min, max } => {
            int_in(name, v, min, max)?;
        }
        Shape::I64 => {
            if !v.is_integer() {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be an integer"),
                ));
            }
            if v.as_i64().is_none() {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must fit in a signed 64-bit integer"),
                ));
            }
        }
        Shape::Float {
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
        Shape::Bool => {
            bool_of(name, v)?;
        }
        Shape::Str => {
            if v.as_str().is_none() {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be a string"),
                ));
            }
        }
        Shape::NonEmptyStr => {
            if v.as_str().is_none_or(str::is_empty) {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be a non-empty string"),
                ));
            }
        }
        Shape::Object => {
            if !matches!(v, Value::Object(_)) {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be an object"),
                ));
            }
        }
        Shape::StrOrStrs => match v {
            Value::String(_) => {}
            Value::Array(items) if items.iter().all(|i| i.as_str().is_some()) => {}
            _ => {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be a string or an array of strings"),
                ))
            }
        },
        Shape::Hint => {}
        Shape::Enum(allowed) => {
            if !v.as_str().is_some_and(|s| allowed.contains(&s)) {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be one of {}", allowed.join(", ")),
                ));
            }
        }
        Shape::EnumArray(allowed) => {
            let ok = matches!(v, Value::Array(items)
                if items.iter().all(|i| i.as_str().is_some_and(|s| allowed.contains(&s))));
            if !ok {
                return Err(Rejection::invalid(
                    name,
                    format!("'{name}' must be an array of {}", allowed.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn bool_of(name: &str, v: &Value) -> Result<bool, Rejection> {
    match v {
        Value::Bool(b) => Ok(*b),
        _ => Err(Rejection::invalid(
            name,
            format!("'{name}' must be a boolean"),
        )),
    }
}

pub(super) fn int_in(name: &str, v: &Value, min: i64, max: i64) -> Result<i64, Rejection> {
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

pub(super) fn is_empty_object(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty())
}

/// The shape of a member of a nested object ([`check_members`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Slot {
    NonEmptyStr,
    StrOrNull,
    ObjectOrNull,
    BoolOrNull,
}

/// One row of a member table: the key, its shape, whether the object must have it.
pub(super) type MemberRow = (&'static str, Slot, bool);

/// Check an object's `members` against `table`, in source order: a key the table lacks is
/// unsupported, a value of another shape is refused; then a required key that is missing.
/// `path(key)` is a member's `param`.
pub(super) fn check_members(
    members: &[(Cow<'_, str>, Value<'_>)],
    table: &[MemberRow],
    path: &dyn Fn(&str) -> String,
) -> Result<(), Rejection> {
    for (k, v) in members {
        let Some(&(_, slot, _)) = table.iter().find(|&&(key, _, _)| k == key) else {
            return Err(Rejection::unsupported(path(k)));
        };
        let ok = match slot {
            Slot::NonEmptyStr => v.as_str().is_some_and(|s| !s.is_empty()),
            Slot::StrOrNull => matches!(v, Value::String(_) | Value::Null),
            Slot::ObjectOrNull => matches!(v, Value::Object(_) | Value::Null),
            Slot::BoolOrNull => matches!(v, Value::Bool(_) | Value::Null),
        };
        if !ok {
            return Err(Rejection::invalid(path(k), format!("bad value for '{k}'")));
        }
    }
    for &(key, _, required) in table {
        if required && !members.iter().any(|(k, _)| k == key) {
            return Err(Rejection::invalid(
                path(key),
                format!("'{key}' is required"),
            ));
        }
    }
    Ok(())
}
