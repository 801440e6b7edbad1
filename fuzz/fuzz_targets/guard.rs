//! Guardrails over any bytes: the detectors and the redaction never panic; a redacted JSON
//! document is still JSON; a policy evaluates any input document to a decision or a fault.
#![no_main]

use std::sync::OnceLock;

use edgegw_core::guard::{detect, redact_json, redact_text, Policy};
use libfuzzer_sys::fuzz_target;

const POLICY: &str = r#"
package guardrails

import rego.v1

main := {"action": "block", "message": "no"} if {
    contains(input.request.body, "forbidden")
} else := {"action": "redact"} if {
    some d in input.detected
    d in {"api_key", "credit_card"}
} else := {"action": "warn", "message": sprintf("%v", [input.request.model])} if {
    regex.match(`[0-9]{4}`, input.request.body)
}
"#;

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| Policy::compile(&[("p.rego".into(), POLICY.into())]).expect("compiles"))
}

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(out)) = redact_json(data) {
        serde_json::from_slice::<serde_json::Value>(&out).expect("redacted JSON is JSON");
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = detect(text);
    let _ = redact_text(text);
    let _ = policy().evaluate(text);
});
