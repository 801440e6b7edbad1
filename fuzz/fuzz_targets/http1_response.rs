//! Upstream HTTP/1.1 responses with arbitrary cut points (layout: edgegw_core_fuzz::cuts),
//! for a GET and a HEAD: a fault or progress, never a panic, and nothing depends on the
//! cuts: the final head, the body bytes, the end, `reusable`, a fault, and what the peer's
//! close then gives. The same bytes as a request's body after its head (chunked, and
//! Content-Length): the body, the end, a fault and what follows the body (the next
//! pipelined request) do not depend on the cuts either.
#![no_main]

use edgegw_core::http1::{Head, ResponseParser};
use edgegw_core_fuzz::cuts;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, PartialEq)]
enum Outcome {
    Fault,
    Fed {
        head: Option<Head>,
        body: Vec<u8>,
        done: bool,
        reusable: bool,
        /// After feed_eof: Some((body, done)), or None for a fault.
        eof: Option<(Vec<u8>, bool)>,
    },
}

fn run(pieces: &[&[u8]], head_request: bool) -> Outcome {
    let mut p = ResponseParser::new(head_request);
    let (mut head, mut body, mut done) = (None, Vec::new(), false);
    for piece in pieces {
        let Ok(progress) = p.feed(piece) else {
            return Outcome::Fault;
        };
        if let Some(h) = progress.head {
            assert!(head.is_none(), "one final head per response");
            head = Some(h);
        }
        assert!(!(done && !progress.body.is_empty()), "body after the end");
        body.extend(progress.body);
        done |= progress.done;
        assert_eq!(done, p.is_done());
    }
    let reusable = p.reusable();
    let eof = p.feed_eof().ok().map(|progress| {
        assert!(progress.head.is_none() || head.is_none());
        (progress.body, progress.done)
    });
    Outcome::Fed {
        head,
        body,
        done,
        reusable,
        eof,
    }
}

/// A request body: (body, done, what followed it), or None for a fault.
fn request_body(pieces: &[&[u8]], length: Option<u64>, chunked: bool) -> Option<(Vec<u8>, bool, Vec<u8>)> {
    let mut p = ResponseParser::request_body(length, chunked);
    let mut body = Vec::new();
    for piece in pieces {
        let progress = p.feed(piece).ok()?;
        assert!(progress.head.is_none(), "a request body has no head");
        body.extend(progress.body);
    }
    Some((body, p.is_done(), p.take_trailing()))
}

fuzz_target!(|data: &[u8]| {
    let (pieces, stream) = cuts(data);
    for head_request in [false, true] {
        assert_eq!(run(&pieces, head_request), run(&[stream], head_request));
    }
    let half = Some(stream.len() as u64 / 2);
    for (length, chunked) in [(None, true), (half, false)] {
        assert_eq!(
            request_body(&pieces, length, chunked),
            request_body(&[stream], length, chunked)
        );
    }
});
