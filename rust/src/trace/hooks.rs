//! The hooks of the request path: what each span of a request is called and what it
//! carries (the server span, parsing, routing, upstream attempts and their connections,
//! authentication, MCP tool executions, the GenAI attributes of an answer, the end).

use super::{
    clip, clip_to, mixed_id, set_str, set_value, NoSuchSpan, Record, CLIENT, CLIENT_ATTRIBUTES,
    INTERNAL, MAX_CONTENT_CHARS, SERVER, SERVER_ATTRIBUTES,
};
use crate::otlp_trace::{Key, Value};

/// The GenAI semantic-convention attributes of a chat or completions request's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generation<'a> {
    pub operation: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub response_model: Option<&'a str>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub finish_reasons: &'a [String],
    pub ttft_s: Option<f64>,
    /// The answer's text by choice, as the client got it (recorded with `content` only).
    pub choices: &'a [Choice],
}

/// One choice of an answer, for its `gen_ai.choice` event: its index (None: not an int64),
/// its text (the caller keeps at most MAX_CONTENT_CHARS) and its finish reason.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Choice {
    pub index: Option<i64>,
    pub text: String,
    pub finish_reason: Option<String>,
}

/// A usage's token count: OpenAI's member (`prompt_tokens`), else Anthropic's
/// (`input_tokens`) when OpenAI's is absent or null. Each is None when absent or null, and
/// Some(None) when it holds anything but an int in int64 (a bool is no count).
pub fn token_count(openai: Option<Option<i64>>, anthropic: Option<Option<i64>>) -> Option<i64> {
    openai.or(anthropic).flatten()
}

impl Record {
    /// The request's server span from `now`, continuing the client's span `parent_id` (a
    /// remote parent) when there is one: `{method} {path}` with the request's method, path
    /// and id. Its index is 0.
    pub fn open_server(
        &mut self,
        method: &str,
        path: &str,
        request_id: &str,
        parent_id: Option<u64>,
        now: u64,
    ) -> usize {
        // Room for what the request adds: the GenAI attributes, the status, error.type.
        let mut attributes = Vec::with_capacity(SERVER_ATTRIBUTES);
        attributes.extend([
            ("http.request.method".into(), Value::Str(method.to_owned())),
            ("url.path".into(), Value::Str(path.to_owned())),
            (
                "edgegw.request_id".into(),
                Value::Str(request_id.to_owned()),
            ),
        ]);
        let id = mixed_id(self.seed, self.spans.len() as u64);
        let remote = parent_id.is_some();
        self.start(
            format!("{method} {path}").into(),
            id,
            parent_id,
            remote,
            SERVER,
            now,
            attributes,
        )
    }

    /// The `parse` span of the request body, from `start_ns` to `now`, failed with `error`
    /// when parsing raised it; else, with `content`, the body (the prompt) as the server
    /// span's `gen_ai.user.message` event. Whether spans are due for export.
    pub fn parsed(
        &mut self,
        start_ns: u64,
        now: u64,
        body: &[u8],
        error: Option<&str>,
    ) -> Result<bool, NoSuchSpan> {
        let i = self.child("parse".into(), 0, INTERNAL, start_ns, Vec::new())?;
        if let Some(code) = error {
            self.mark_failed(i, code)?;
        }
        let due = self.close(i, now)?;
        if error.is_none() && self.content {
            self.prompt(body, now)?;
        }
        Ok(due)
    }

    /// The prompt's event: `gen_ai.content`, the body's first MAX_CONTENT_CHARS characters
    /// (decoded only then).
    fn prompt(&mut self, body: &[u8], now: u64) -> Result<(), NoSuchSpan> {
        let text = String::from_utf8_lossy(body);
        let attrs = vec![(
            "gen_ai.content".into(),
            Value::Str(clip_to(&text, MAX_CONTENT_CHARS)),
        )];
        self.add_event(0, "gen_ai.user.message".into(), attrs, now)
    }

    /// The routing decision's `route` span, from `start_ns` to `now`: the model asked for
    /// (clipped) and, when one was chosen, the target (`alias`, `local` or the provider) and
    /// whether a local model's named profile chose it; failed with `error` when routing
    /// raised it. Whether spans are due for export.
    #[allow(clippy::too_many_arguments)]
    pub fn route(
        &mut self,
        start_ns: u64,
        now: u64,
        model: &str,
        target: Option<&str>,
        named: bool,
        error: Option<&str>,
    ) -> Result<bool, NoSuchSpan> {
        let mut attributes = Vec::with_capacity(3);
        attributes.push(("gen_ai.request.model".into(), Value::Str(clip(model))));
        if let Some(t) = target {
            attributes.push(("edgegw.route.target".into(), Value::Str(t.to_owned())));
            attributes.push(("edgegw.route.named_profile".into(), Value::Bool(named)));
        }
        let i = self.child("route".into(), 0, INTERNAL, start_ns, attributes)?;
        if let Some(code) = error {
            self.mark_failed(i, code)?;
        }
        self.close(i, now)
    }

    /// The `authenticate` span from `now`: checking the caller's client key or token.
    pub fn authenticate(&mut self, now: u64) -> Result<usize, NoSuchSpan> {
        self.child("authenticate".into(), 0, INTERNAL, now, Vec::new())
    }

    /// A routed request's `route.attempt` span from `now`: one deployment tried, its
    /// provider and model (clipped); its upstream attempts are its siblings.
    pub fn route_attempt(
        &mut self,
        provider: &str,
        model: &str,
        now: u64,
    ) -> Result<usize, NoSuchSpan> {
        let attributes = vec![
            (
                "gen_ai.provider.name".into(),
                Value::Str(provider.to_owned()),
            ),
            ("gen_ai.request.model".into(), Value::Str(clip(model))),
        ];
        self.child("route.attempt".into(), 0, INTERNAL, now, attributes)
    }

    /// An MCP tool execution's span from `now` (GenAI's `execute_tool {name}`): the tool's
    /// name and the call's id, both from the model's answer (clipped).
    pub fn tool(&mut self, name: &str, call_id: &str, now: u64) -> Result<usize, NoSuchSpan> {
        let name = clip(name);
        let span_name = format!("execute_tool {name}");
        let attributes = vec![
            (
                "gen_ai.operation.name".into(),
                Value::Str("execute_tool".into()),
            ),
            ("gen_ai.tool.name".into(), Value::Str(name)),
            ("gen_ai.tool.type".into(), Value::Str("mcp".into())),
            ("gen_ai.tool.call.id".into(), Value::Str(clip(call_id))),
        ];
        self.child(span_name.into(), 0, INTERNAL, now, attributes)
    }

    /// A local model with no worker to serve it fell back to its remote profile `to`: the
    /// server span's `edgegw.fallback` event at `now`, with the reason.
    pub fn fallback(&mut self, reason: &str, to: &str, now: u64) -> Result<(), NoSuchSpan> {
        let attributes = vec![
            (
                "edgegw.fallback.reason".into(),
                Value::Str(reason.to_owned()),
            ),
            ("to".into(), Value::Str(to.to_owned())),
        ];
        self.add_event(0, "edgegw.fallback".into(), attributes, now)
    }

    /// A CLIENT child of the server span from `now`, to `host`:`port` (a proxied request).
    pub fn client(
        &mut self,
        name: Key,
        host: &str,
        port: i64,
        now: u64,
    ) -> Result<usize, NoSuchSpan> {
        let mut attrs = Vec::with_capacity(CLIENT_ATTRIBUTES);
        attrs.extend([
            ("server.address".into(), Value::Str(host.to_owned())),
            ("server.port".into(), Value::Int(port)),
        ]);
        self.child(name, 0, CLIENT, now, attrs)
    }

    /// An upstream attempt from `now`, a CLIENT child of the server span: `{method} {path}`
    /// (the target's path; both latin-1), with its method, server address and port, and
    /// path.
    pub fn attempt(
        &mut self,
        method: &[u8],
        target: &[u8],
        host: &str,
        port: i64,
        now: u64,
    ) -> Result<usize, NoSuchSpan> {
        let method: String = method.iter().map(|&b| b as char).collect();
        let path_end = memchr::memchr(b'?', target).unwrap_or(target.len());
        let path: String = target[..path_end].iter().map(|&b| b as char).collect();
        let name = format!("{method} {path}");
        let mut attributes = Vec::with_capacity(CLIENT_ATTRIBUTES);
        attributes.extend([
            ("http.request.method".into(), Value::Str(method)),
            ("server.address".into(), Value::Str(host.to_owned())),
            ("server.port".into(), Value::Int(port)),
            ("url.path".into(), Value::Str(path)),
        ]);
        self.child(name.into(), 0, CLIENT, now, attributes)
    }

    /// Attempt `i`'s response head came at `now`: its status (5xx: failed, `error.type` the
    /// status) and whether it opened its connection (its time then includes the connect and
    /// TLS handshake). Whether spans are due for export.
    pub fn attempt_done(
        &mut self,
        i: usize,
        status: i64,
        new_connection: bool,
        now: u64,
    ) -> Result<bool, NoSuchSpan> {
        let attrs = &mut self.span_mut(i)?.attributes;
        set_value(
            attrs,
            "http.response.status_code".into(),
            Some(Value::Int(status)),
        );
        set_value(
            attrs,
            "edgegw.upstream.new_connection".into(),
            Some(Value::Bool(new_connection)),
        );
        if status >= 500 {
            self.mark_failed(i, &status.to_string())?;
        }
        self.close(i, now)
    }

    /// A connection opened for span `parent`, from `start_ns` to `now` (TCP connect and TLS
    /// handshake): a `connect` child, failed with `error` when it did. Whether spans are due
    /// for export.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        parent: usize,
        start_ns: u64,
        now: u64,
        host: &str,
        port: i64,
        error: Option<&str>,
    ) -> Result<bool, NoSuchSpan> {
        let attributes = vec![
            ("server.address".into(), Value::Str(host.to_owned())),
            ("server.port".into(), Value::Int(port)),
        ];
        let i = self.child("connect".into(), parent, INTERNAL, start_ns, attributes)?;
        if let Some(code) = error {
            self.mark_failed(i, code)?;
        }
        self.close(i, now)
    }

    /// The GenAI semantic-convention attributes of a chat or completions request, on the
    /// server span: operation, provider (and its older name `gen_ai.system`), request and
    /// response model (clipped), token usage, finish reasons, time to first token; with
    /// `content`, a `gen_ai.choice` event a choice at `now`.
    pub fn generation(&mut self, g: &Generation<'_>, now: u64) -> Result<(), NoSuchSpan> {
        let attrs = &mut self.span_mut(0)?.attributes;
        set_str(attrs, "gen_ai.operation.name", g.operation);
        set_str(attrs, "gen_ai.provider.name", g.provider);
        set_str(attrs, "gen_ai.system", g.provider);
        set_value(
            attrs,
            "gen_ai.request.model".into(),
            Some(Value::Str(clip(g.model))),
        );
        if let Some(m) = g.response_model.filter(|m| !m.is_empty()) {
            set_value(
                attrs,
                "gen_ai.response.model".into(),
                Some(Value::Str(clip(m))),
            );
        }
        if let Some(n) = g.input_tokens {
            set_value(
                attrs,
                "gen_ai.usage.input_tokens".into(),
                Some(Value::Int(n)),
            );
        }
        if let Some(n) = g.output_tokens {
            set_value(
                attrs,
                "gen_ai.usage.output_tokens".into(),
                Some(Value::Int(n)),
            );
        }
        if !g.finish_reasons.is_empty() {
            let reasons = g
                .finish_reasons
                .iter()
                .map(|r| Value::Str(clip(r)))
                .collect();
            set_value(
                attrs,
                "gen_ai.response.finish_reasons".into(),
                Some(Value::Array(reasons)),
            );
        }
        if let Some(t) = g.ttft_s {
            set_value(
                attrs,
                "gen_ai.server.time_to_first_token".into(),
                Some(Value::Double(t)),
            );
        }
        if self.content {
            for c in g.choices {
                let mut attrs = Vec::with_capacity(3);
                if let Some(i) = c.index {
                    attrs.push(("index".into(), Value::Int(i)));
                }
                attrs.push(("gen_ai.content".into(), Value::Str(c.text.clone())));
                if let Some(r) = &c.finish_reason {
                    attrs.push(("finish_reason".into(), Value::Str(r.clone())));
                }
                self.add_event(0, "gen_ai.choice".into(), attrs, now)?;
            }
        }
        Ok(())
    }

    /// Ends the server span at `now` with the answer's status (None: none was sent) and the
    /// error code that ended the request: failed on an error, no answer or a 5xx. Whether
    /// spans are due for export.
    pub fn finish(
        &mut self,
        status: Option<i64>,
        error: Option<&str>,
        now: u64,
    ) -> Result<bool, NoSuchSpan> {
        let span = self.span_mut(0)?;
        if let Some(s) = status {
            set_value(
                &mut span.attributes,
                "http.response.status_code".into(),
                Some(Value::Int(s)),
            );
        }
        if let Some(code) = error {
            set_str(&mut span.attributes, "error.type", code);
        }
        if error.is_some() || status.is_none_or(|s| s >= 500) {
            span.error = true;
        }
        self.close(0, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::tests::{attr, record, str_value, T0, TRACE_ID};
    use crate::trace::{parse_traceparent, MAX_EVENTS};
    use std::borrow::Cow;

    #[test]
    fn finish_fails_the_request_on_an_error_no_answer_or_a_5xx() {
        let cases: [(Option<i64>, Option<&str>, bool); 5] = [
            (Some(200), None, false),
            (Some(404), None, false),
            (Some(502), None, true),
            (None, None, true),
            (Some(200), Some("client_gone"), true),
        ];
        for (status, error, failed) in cases {
            let mut r = record();
            r.finish(status, error, T0 + 1).unwrap();
            let span = r.span(0).unwrap();
            assert_eq!(span.error, failed, "{status:?} {error:?}");
            assert_eq!(span.end_unix_nano, T0 + 1);
            let code = attr(span, "http.response.status_code");
            assert_eq!(code, status.map(Value::Int).as_ref());
            assert_eq!(attr(span, "error.type"), error.and_then(str_value).as_ref());
        }
    }

    #[test]
    fn an_attempt_names_its_span_upstreams_parent() {
        let mut r = record();
        let i = r
            .attempt(
                b"POST",
                b"/v1/chat/completions?x=1",
                "api.example",
                443,
                T0 + 1,
            )
            .unwrap();
        let span = r.span(i).unwrap().clone();
        assert_eq!(span.name, "POST /v1/chat/completions", "the path, no query");
        assert_eq!(
            (span.kind, span.parent_id),
            (CLIENT, Some(r.span(0).unwrap().span_id))
        );
        assert_eq!(
            attr(&span, "url.path"),
            str_value("/v1/chat/completions").as_ref()
        );
        assert_eq!(attr(&span, "server.port"), Some(&Value::Int(443)));
        let (value, state) = r.context(i).unwrap();
        assert_eq!(
            parse_traceparent(&value),
            Some((TRACE_ID, span.span_id, true))
        );
        assert_eq!(state, "vendor=1");
        // A connection it opened: a `connect` child, failed with the connect's error.
        assert_eq!(
            r.connect(
                i,
                T0 + 2,
                T0 + 3,
                "api.example",
                443,
                Some("upstream_unreachable")
            ),
            Ok(false)
        );
        let connect = r.span(i + 1).unwrap();
        assert_eq!(
            (connect.name.as_ref(), connect.parent_id),
            ("connect", Some(span.span_id))
        );
        assert_eq!(
            (connect.start_unix_nano, connect.end_unix_nano),
            (T0 + 2, T0 + 3)
        );
        assert!(connect.error);
        assert_eq!(
            attr(connect, "error.type"),
            str_value("upstream_unreachable").as_ref()
        );
        // Its answer: a 5xx fails it, with the status as its error type.
        r.attempt_done(i, 503, true, T0 + 4).unwrap();
        let span = r.span(i).unwrap();
        assert!(span.error);
        assert_eq!(attr(span, "error.type"), str_value("503").as_ref());
        assert_eq!(
            attr(span, "edgegw.upstream.new_connection"),
            Some(&Value::Bool(true))
        );
        assert_eq!(span.end_unix_nano, T0 + 4);
        // Latin-1 bytes are characters, not UTF-8.
        let j = r.attempt(b"GET", b"/caf\xe9", "h", 80, T0).unwrap();
        assert_eq!(r.span(j).unwrap().name, "GET /caf\u{e9}");
        let k = r.client("GET /v1/models".into(), "h", 80, T0).unwrap();
        assert_eq!(r.span(k).unwrap().kind, CLIENT);
    }

    #[test]
    fn the_route_span_says_what_was_decided() {
        let mut r = record();
        let long = "m".repeat(300);
        r.route(T0 + 1, T0 + 2, "openai/gpt-4o", Some("openai"), false, None)
            .unwrap();
        r.route(T0 + 3, T0 + 4, &long, None, false, Some("unknown_provider"))
            .unwrap();
        let ok = r.span(1).unwrap();
        assert_eq!(ok.name, "route");
        assert_eq!(
            (ok.start_unix_nano, ok.end_unix_nano, ok.error),
            (T0 + 1, T0 + 2, false)
        );
        let keys: Vec<&str> = ok.attributes.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(
            keys,
            [
                "gen_ai.request.model",
                "edgegw.route.target",
                "edgegw.route.named_profile"
            ]
        );
        let failed = r.span(2).unwrap();
        assert!(failed.error);
        assert_eq!(
            attr(failed, "gen_ai.request.model"),
            str_value(&long[..256]).as_ref()
        );
        assert_eq!(attr(failed, "edgegw.route.target"), None);
        assert_eq!(
            attr(failed, "error.type"),
            str_value("unknown_provider").as_ref()
        );
    }

    #[test]
    fn generation_writes_the_genai_attributes() {
        let mut r = record();
        let reasons = ["stop".to_string(), "x".repeat(300)];
        r.generation(
            &Generation {
                operation: "chat",
                provider: "openai",
                model: "openai/gpt-4o-mini",
                response_model: Some("gpt-4o-mini-2024-07-18"),
                input_tokens: Some(7),
                output_tokens: Some(3),
                finish_reasons: &reasons,
                ttft_s: Some(0.25),
                choices: &[],
            },
            T0,
        )
        .unwrap();
        let span = r.span(0).unwrap();
        let expected = [
            ("gen_ai.operation.name", str_value("chat")),
            ("gen_ai.provider.name", str_value("openai")),
            ("gen_ai.system", str_value("openai")),
            ("gen_ai.request.model", str_value("openai/gpt-4o-mini")),
            ("gen_ai.response.model", str_value("gpt-4o-mini-2024-07-18")),
            ("gen_ai.usage.input_tokens", Some(Value::Int(7))),
            ("gen_ai.usage.output_tokens", Some(Value::Int(3))),
            (
                "gen_ai.response.finish_reasons",
                Some(Value::Array(vec![
                    Value::Str("stop".into()),
                    Value::Str("x".repeat(256)),
                ])),
            ),
            (
                "gen_ai.server.time_to_first_token",
                Some(Value::Double(0.25)),
            ),
        ];
        for (key, value) in expected {
            assert_eq!(attr(span, key), value.as_ref(), "{key}");
        }
        // Nothing known: no response model (nor an empty one), usage or reasons.
        let mut r = record();
        r.generation(
            &Generation {
                operation: "text_completion",
                provider: "local",
                model: "qwen3-8b",
                response_model: Some(""),
                ..Generation::default()
            },
            T0,
        )
        .unwrap();
        let span = r.span(0).unwrap();
        for key in [
            "gen_ai.response.model",
            "gen_ai.usage.input_tokens",
            "gen_ai.response.finish_reasons",
            "gen_ai.server.time_to_first_token",
        ] {
            assert_eq!(attr(span, key), None, "{key}");
        }
    }

    #[test]
    fn the_request_paths_other_spans_name_what_they_did() {
        let mut r = record();
        let server_id = r.span(0).unwrap().span_id;
        let auth = r.authenticate(T0 + 1).unwrap();
        let attempt = r.route_attempt("groq", &"m".repeat(300), T0 + 2).unwrap();
        let tool = r.tool(&"t".repeat(300), "call_1", T0 + 3).unwrap();
        r.fallback("no_worker", "openai/gpt-4o", T0 + 4).unwrap();
        let auth = r.span(auth).unwrap();
        assert_eq!((auth.name.as_ref(), auth.kind), ("authenticate", INTERNAL));
        assert!(auth.attributes.is_empty());
        let attempt = r.span(attempt).unwrap();
        assert_eq!(attempt.name, "route.attempt");
        assert_eq!(
            attr(attempt, "gen_ai.provider.name"),
            str_value("groq").as_ref()
        );
        assert_eq!(
            attr(attempt, "gen_ai.request.model"),
            str_value(&"m".repeat(256)).as_ref()
        );
        let tool = r.span(tool).unwrap();
        assert_eq!(tool.name, format!("execute_tool {}", "t".repeat(256)));
        let attrs: Vec<(&str, &Value)> = tool
            .attributes
            .iter()
            .map(|(k, v)| (k.as_ref(), v))
            .collect();
        assert_eq!(
            attrs,
            [
                ("gen_ai.operation.name", &Value::Str("execute_tool".into())),
                ("gen_ai.tool.name", &Value::Str("t".repeat(256))),
                ("gen_ai.tool.type", &Value::Str("mcp".into())),
                ("gen_ai.tool.call.id", &Value::Str("call_1".into())),
            ]
        );
        for span in [auth, attempt, tool] {
            assert_eq!(span.parent_id, Some(server_id));
        }
        let event = &r.span(0).unwrap().events[0];
        assert_eq!(
            (event.name.as_ref(), event.time_unix_nano),
            ("edgegw.fallback", T0 + 4)
        );
        assert_eq!(
            event.attributes,
            vec![
                (
                    "edgegw.fallback.reason".into(),
                    Value::Str("no_worker".into())
                ),
                ("to".into(), Value::Str("openai/gpt-4o".into())),
            ]
        );
        // Every name the hooks write is static: recording them allocates nothing.
        let names = r.spans.iter().map(|s| &s.name).chain(
            r.spans
                .iter()
                .flat_map(|s| s.attributes.iter().map(|(k, _)| k)),
        );
        for name in names {
            let dynamic = name.starts_with("POST ") || name.starts_with("execute_tool ");
            assert_eq!(matches!(name, Cow::Borrowed(_)), !dynamic, "{name}");
        }
    }

    #[test]
    fn a_token_count_is_openais_member_else_anthropics() {
        let cases = [
            (Some(Some(7)), Some(Some(9)), Some(7)),
            (None, Some(Some(9)), Some(9)),
            (None, None, None),
            // Present but no count (a str, a bool, past int64): not the other's either.
            (Some(None), Some(Some(9)), None),
            (None, Some(None), None),
        ];
        for (openai, anthropic, expected) in cases {
            assert_eq!(
                token_count(openai, anthropic),
                expected,
                "{openai:?} {anthropic:?}"
            );
        }
    }

    #[test]
    fn the_parse_span_says_whether_the_body_parsed() {
        let mut r = record();
        assert_eq!(r.parsed(T0 + 1, T0 + 2, b"{}", None), Ok(false));
        assert_eq!(
            r.parsed(T0 + 3, T0 + 4, b"{", Some("invalid_request")),
            Ok(false)
        );
        let (ok, bad) = (r.span(1).unwrap(), r.span(2).unwrap());
        assert_eq!(
            (ok.name.as_ref(), ok.kind, ok.error),
            ("parse", INTERNAL, false)
        );
        assert_eq!((ok.start_unix_nano, ok.end_unix_nano), (T0 + 1, T0 + 2));
        assert!(ok.attributes.is_empty());
        assert_eq!(
            (bad.start_unix_nano, bad.end_unix_nano, bad.error),
            (T0 + 3, T0 + 4, true)
        );
        assert_eq!(
            attr(bad, "error.type"),
            str_value("invalid_request").as_ref()
        );
        // The prompt of the body that parsed only.
        let events = &r.span(0).unwrap().events;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].attributes[0].1, Value::Str("{}".into()));
    }

    /// A finished chat request's record, its prompt "secret prompt" and its answer's two
    /// choices given to it, recording content or not.
    fn with_content(content: bool) -> Record {
        let mut r = Record::new(TRACE_ID, String::new(), 7, content);
        r.open_server("POST", "/v1/chat/completions", "req", None, T0);
        r.parsed(T0, T0 + 1, b"secret prompt", None).unwrap();
        let choices = [
            Choice {
                index: Some(0),
                text: "secret answer".into(),
                finish_reason: Some("stop".into()),
            },
            Choice {
                index: None,
                text: String::new(),
                finish_reason: None,
            },
        ];
        let g = Generation {
            operation: "chat",
            provider: "openai",
            model: "gpt-4o",
            choices: &choices,
            ..Generation::default()
        };
        r.generation(&g, T0 + 2).unwrap();
        r.finish(Some(200), None, T0 + 3).unwrap();
        r
    }

    #[test]
    fn content_is_recorded_only_when_on() {
        let r = with_content(true);
        let events = &r.span(0).unwrap().events;
        let names: Vec<&str> = events.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(
            names,
            ["gen_ai.user.message", "gen_ai.choice", "gen_ai.choice"]
        );
        assert_eq!(
            events[1].attributes,
            vec![
                ("index".into(), Value::Int(0)),
                ("gen_ai.content".into(), Value::Str("secret answer".into())),
                ("finish_reason".into(), Value::Str("stop".into())),
            ]
        );
        assert_eq!(events[1].time_unix_nano, T0 + 2);
        // An index that is no int64 and no finish reason: those attributes left out.
        assert_eq!(
            events[2].attributes,
            vec![("gen_ai.content".into(), Value::Str(String::new()))]
        );
        // Off: not a byte of either, in any span.
        let mut off = with_content(false);
        assert!(off.span(0).unwrap().events.is_empty());
        let (entries, n) = off.entries();
        assert_eq!(n, 2);
        assert!(memchr::memmem::find(&entries, b"secret").is_none());
    }

    #[test]
    fn events_are_bounded_and_a_prompt_is_clipped() {
        let mut r = record();
        r.parsed(
            T0,
            T0 + 1,
            "é".repeat(MAX_CONTENT_CHARS + 10).as_bytes(),
            None,
        )
        .unwrap();
        let event = &r.span(0).unwrap().events[0];
        assert_eq!(event.name, "gen_ai.user.message");
        assert_eq!(event.time_unix_nano, T0 + 1);
        assert_eq!(
            event.attributes,
            vec![(
                "gen_ai.content".into(),
                Value::Str("é".repeat(MAX_CONTENT_CHARS))
            )]
        );
        // Bytes that are not UTF-8 are replaced, not refused.
        r.parsed(T0, T0, b"a\xffb", None).unwrap();
        assert_eq!(
            r.span(0).unwrap().events[1].attributes[0].1,
            Value::Str("a\u{fffd}b".into())
        );
        for k in 0..2 * MAX_EVENTS {
            r.add_event(0, "e".into(), Vec::new(), T0 + k as u64)
                .unwrap();
        }
        assert_eq!(r.span(0).unwrap().events.len(), MAX_EVENTS);
        assert_eq!(
            r.event(0, "more".into(), Vec::new(), T0, MAX_EVENTS + 1),
            Ok(true)
        );
        assert_eq!(
            r.event(0, "more".into(), Vec::new(), T0, MAX_EVENTS + 1),
            Ok(false)
        );
    }
}
