//! Response heads (rust/src/respond.rs): a head or a HeadFault, never a panic. What it writes,
//! httparse (the parser under hyper) reads as one whole response with the app's headers and
//! the server's own, and its framing is never ambiguous.
//!
//! Input: two bytes of status, one of flags (bit 0 HTTP/1.1, 1 a HEAD request, 2 keep-alive),
//! then header lines split at `\n`, each name and value split at its first `:`.
#![no_main]

use edgegw_core::respond::{response_head, Context, Framing};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [s0, s1, flags, rest @ ..] = data else {
        return;
    };
    let status = 100 + u16::from_le_bytes([*s0, *s1]) % 500;
    let cx = Context {
        status,
        reason: b"Whatever",
        http11: flags & 1 != 0,
        head_request: flags & 2 != 0,
        keep_alive: flags & 4 != 0,
    };
    let headers: Vec<(&[u8], &[u8])> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(|b| *b == b'\n')
            .map(|line| match line.iter().position(|b| *b == b':') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &b""[..]),
            })
            .collect()
    };
    let Ok(head) = response_head(cx, headers.iter().copied()) else {
        return;
    };
    if headers.len() > 500 {
        return; // past what the httparse buffer below holds (the core has no count of its own)
    }
    let mut parsed = [httparse::EMPTY_HEADER; 512];
    let mut resp = httparse::Response::new(&mut parsed);
    let Ok(status_read) = resp.parse(&head.bytes) else {
        panic!("httparse refused {:?}", String::from_utf8_lossy(&head.bytes));
    };
    assert_eq!(status_read, httparse::Status::Complete(head.bytes.len()));
    assert_eq!(resp.code, Some(status));
    let sent = resp.headers.len();
    let added = usize::from(
        !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(b"date")),
    ) + usize::from(head.framing == Framing::Chunked)
        + usize::from(!head.keep_alive);
    assert_eq!(sent, headers.len() + added);
    let lengths = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length"))
        .count();
    match head.framing {
        Framing::Length => assert!(lengths > 0 && head.length.is_some()),
        Framing::Chunked => assert!(lengths == 0 && cx.http11),
        Framing::Close => assert!(lengths == 0 && !cx.http11 && !head.keep_alive),
        Framing::None => assert!(cx.head_request || status == 204 || status == 304),
    }
    assert!(!head.keep_alive || cx.keep_alive);
});
