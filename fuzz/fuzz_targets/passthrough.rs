//! Passthrough bodies: parse or reject, never panic; `with_model` keeps the body valid and
//! changes only the model.
#![no_main]

use edgegw_core::passthrough::parse_passthrough;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = parse_passthrough(data) else {
        return;
    };
    let out = p.with_model(data, "up/\"m\"");
    let again = parse_passthrough(&out).expect("with_model keeps the body valid");
    assert_eq!(again.stream, p.stream);
    match p.model {
        None => assert_eq!(out, data),
        Some(_) => assert_eq!(again.model.as_deref(), Some("up/\"m\"")),
    }
});
