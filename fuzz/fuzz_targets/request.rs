//! Chat and completions bodies: parse or reject, never panic. An accepted body, written
//! for an upstream (with omit and rename), parses again to the same fields.
#![no_main]

use edgegw_core::error::Rejection;
use edgegw_core::json;
use edgegw_core::request::{parse_chat, parse_completions, Parsed};
use libfuzzer_sys::fuzz_target;

fn check(data: &[u8], parse: fn(&[u8]) -> Result<Parsed, Rejection>) {
    let Ok(p) = parse(data) else { return };
    for f in p.remote_unsupported.iter().chain(&p.local_unsupported) {
        assert!(p.fields.contains(f));
    }
    let plain = p.upstream_body(data, "m", &[], &[]);
    let again = parse(&plain).expect("an accepted body, written upstream, is accepted");
    assert_eq!(again.fields, p.fields);
    assert_eq!(again.stream, p.stream);
    assert_eq!(again.upstream_body(&plain, "m", &[], &[]), plain);
    let quirky = p.upstream_body(
        data,
        "provider/\"model\"\u{1F600}",
        &["user", "seed"],
        &[
            ("max_tokens", "max_completion_tokens"),
            ("top_p", "temperature"),
        ],
    );
    assert!(json::parse_object_document(&quirky).is_ok());
}

fuzz_target!(|data: &[u8]| {
    check(data, parse_chat);
    check(data, parse_completions);
});
