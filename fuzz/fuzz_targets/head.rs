//! Request heads: a HeadInfo or a Rejection, never a panic. What the screen passes, httparse
//! (the parser under hyper) reads as the same request line and the same number of fields,
//! and its framing is never ambiguous.
#![no_main]

use edgegw_core::head::{screen_request_head, MAX_HEADER_LINES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let max = 8 * 1024;
    let Ok(info) = screen_request_head(data, max) else {
        return;
    };
    assert!(data.len() <= max && data.ends_with(b"\r\n\r\n"));
    assert!(!(info.chunked && info.content_length.is_some()));
    assert!(info.http_version == b"1.0" || info.http_version == b"1.1");

    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADER_LINES];
    let mut req = httparse::Request::new(&mut headers);
    let status = req
        .parse(data)
        .expect("httparse parses what the screen passes");
    assert_eq!(status, httparse::Status::Complete(data.len()));
    assert_eq!(req.method.map(str::as_bytes), Some(info.method));
    assert_eq!(req.path.map(str::as_bytes), Some(info.target));
    assert_eq!(
        req.version,
        Some(if info.http_version == b"1.1" { 1 } else { 0 })
    );
    let lengths: Vec<_> = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .collect();
    assert_eq!(lengths.len(), usize::from(info.content_length.is_some()));
});
