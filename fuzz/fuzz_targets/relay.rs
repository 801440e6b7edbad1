//! The core's stream relay (rust/src/relay.rs) fed an upstream response with arbitrary cut
//! points (layout: edgegw_core_fuzz::cuts; bit 4 of the first byte withholds usage), then the
//! upstream's close: never a panic, always an end, and nothing depends on the cuts. A stream
//! that ends whole gives the client the same body (the same events, where withheld usage
//! rewrote a batch), counts, `[DONE]` and tapped events; a fault is the same fault. The client
//! bytes are always whole chunks, and the provider's key never leaves.
#![no_main]

use edgegw_core::http1::ResponseParser;
use edgegw_core::relay::{unchunk, Relay, Stop};
use edgegw_core::sse::{Event, SseSplitter};
use edgegw_core_fuzz::cuts;
use libfuzzer_sys::fuzz_target;

/// A small bound, so that the fuzzer reaches it.
const MAX_EVENT_BYTES: usize = 512;
const SECRET: &[u8] = b"sk-k3y";

#[derive(Debug, PartialEq)]
enum Outcome {
    Fault(Stop),
    Ended {
        body: Vec<u8>,
        events: Vec<Event>,
        counted: u64,
        done: bool,
        tapped: Vec<Vec<u8>>,
    },
}

fn run(pieces: &[&[u8]], hide_usage: bool) -> Outcome {
    let parser = ResponseParser::new(false);
    let mut r = Relay::new(parser, SECRET.to_vec(), hide_usage, MAX_EVENT_BYTES);
    let mut out = Vec::new();
    for piece in pieces.iter().filter(|p| !p.is_empty()) {
        if r.feed_raw(piece, &mut out).is_some() {
            break;
        }
    }
    let stop = r.feed_raw(b"", &mut out).cloned().expect("the close ends every stream");
    let body = unchunk(&out).expect("the client's bytes are whole chunks");
    assert!(
        !body.windows(SECRET.len()).any(|w| w == SECRET),
        "the key went out"
    );
    match stop {
        Stop::Ended => Outcome::Ended {
            events: SseSplitter::new(usize::MAX).feed(&body).unwrap(),
            body: if hide_usage { Vec::new() } else { body },
            counted: r.events,
            done: r.done,
            tapped: r.tapped,
        },
        fault => Outcome::Fault(fault),
    }
}

fuzz_target!(|data: &[u8]| {
    let hide_usage = data.first().is_some_and(|k| k & 0x10 != 0);
    let (pieces, stream) = cuts(data);
    let whole = run(&[stream], hide_usage);
    assert_eq!(run(&pieces, hide_usage), whole);
    let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(run(&bytewise, hide_usage), whole);
});
