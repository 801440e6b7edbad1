//! Strict JSON (RFC 8259) into a borrowed tree.
//!
//! Stricter than most parsers on purpose, because what passes here is forwarded
//! upstream byte for byte and may be read again by peers that disagree on the
//! corner cases: invalid UTF-8, lone surrogate escapes, duplicate keys (at any depth),
//! a byte-order mark, NaN/Infinity and nesting deeper than [`MAX_DEPTH`] are all
//! rejected. Numbers keep their source text so that nothing is lost in a round trip.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::error::Rejection;

/// Deepest nesting of arrays and objects accepted (the top-level object is depth 1).
/// Deep enough for any real tool schema, shallow enough that recursion cannot
/// exhaust the stack of a worker thread.
pub const MAX_DEPTH: usize = 64;

/// Objects with more members than this check duplicates with a hash set instead of a scan.
const LINEAR_DUP_SCAN_MAX: usize = 16;

#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// The number's source text, already checked against the JSON grammar.
    Number(&'a str),
    String(Cow<'a, str>),
    Array(Vec<Value<'a>>),
    Object(Vec<(Cow<'a, str>, Value<'a>)>),
}

impl<'a> Value<'a> {
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(text) => text.parse::<f64>().ok(),
            _ => None,
        }
    }

    /// The value as an integer, when the source text is an integer literal
    /// (no fraction, no exponent) that fits in an i64.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(text) if is_integer_literal(text) => text.parse::<i64>().ok(),
            _ => None,
        }
    }

    /// True for an integer literal of any size (so range errors can be told apart from type errors).
    pub fn is_integer(&self) -> bool {
        matches!(self, Value::Number(text) if is_integer_literal(text))
    }
}

fn is_integer_literal(text: &str) -> bool {
    !text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
}

/// One member of the top-level object, with the byte span of its value in the source.
#[derive(Debug)]
pub struct Member<'a> {
    pub key: Cow<'a, str>,
    pub value: Value<'a>,
    pub start: usize,
    pub end: usize,
}

/// Parse a whole body that must be a JSON object; returns its members in source order.
pub fn parse_object_document(input: &[u8]) -> Result<Vec<Member<'_>>, Rejection> {
    let text = std::str::from_utf8(input)
        .map_err(|e| bad(format!("invalid UTF-8 at byte {}", e.valid_up_to())))?;
    let mut p = Parser {
        src: text,
        bytes: input,
        pos: 0,
    };
    p.skip_ws();
    match p.peek() {
        Some(b'{') => {}
        None => return Err(bad("empty body")),
        Some(0xEF) => return Err(bad("a byte-order mark is not allowed")),
        Some(_) => {
            // Distinguish "valid JSON that is not an object" from garbage.
            p.parse_value(1)?;
            p.skip_ws();
            if p.pos != p.bytes.len() {
                return Err(bad(format!("trailing characters at byte {}", p.pos)));
            }
            return Err(Rejection::NotAnObject);
        }
    }
    p.pos += 1;
    let mut members: Vec<Member<'_>> = Vec::new();
    p.skip_ws();
    if p.peek() == Some(b'}') {
        p.pos += 1;
    } else {
        loop {
            p.skip_ws();
            let key = p.parse_key()?;
            p.skip_ws();
            p.expect(b':')?;
            p.skip_ws();
            let start = p.pos;
            let value = p.parse_value(2)?;
            let end = p.pos;
            members.push(Member {
                key,
                value,
                start,
                end,
            });
            p.skip_ws();
            match p.peek() {
                Some(b',') => p.pos += 1,
                Some(b'}') => {
                    p.pos += 1;
                    break;
                }
                _ => return Err(p.unexpected()),
            }
        }
    }
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return Err(bad(format!("trailing characters at byte {}", p.pos)));
    }
    check_duplicates(members.iter().map(|m| &m.key))?;
    Ok(members)
}

/// Parse any JSON text (used by tests and by callers that need a whole value).
pub fn parse(input: &[u8]) -> Result<Value<'_>, Rejection> {
    let text = std::str::from_utf8(input)
        .map_err(|e| bad(format!("invalid UTF-8 at byte {}", e.valid_up_to())))?;
    let mut p = Parser {
        src: text,
        bytes: input,
        pos: 0,
    };
    p.skip_ws();
    let v = p.parse_value(1)?;
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return Err(bad(format!("trailing characters at byte {}", p.pos)));
    }
    Ok(v)
}

fn bad(msg: impl Into<String>) -> Rejection {
    Rejection::InvalidJson(msg.into())
}

fn check_duplicates<'k, 'a: 'k>(
    keys: impl ExactSizeIterator<Item = &'k Cow<'a, str>> + Clone,
) -> Result<(), Rejection> {
    let n = keys.len();
    if n < 2 {
        return Ok(());
    }
    if n <= LINEAR_DUP_SCAN_MAX {
        let all: Vec<&Cow<'a, str>> = keys.collect();
        for i in 1..all.len() {
            if all[..i].iter().any(|k| *k == all[i]) {
                return Err(bad("duplicate object key"));
            }
        }
    } else {
        let mut seen: HashSet<&str> = HashSet::with_capacity(n);
        for k in keys {
            if !seen.insert(k.as_ref()) {
                return Err(bad("duplicate object key"));
            }
        }
    }
    Ok(())
}

struct Parser<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    fn next(&mut self) -> Option<u8> {
        let b = self.peek();
        if b.is_some() {
            self.pos += 1;
        }
        b
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn unexpected(&self) -> Rejection {
        match self.peek() {
            None => bad("unexpected end of input"),
            Some(_) => bad(format!("unexpected character at byte {}", self.pos)),
        }
    }

    fn expect(&mut self, b: u8) -> Result<(), Rejection> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    fn parse_value(&mut self, depth: usize) -> Result<Value<'a>, Rejection> {
        match self.peek() {
            Some(b'{') => self.parse_object(depth),
            Some(b'[') => self.parse_array(depth),
            Some(b'"') => Ok(Value::String(self.parse_string()?)),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.parse_number(),
            _ => Err(self.unexpected()),
        }
    }

    fn literal(&mut self, word: &str, v: Value<'a>) -> Result<Value<'a>, Rejection> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self.unexpected())
        }
    }

    fn enter(&self, depth: usize) -> Result<(), Rejection> {
        if depth > MAX_DEPTH {
            Err(bad(format!("nesting deeper than {MAX_DEPTH}")))
        } else {
            Ok(())
        }
    }

    fn parse_object(&mut self, depth: usize) -> Result<Value<'a>, Rejection> {
        self.enter(depth)?;
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_ws();
            let key = self.parse_key()?;
            self.skip_ws();
            self.expect(b':')?;
            self.skip_ws();
            let v = self.parse_value(depth + 1)?;
            members.push((key, v));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.unexpected()),
            }
        }
        check_duplicates(members.iter().map(|(k, _)| k))?;
        Ok(Value::Object(members))
    }

    fn parse_array(&mut self, depth: usize) -> Result<Value<'a>, Rejection> {
        self.enter(depth)?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.parse_value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.unexpected()),
            }
        }
        Ok(Value::Array(items))
    }

    fn parse_key(&mut self) -> Result<Cow<'a, str>, Rejection> {
        if self.peek() != Some(b'"') {
            return Err(self.unexpected());
        }
        self.parse_string()
    }

    fn parse_string(&mut self) -> Result<Cow<'a, str>, Rejection> {
        self.pos += 1; // opening quote
        let start = self.pos;
        // Fast path: no escapes.
        loop {
            match self.peek() {
                None => return Err(bad("unterminated string")),
                Some(b'"') => {
                    let s = &self.src[start..self.pos];
                    self.pos += 1;
                    return Ok(Cow::Borrowed(s));
                }
                Some(b'\\') => break,
                Some(b) if b < 0x20 => return Err(bad("control character in string")),
                Some(_) => self.pos += 1,
            }
        }
        let mut out = String::with_capacity(self.pos - start + 16);
        out.push_str(&self.src[start..self.pos]);
        loop {
            let run_start = self.pos;
            loop {
                match self.peek() {
                    None => return Err(bad("unterminated string")),
                    Some(b'"' | b'\\') => break,
                    Some(b) if b < 0x20 => return Err(bad("control character in string")),
                    Some(_) => self.pos += 1,
                }
            }
            out.push_str(&self.src[run_start..self.pos]);
            match self.next() {
                Some(b'"') => return Ok(Cow::Owned(out)),
                Some(b'\\') => {}
                _ => unreachable!("loop above stops only at a quote or a backslash"),
            }
            match self.next() {
                Some(b'"') => out.push('"'),
                Some(b'\\') => out.push('\\'),
                Some(b'/') => out.push('/'),
                Some(b'b') => out.push('\u{8}'),
                Some(b'f') => out.push('\u{c}'),
                Some(b'n') => out.push('\n'),
                Some(b'r') => out.push('\r'),
                Some(b't') => out.push('\t'),
                Some(b'u') => {
                    let hi = self.hex4()?;
                    let c = if (0xD800..0xDC00).contains(&hi) {
                        if self.bytes[self.pos..].starts_with(b"\\u") {
                            self.pos += 2;
                            let lo = self.hex4()?;
                            if !(0xDC00..0xE000).contains(&lo) {
                                return Err(bad("lone surrogate in string escape"));
                            }
                            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                        } else {
                            return Err(bad("lone surrogate in string escape"));
                        }
                    } else if (0xDC00..0xE000).contains(&hi) {
                        return Err(bad("lone surrogate in string escape"));
                    } else {
                        hi
                    };
                    // Every value built above is a valid scalar value.
                    out.push(char::from_u32(c).ok_or_else(|| bad("invalid escape"))?);
                }
                _ => return Err(bad("invalid escape in string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, Rejection> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| bad("truncated \\u escape"))?;
        let mut v = 0u32;
        for &d in digits {
            let n = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(bad("invalid \\u escape")),
            };
            v = v * 16 + u32::from(n);
        }
        self.pos += 4;
        Ok(v)
    }

    fn parse_number(&mut self) -> Result<Value<'a>, Rejection> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(bad("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(bad("invalid number"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(bad("invalid number"));
            }
            self.digits();
        }
        Ok(Value::Number(&self.src[start..self.pos]))
    }

    #[inline]
    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }
}

/// Append the JSON text `src` (already validated) to `out`, compact, without the object
/// members for which `drop(path, key, value)` is true. `path` holds the keys of the members
/// enclosing the object (array items add none), so a rule can name a nested member.
/// Kept values keep their source bytes; only insignificant white space is lost.
pub fn write_without(
    out: &mut Vec<u8>,
    src: &[u8],
    drop: &dyn Fn(&[&str], &str, &Value<'_>) -> bool,
) -> Result<(), Rejection> {
    let text = std::str::from_utf8(src).map_err(|_| bad("invalid UTF-8"))?;
    let mut p = Parser {
        src: text,
        bytes: src,
        pos: 0,
    };
    let mut path = Vec::new();
    p.skip_ws();
    p.copy_without(out, &mut path, drop, 1)
}

impl<'a> Parser<'a> {
    fn copy_without(
        &mut self,
        out: &mut Vec<u8>,
        path: &mut Vec<Cow<'a, str>>,
        drop: &dyn Fn(&[&str], &str, &Value<'_>) -> bool,
        depth: usize,
    ) -> Result<(), Rejection> {
        self.enter(depth)?;
        let (open, close) = match self.peek() {
            Some(b'{') => (b'{', b'}'),
            Some(b'[') => (b'[', b']'),
            _ => {
                let start = self.pos;
                self.parse_value(depth)?;
                out.extend_from_slice(&self.bytes[start..self.pos]);
                return Ok(());
            }
        };
        self.pos += 1;
        out.push(open);
        let mut first = true;
        self.skip_ws();
        if self.peek() == Some(close) {
            self.pos += 1;
            out.push(close);
            return Ok(());
        }
        loop {
            self.skip_ws();
            if open == b'{' {
                let key_start = self.pos;
                let key = self.parse_key()?;
                let key_end = self.pos;
                self.skip_ws();
                self.expect(b':')?;
                self.skip_ws();
                let value_start = self.pos;
                let value = self.parse_value(depth + 1)?;
                let names: Vec<&str> = path.iter().map(AsRef::as_ref).collect();
                if !drop(&names, &key, &value) {
                    self.pos = value_start;
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    out.extend_from_slice(&self.bytes[key_start..key_end]);
                    out.push(b':');
                    path.push(key);
                    self.copy_without(out, path, drop, depth + 1)?;
                    path.pop();
                }
            } else {
                if !first {
                    out.push(b',');
                }
                first = false;
                self.copy_without(out, path, drop, depth + 1)?;
            }
            self.skip_ws();
            match self.next() {
                Some(b',') => {}
                Some(b) if b == close => break,
                _ => return Err(self.unexpected()),
            }
        }
        out.push(close);
        Ok(())
    }
}

/// Append `s` as a JSON string literal (quotes included) to `out`.
pub fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[run..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
        }
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Value<'_> {
        parse(s.as_bytes()).unwrap()
    }

    fn rejects(s: &[u8]) {
        assert!(
            parse(s).is_err(),
            "accepted {:?}",
            String::from_utf8_lossy(s)
        );
    }

    #[test]
    fn scalars_and_containers() {
        assert_eq!(ok("null"), Value::Null);
        assert_eq!(ok(" true "), Value::Bool(true));
        assert_eq!(ok("-0.5e+3"), Value::Number("-0.5e+3"));
        assert_eq!(ok(r#""a\nb""#), Value::String(Cow::Owned("a\nb".into())));
        assert_eq!(ok(r#""\ud83d\ude00""#).as_str(), Some("😀"));
        assert_eq!(
            ok("[1, [2]]"),
            Value::Array(vec![
                Value::Number("1"),
                Value::Array(vec![Value::Number("2")])
            ])
        );
        assert_eq!(
            ok(r#"{"a":{"b":[]}}"#).get("a").unwrap().get("b"),
            Some(&Value::Array(vec![]))
        );
    }

    #[test]
    fn strictness() {
        for bad in [
            &b"NaN"[..],
            b"Infinity",
            b"-Infinity",
            b"01",
            b"1.",
            b".5",
            b"1e",
            b"+1",
            b"[1,]",
            b"{\"a\":1,}",
            b"{\"a\" 1}",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"\"\\ud800\\u0041\"",
            b"\"\\x\"",
            b"\"a\nb\"",
            b"\xef\xbb\xbf{}",
            b"\"\xff\"",
            b"{\"a\":1,\"a\":2}",
            b"[{\"k\":1,\"k\":1}]",
            b"{} x",
            b"",
            b"tru",
        ] {
            rejects(bad);
        }
    }

    #[test]
    fn duplicate_detection_in_large_objects() {
        let mut s = String::from("{");
        for i in 0..40 {
            s.push_str(&format!("\"k{i}\":{i},"));
        }
        s.push_str("\"k7\":0}");
        rejects(s.as_bytes());
        let fine = s.replace("\"k7\":0}", "\"k99\":0}");
        parse(fine.as_bytes()).unwrap();
    }

    #[test]
    fn depth_limit() {
        let ok_depth = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        parse(ok_depth.as_bytes()).unwrap();
        let too_deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        rejects(too_deep.as_bytes());
        // Deep garbage must not recurse without bound either.
        rejects("[".repeat(100_000).as_bytes());
    }

    #[test]
    fn document_spans_and_non_objects() {
        let body = br#"{ "model" : "x/y", "n": [1, 2] }"#;
        let members = parse_object_document(body).unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(&body[members[1].start..members[1].end], b"[1, 2]");
        for not_obj in [&b"[]"[..], b"1", b"\"s\"", b"null", b"  "] {
            assert!(parse_object_document(not_obj).is_err());
        }
    }

    #[test]
    fn integers() {
        assert_eq!(ok("9223372036854775807").as_i64(), Some(i64::MAX));
        assert_eq!(ok("9223372036854775808").as_i64(), None);
        assert!(ok("9223372036854775808").is_integer());
        assert_eq!(ok("1.0").as_i64(), None);
        assert_eq!(ok("1e2").as_i64(), None);
    }

    #[test]
    fn without_members_keeps_the_rest_byte_for_byte() {
        let src = br#"[ {"role":"assistant","content":"a\u00e9","annotations":[],"n":1.50e3,
            "tool_calls":[{"index":0,"id":"c","function":{"name":"f","parsed_arguments":{"x":1}}}]},
            {"content":null,"refusal":null} ]"#;
        let drop = |path: &[&str], key: &str, v: &Value<'_>| {
            key == "annotations"
                || (v.is_null() && key != "content")
                || (path == ["tool_calls"] && key == "index")
                || (path == ["tool_calls", "function"] && key == "parsed_arguments")
        };
        let mut out = Vec::new();
        write_without(&mut out, src, &drop).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"[{"role":"assistant","content":"a\u00e9","n":1.50e3,"tool_calls":[{"id":"c","function":{"name":"f"}}]},{"content":null}]"#
        );
        // Dropping every member leaves an empty object, never a stray comma.
        let mut out = Vec::new();
        write_without(
            &mut out,
            br#"{"a":1,"b":2}"#,
            &|_: &[&str], _: &str, _: &Value<'_>| true,
        )
        .unwrap();
        assert_eq!(out, b"{}");
    }

    #[test]
    fn string_writer_escapes() {
        let mut out = Vec::new();
        write_string(&mut out, "a\"b\\c\n\u{1}é");
        assert_eq!(out, "\"a\\\"b\\\\c\\n\\u0001é\"".as_bytes());
        assert_eq!(
            ok(std::str::from_utf8(&out).unwrap()).as_str(),
            Some("a\"b\\c\n\u{1}é")
        );
    }
}
