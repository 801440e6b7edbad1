//! The upstream body writer: a validated request's member bytes, written for a target.

use super::messages::left_out;
use super::Parsed;
use crate::json;

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
    /// The [`OPTIONAL_MESSAGE_MEMBERS`](super::messages::OPTIONAL_MESSAGE_MEMBERS) the target takes, by name: the others, and every
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

#[cfg(test)]
mod tests {
    use super::super::tests::BASE;
    use super::super::*;

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
}
