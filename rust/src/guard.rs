//! Guardrails: Rego policies (evaluated by `regorus`, an OPA-compatible interpreter) and the
//! built-in detectors that find secrets and personal data in text.
//!
//! [`Policy`]: the modules of GUARDRAILS_POLICY_DIR compiled once, at start, for the one
//! query `data.guardrails.main`. [`Policy::evaluate`] takes the input document as JSON and
//! returns a [`Decision`]; it holds no state between calls (each evaluation starts a fresh
//! interpreter over the shared compiled policy), so one `Policy` serves every thread.
//!
//! The detectors ([`detect`], [`redact_text`], [`redact_json`]): API keys (`key = value`
//! assignments and the well-known key prefixes), bearer tokens, card numbers (13-19 digits,
//! spaces or dashes between them, kept only when the Luhn check passes) and e-mail addresses
//! (detected, never redacted). A redacted secret becomes `[REDACTED]`; a `key = value` or a
//! `Bearer x` keeps its name and loses only its value.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use regex::Regex;
use regorus::{compile_policy_with_entrypoint, CompiledPolicy, PolicyModule, Value};

/// The one query, as the reference names it.
pub const ENTRYPOINT: &str = "data.guardrails.main";
/// What a redacted secret becomes.
pub const REDACTED: &str = "[REDACTED]";

/// What a policy (or the external checker) asks the gateway to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Block,
    Redact,
    Warn,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Block => "block",
            Action::Redact => "redact",
            Action::Warn => "warn",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "allow" => Some(Action::Allow),
            "block" => Some(Action::Block),
            "redact" => Some(Action::Redact),
            "warn" => Some(Action::Warn),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub message: String,
}

impl Decision {
    fn allow() -> Self {
        Decision {
            action: Action::Allow,
            message: String::new(),
        }
    }
}

/// Why a policy could not be loaded or could not decide. Never the client's fault: the
/// gateway refuses its start (`Compile`) or applies GUARDRAILS_FAIL_MODE (the others).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyFault {
    /// A module that does not parse or compile; regorus's message names the file, the
    /// line and the column.
    Compile(String),
    /// The input document is not JSON (the gateway's fault).
    Input(String),
    /// The evaluation failed: a builtin's error, conflicting rule values.
    Eval(String),
    /// `main` is defined but is not `{"action": allow|block|redact|warn, "message"?}`.
    Decision(String),
}

impl PolicyFault {
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyFault::Compile(_) => "compile",
            PolicyFault::Input(_) => "input",
            PolicyFault::Eval(_) => "eval",
            PolicyFault::Decision(_) => "decision",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            PolicyFault::Compile(m)
            | PolicyFault::Input(m)
            | PolicyFault::Eval(m)
            | PolicyFault::Decision(m) => m,
        }
    }
}

impl fmt::Display for PolicyFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

/// The compiled policy set; `None` inside when there are no modules (everything is allowed,
/// as the reference does for an empty or missing directory).
#[derive(Debug, Clone)]
pub struct Policy {
    compiled: Option<CompiledPolicy>,
}

impl Policy {
    /// Compile `modules` (file name, source) for [`ENTRYPOINT`].
    pub fn compile(modules: &[(String, String)]) -> Result<Policy, PolicyFault> {
        if modules.is_empty() {
            return Ok(Policy { compiled: None });
        }
        let modules: Vec<PolicyModule> = modules
            .iter()
            .map(|(id, content)| PolicyModule {
                id: id.as_str().into(),
                content: content.as_str().into(),
            })
            .collect();
        compile_policy_with_entrypoint(Value::new_object(), &modules, ENTRYPOINT.into())
            .map(|c| Policy { compiled: Some(c) })
            .map_err(|e| PolicyFault::Compile(compile_message(&format!("{e:#}"))))
    }

    pub fn is_empty(&self) -> bool {
        self.compiled.is_none()
    }

    /// Evaluate `data.guardrails.main` for `input` (a JSON document). Undefined (no rule
    /// matched) allows, as in the reference; anything else must be a decision object.
    pub fn evaluate(&self, input: &str) -> Result<Decision, PolicyFault> {
        let Some(compiled) = &self.compiled else {
            return Ok(Decision::allow());
        };
        let input = Value::from_json_str(input).map_err(|e| PolicyFault::Input(e.to_string()))?;
        let value = compiled
            .eval_with_input(input)
            .map_err(|e| PolicyFault::Eval(format!("{e:#}")))?;
        decision(&value)
    }
}

/// regorus's multi-line report (`--> file:line:col`, the source line, `error: what`) as
/// one line, `file:line:col: what`; a fault with no location names the query.
fn compile_message(report: &str) -> String {
    let location = report
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("--> "));
    let what = report
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or(report)
        .trim();
    match location {
        Some(at) => format!("{}: {what}", at.trim()),
        None => format!("{ENTRYPOINT}: {what}"),
    }
}

/// A decision document (a policy's `main`, or the external checker's answer).
pub fn decision(value: &Value) -> Result<Decision, PolicyFault> {
    if *value == Value::Undefined {
        return Ok(Decision::allow());
    }
    let Ok(object) = value.as_object() else {
        return Err(PolicyFault::Decision("main is not an object".into()));
    };
    let action = match object.get(&Value::from("action")) {
        None => Action::Allow, // the reference: an empty action allows
        Some(Value::String(s)) => Action::parse(s).ok_or_else(|| {
            PolicyFault::Decision(format!(
                "action {:.40?} is not allow, block, redact or warn",
                &**s
            ))
        })?,
        Some(_) => return Err(PolicyFault::Decision("action is not a string".into())),
    };
    let message = match object.get(&Value::from("message")) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.to_string(),
        Some(_) => return Err(PolicyFault::Decision("message is not a string".into())),
    };
    Ok(Decision { action, message })
}

/// A built-in detector's name, as the input document's `detected` list spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detector {
    ApiKey,
    BearerToken,
    CreditCard,
    Email,
}

impl Detector {
    pub fn as_str(self) -> &'static str {
        match self {
            Detector::ApiKey => "api_key",
            Detector::BearerToken => "bearer_token",
            Detector::CreditCard => "credit_card",
            Detector::Email => "email",
        }
    }

    /// Whether `redact` replaces what this detector finds (e-mail is detect-only).
    pub fn redacts(self) -> bool {
        !matches!(self, Detector::Email)
    }
}

struct Pattern {
    detector: Detector,
    regex: Regex,
    /// The capture group that is the secret (0: the whole match).
    group: usize,
}

/// The patterns, in the order redaction applies them. Each literal is a fixed pattern
/// (tested below), so `Regex::new` cannot fail at run time.
fn patterns() -> &'static [Pattern] {
    static PATTERNS: OnceLock<Vec<Pattern>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let p = |detector, re: &str, group| Pattern {
            detector,
            regex: Regex::new(re).expect("a fixed detector pattern"),
            group,
        };
        vec![
            // Bearer first: `Authorization: Bearer x` is a token, not a `key: value`.
            p(
                Detector::BearerToken,
                r"(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{20,}=*)",
                1,
            ),
            // `api_key = "..."`, `token: ...`, `secret=...`: the value only.
            p(
                Detector::ApiKey,
                r#"(?i)\b(?:api[_-]?key|apikey|access[_-]?key|token|secret)\b["']?\s*[:=]\s*["']?([^\s"',;]{8,})"#,
                1,
            ),
            // Well-known key shapes: OpenAI/Anthropic `sk-`, AWS access key ids, GitHub
            // tokens, Slack tokens, Google API keys.
            p(
                Detector::ApiKey,
                r"\b(?:sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,}|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})",
                0,
            ),
            p(Detector::CreditCard, r"\b[0-9](?:[ -]?[0-9]){12,18}\b", 0),
            p(
                Detector::Email,
                r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b",
                0,
            ),
        ]
    })
}

/// The Luhn checksum over a string of ASCII digits (false for anything else).
pub fn luhn(digits: &str) -> bool {
    let mut sum = 0u32;
    for (i, b) in digits.bytes().rev().enumerate() {
        if !b.is_ascii_digit() {
            return false;
        }
        let mut d = u32::from(b - b'0');
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    !digits.is_empty() && sum.is_multiple_of(10)
}

/// Whether a match of `pattern` counts (a card number must pass Luhn).
fn counts(pattern: &Pattern, found: &str) -> bool {
    if pattern.detector != Detector::CreditCard {
        return true;
    }
    let digits: String = found.chars().filter(char::is_ascii_digit).collect();
    (13..=19).contains(&digits.len()) && luhn(&digits)
}

/// The detectors that find something in `text`, each once, in table order.
pub fn detect(text: &str) -> Vec<Detector> {
    let mut found: Vec<Detector> = Vec::new();
    for pattern in patterns() {
        if found.contains(&pattern.detector) {
            continue;
        }
        if pattern
            .regex
            .find_iter(text)
            .any(|m| counts(pattern, m.as_str()))
        {
            found.push(pattern.detector);
        }
    }
    found
}

/// `text` with every redactable secret replaced by [`REDACTED`] (borrowed when none).
pub fn redact_text(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    for pattern in patterns().iter().filter(|p| p.detector.redacts()) {
        let mut replaced = String::new();
        let mut last = 0;
        for caps in pattern.regex.captures_iter(&out) {
            let (Some(whole), Some(secret)) = (caps.get(0), caps.get(pattern.group)) else {
                continue;
            };
            if !counts(pattern, whole.as_str()) {
                continue;
            }
            replaced.push_str(&out[last..secret.start()]);
            replaced.push_str(REDACTED);
            last = secret.end();
        }
        if last > 0 {
            replaced.push_str(&out[last..]);
            out = Cow::Owned(replaced);
        }
    }
    out
}

/// A JSON document with `redact_text` applied to every string value (never to keys), so
/// the result is still the same document shape; `None` when nothing was redacted.
pub fn redact_json(body: &[u8]) -> Result<Option<Vec<u8>>, PolicyFault> {
    let mut doc: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| PolicyFault::Input(e.to_string()))?;
    if !redact_value(&mut doc) {
        return Ok(None);
    }
    serde_json::to_vec(&doc)
        .map(Some)
        .map_err(|e| PolicyFault::Input(e.to_string()))
}

fn redact_value(v: &mut serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => match redact_text(s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(r) => {
                *s = r;
                true
            }
        },
        // Every string is visited (no short circuit): all of them are redacted.
        serde_json::Value::Array(items) => {
            let mut any = false;
            for item in items {
                any |= redact_value(item);
            }
            any
        }
        serde_json::Value::Object(map) => {
            let mut any = false;
            for item in map.values_mut() {
                any |= redact_value(item);
            }
            any
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn_table() {
        for (digits, ok) in [
            ("4111111111111111", true),  // Visa test number
            ("4111111111111112", false), // one digit off
            ("5500005555555559", true),  // Mastercard test number
            ("378282246310005", true),   // Amex test number
            ("79927398713", true),       // the textbook example
            ("79927398710", false),
            ("0000000000000", true),
            ("", false),
            ("4111-1111", false), // not only digits
        ] {
            assert_eq!(luhn(digits), ok, "{digits}");
        }
    }

    #[test]
    fn cards_are_redacted_only_when_luhn_passes() {
        assert_eq!(
            redact_text("card 4111 1111 1111 1111 ok"),
            "card [REDACTED] ok"
        );
        assert_eq!(redact_text("card 4111-1111-1111-1111"), "card [REDACTED]");
        // An order number of card length that fails Luhn stays.
        assert_eq!(
            redact_text("order 4111111111111112"),
            "order 4111111111111112"
        );
        assert_eq!(detect("order 4111111111111112"), vec![]);
        assert_eq!(detect("pay 5500005555555559"), vec![Detector::CreditCard]);
    }

    #[test]
    fn keys_and_tokens_keep_their_names() {
        assert_eq!(
            redact_text("api_key=abcd1234efgh5678 rest"),
            "api_key=[REDACTED] rest"
        );
        assert_eq!(
            redact_text(r#"{"secret": "s3cr3t-value-123"}"#),
            r#"{"secret": "[REDACTED]"}"#
        );
        assert_eq!(
            redact_text("Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.abcdefghijkl"),
            "Authorization: Bearer [REDACTED]"
        );
        assert_eq!(
            redact_text("my key is sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX, thanks"),
            "my key is [REDACTED], thanks"
        );
        assert_eq!(
            redact_text("AKIAIOSFODNN7EXAMPLE"),
            "[REDACTED]",
            "AWS key id"
        );
        // Short values are not secrets; ordinary words are left alone.
        assert_eq!(redact_text("token: abc"), "token: abc");
        assert_eq!(
            redact_text("the secret of success"),
            "the secret of success"
        );
    }

    #[test]
    fn email_is_detected_never_redacted() {
        let text = "write to jane.doe@example.com";
        assert_eq!(detect(text), vec![Detector::Email]);
        assert!(matches!(redact_text(text), Cow::Borrowed(_)));
    }

    #[test]
    fn detect_names_each_detector_once() {
        let text = "Bearer abcdefghijklmnopqrstuvwxyz and api_key=zzzzzzzzzz and \
                    sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ and a@b.io c@d.io";
        assert_eq!(
            detect(text),
            vec![Detector::BearerToken, Detector::ApiKey, Detector::Email]
        );
    }

    #[test]
    fn redact_json_touches_string_values_only() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"key sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ end"}],"n":1}"#;
        let out = redact_json(body).unwrap().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["messages"][0]["content"], "key [REDACTED] end");
        assert_eq!(doc["model"], "m");
        assert_eq!(doc["n"], 1);
        // Key order is kept (serde_json's preserve_order).
        assert!(out.starts_with(br#"{"model""#));
        assert_eq!(redact_json(br#"{"a":"nothing here"}"#).unwrap(), None);
        // Every string is redacted, not only the first one found.
        let two = br#"["token=aaaaaaaaaa", {"k": "token=bbbbbbbbbb"}, "token=cccccccccc"]"#;
        let out = redact_json(two).unwrap().unwrap();
        assert_eq!(
            out,
            br#"["token=[REDACTED]",{"k":"token=[REDACTED]"},"token=[REDACTED]"]"#
        );
        assert_eq!(redact_json(b"not json").unwrap_err().kind(), "input");
    }

    fn policy(src: &str) -> Result<Policy, PolicyFault> {
        Policy::compile(&[("p.rego".to_string(), src.to_string())])
    }

    const POLICY: &str = r#"
package guardrails

default main := {"action": "allow"}

main := {"action": "block", "message": "no secrets"} if {
    contains(input.request.body, "forbidden")
}
"#;

    #[test]
    fn a_policy_decides() {
        let p = policy(POLICY).unwrap();
        let d = p
            .evaluate(r#"{"phase":"pre_call","request":{"body":"a forbidden word"}}"#)
            .unwrap();
        assert_eq!(d.action, Action::Block);
        assert_eq!(d.message, "no secrets");
        let d = p.evaluate(r#"{"request":{"body":"fine"}}"#).unwrap();
        assert_eq!(d.action, Action::Allow);
    }

    #[test]
    fn no_modules_allow_everything() {
        let p = Policy::compile(&[]).unwrap();
        assert!(p.is_empty());
        assert_eq!(p.evaluate("{}").unwrap().action, Action::Allow);
    }

    #[test]
    fn undefined_main_allows_and_bad_decisions_are_faults() {
        let p = policy("package guardrails\nmain := {\"action\": \"x\"} if input.a\n").unwrap();
        assert_eq!(p.evaluate("{}").unwrap().action, Action::Allow);
        assert_eq!(p.evaluate(r#"{"a":true}"#).unwrap_err().kind(), "decision");
        let p = policy("package guardrails\nmain := 3\n").unwrap();
        assert_eq!(p.evaluate("{}").unwrap_err().kind(), "decision");
    }

    #[test]
    fn a_bad_module_names_file_and_line() {
        let e = policy("package guardrails\n\nmain := {\"action\": \n").unwrap_err();
        assert_eq!(e.kind(), "compile");
        assert!(e.message().starts_with("p.rego:4:"), "{}", e.message());
        let e = policy("package other\nx := 1\n").unwrap_err();
        assert!(e.message().starts_with(ENTRYPOINT), "{}", e.message());
    }

    #[test]
    fn policy_is_shared_between_threads() {
        fn sync<T: Send + Sync>(_: &T) {}
        let p = policy(POLICY).unwrap();
        sync(&p);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let d = p.evaluate(r#"{"request":{"body":"forbidden"}}"#).unwrap();
                    assert_eq!(d.action, Action::Block);
                });
            }
        });
    }
}
