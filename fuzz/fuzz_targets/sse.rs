//! SSE splitting with arbitrary cut points (layout: edgegw_core_fuzz::cuts): never a panic,
//! and nothing depends on the cuts: the events, a fault, the tail held back (`pending`),
//! what a relay sends (all but `pending`) and `finish()`. What a relay sent means the
//! same events again.
#![no_main]

use edgegw_core::error::UpstreamFault;
use edgegw_core::sse::{Event, SseSplitter};
use edgegw_core_fuzz::cuts;
use libfuzzer_sys::fuzz_target;

/// A small bound, so that the fuzzer reaches it.
const MAX_EVENT_BYTES: usize = 512;

#[derive(Debug, PartialEq)]
enum Outcome {
    Fault(UpstreamFault),
    Done {
        events: Vec<Event>,
        sent: Vec<u8>,
        pending: usize,
        truncated: bool,
    },
}

fn relay(pieces: &[&[u8]]) -> Outcome {
    let mut s = SseSplitter::new(MAX_EVENT_BYTES);
    let (mut events, mut held, mut sent) = (Vec::new(), Vec::new(), Vec::new());
    for piece in pieces {
        held.extend_from_slice(piece);
        match s.feed(piece) {
            Ok(ev) => events.extend(ev),
            Err(e) => return Outcome::Fault(e),
        }
        let pending = s.pending();
        assert!(pending <= held.len(), "pending past what is held");
        assert!(pending <= MAX_EVENT_BYTES, "pending past the bound");
        let keep = held.len() - pending;
        sent.extend(held.drain(..keep));
    }
    let replayed = SseSplitter::new(usize::MAX).feed(&sent).unwrap();
    assert_eq!(replayed, events, "what was sent is the same events");
    Outcome::Done {
        events,
        sent,
        pending: s.pending(),
        truncated: s.finish(),
    }
}

fuzz_target!(|data: &[u8]| {
    let (pieces, stream) = cuts(data);
    let whole = relay(&[stream]);
    assert_eq!(relay(&pieces), whole);
    let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(relay(&bytewise), whole);
});
