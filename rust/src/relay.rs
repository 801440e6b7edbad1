//! The relay of one upstream SSE stream to the client, sans I/O: the upstream's raw bytes
//! in (its HTTP/1.1 framing read by [`ResponseParser`]), the client's chunked body out.
//!
//! It does what `edgegw.pump.pump` feeding a `RelaySink` does, in the same order, so that
//! either relays a stream the same way (tests/test_core_relay.py runs both on the same
//! streams): whole events only (an event cut by a read waits for its end), counted, the few
//! a usage tap reads kept (`tapped`), usage the gateway asked for and the client did not
//! withheld (the batch written again by [`without_usage`]), the provider's key scrubbed, one
//! chunk per batch. The stream's end is [`Stop`]: over whole (the caller writes the
//! terminator) or a fault, whose error event the caller writes; nothing here writes either,
//! so the connection layer's own framing ends every stream alike.
//!
//! How the upstream's bytes are cut into reads never changes the client's body (the fuzz
//! target `relay` checks it).

use std::borrow::Cow;

use memchr::memmem;

use crate::http1::ResponseParser;
use crate::sse::{has_usage, needs_tap, Event, SseSplitter};

/// What a key quoted by the upstream is replaced with (edgegw.bodies.REDACTED).
pub const REDACTED: &[u8] = b"[redacted]";

/// How a relayed stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The upstream's stream ended whole: the client's body ends with its terminator.
    Ended,
    /// The stream ends with an error event: (`code`, `message`).
    Fault(&'static str, String),
}

#[derive(Debug)]
pub struct Relay {
    parser: ResponseParser,
    splitter: SseSplitter,
    /// Bytes of an event not yet whole.
    held: Vec<u8>,
    /// The provider's key's searcher, built once (None: no key to scrub).
    secret: Option<memmem::Finder<'static>>,
    hide_usage: bool,
    /// Events relayed (withheld ones included, as the Python relay counts them).
    pub events: u64,
    /// `[DONE]` came.
    pub done: bool,
    /// The data of the events the usage tap reads, in order.
    pub tapped: Vec<Vec<u8>>,
    stop: Option<Stop>,
}

impl Relay {
    pub fn new(
        parser: ResponseParser,
        secret: Vec<u8>,
        hide_usage: bool,
        max_event_bytes: usize,
    ) -> Self {
        Relay {
            parser,
            splitter: SseSplitter::new(max_event_bytes),
            held: Vec::new(),
            secret: (!secret.is_empty()).then(|| memmem::Finder::new(&secret).into_owned()),
            hide_usage,
            events: 0,
            done: false,
            tapped: Vec::new(),
            stop: None,
        }
    }

    /// The upstream's response framing, for the caller to pool the connection or not.
    pub fn parser(&self) -> &ResponseParser {
        &self.parser
    }

    /// Gives the framing back (the relay is over), leaving a fresh one.
    pub fn take_parser(&mut self) -> ResponseParser {
        std::mem::replace(&mut self.parser, ResponseParser::new(false))
    }

    pub fn stop(&self) -> Option<&Stop> {
        self.stop.as_ref()
    }

    /// One read of the upstream's raw bytes (empty: it closed the connection); the client's
    /// bytes go to the end of `out`. Some once the stream is over.
    pub fn feed_raw(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Option<&Stop> {
        if self.stop.is_none() {
            let progress = if raw.is_empty() {
                self.parser.feed_eof()
            } else {
                self.parser.feed(raw)
            };
            match progress {
                Ok(p) => self.feed_body(&p.body, p.done, out),
                Err(fault) => self.stop = Some(Stop::Fault(fault.code(), fault.message())),
            }
        }
        self.stop.as_ref()
    }

    /// Body bytes, their framing already read (what came with the head); `complete`: the
    /// upstream's body ends with them.
    pub fn feed_body(&mut self, body: &[u8], complete: bool, out: &mut Vec<u8>) {
        if self.stop.is_some() {
            return;
        }
        if !body.is_empty() {
            let events = match self.splitter.feed(body) {
                Ok(events) => events,
                Err(fault) => {
                    self.stop = Some(Stop::Fault(fault.code(), fault.message()));
                    return;
                }
            };
            let pending = self.splitter.pending();
            let data: Cow<'_, [u8]> = if self.held.is_empty() && pending == 0 {
                Cow::Borrowed(body)
            } else {
                self.held.extend_from_slice(body);
                // The rest copied out (a memcpy), not the cut drained byte by byte.
                let rest = self.held.split_off(self.held.len() - pending);
                Cow::Owned(std::mem::replace(&mut self.held, rest))
            };
            self.emit(events, &data, out);
            if self.done && self.held.is_empty() && complete {
                self.stop = Some(Stop::Ended);
                return;
            }
        }
        if complete {
            self.stop = Some(if self.splitter.finish() && !self.done {
                Stop::Fault(
                    "upstream_stream_truncated",
                    "the upstream stream ended mid-event".to_string(),
                )
            } else {
                Stop::Ended
            });
        }
    }

    /// One batch of whole events (`data`, their bytes) to the client.
    fn emit(&mut self, events: Vec<Event>, data: &[u8], out: &mut Vec<u8>) {
        self.events += events.len() as u64;
        let withheld = self.hide_usage && events.iter().any(|e| !e.is_done() && has_usage(&e.data));
        let rewritten;
        let data = if withheld {
            rewritten = without_usage(&events);
            &rewritten[..]
        } else {
            data
        };
        for event in events {
            if event.is_done() {
                self.done = true;
            } else if needs_tap(&event.data) {
                self.tapped.push(event.data);
            }
        }
        if data.is_empty() {
            return;
        }
        let data = match &self.secret {
            Some(secret) => scrub_with(data, secret),
            None => Cow::Borrowed(data),
        };
        // The client's chunked framing, as the connection layer writes it.
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(&data);
        out.extend_from_slice(b"\r\n");
    }
}

/// `data` with every occurrence of `secret` replaced (bytes.replace's: left to right, not
/// overlapping).
pub fn scrub<'a>(data: &'a [u8], secret: &[u8]) -> Cow<'a, [u8]> {
    if secret.is_empty() {
        return Cow::Borrowed(data);
    }
    scrub_with(data, &memmem::Finder::new(secret))
}

/// [`scrub`] with the secret's searcher built beforehand (a relay builds it once).
fn scrub_with<'a>(data: &'a [u8], secret: &memmem::Finder<'_>) -> Cow<'a, [u8]> {
    if secret.find(data).is_none() {
        return Cow::Borrowed(data);
    }
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    for hit in secret.find_iter(data) {
        if hit < at {
            continue;
        }
        out.extend_from_slice(&data[at..hit]);
        out.extend_from_slice(REDACTED);
        at = hit + secret.needle().len();
    }
    out.extend_from_slice(&data[at..]);
    Cow::Owned(out)
}

/// Python's truth of a JSON value, as `not doc.get("choices")` reads it.
fn truthy(value: Option<&serde_json::Value>) -> bool {
    use serde_json::Value;
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Whole events written again without the usage the client did not ask for
/// (edgegw.tap.without_usage): a chunk that carries only usage (no choices) is dropped, a
/// content chunk loses its `usage`; every event is written as `event:`, `id:`, `data:`
/// lines.
pub fn without_usage(events: &[Event]) -> Vec<u8> {
    // What the events take written again, the lines' `data: ` prefixes aside: one growth.
    let mut out = Vec::with_capacity(events.iter().map(|e| e.data.len() + 16).sum());
    for event in events {
        let mut data: Cow<'_, [u8]> = Cow::Borrowed(&event.data);
        if !event.is_done() && has_usage(&event.data) {
            if let Ok(serde_json::Value::Object(mut doc)) =
                serde_json::from_slice::<serde_json::Value>(&event.data)
            {
                if !truthy(doc.get("choices")) {
                    continue;
                }
                doc.shift_remove("usage");
                data = Cow::Owned(serde_json::to_vec(&doc).unwrap_or_default());
            }
        }
        if let Some(name) = &event.event {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(name.as_bytes());
            out.push(b'\n');
        }
        if let Some(id) = &event.id {
            out.extend_from_slice(b"id: ");
            out.extend_from_slice(id.as_bytes());
            out.push(b'\n');
        }
        // Line by line as `split` would (an empty last line after a final LF too), found by
        // memchr: a byte-by-byte split was most of this function's instructions.
        let mut rest: &[u8] = &data;
        loop {
            let end = memchr::memchr(b'\n', rest);
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(&rest[..end.unwrap_or(rest.len())]);
            out.push(b'\n');
            match end {
                Some(i) => rest = &rest[i + 1..],
                None => break,
            }
        }
        out.push(b'\n');
    }
    out
}

/// The body a chunked client reads from `framed` (the chunks this relay wrote), for tests
/// and the fuzz target: None when it is not a sequence of whole chunks.
pub fn unchunk(framed: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    let mut at = 0;
    while at < framed.len() {
        let line_end = at + memmem::find(&framed[at..], b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&framed[at..line_end]).ok()?, 16).ok()?;
        let start = line_end + 2;
        let end = start.checked_add(size)?;
        if size == 0 || framed.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        body.extend_from_slice(&framed[start..end]);
        at = end + 2;
    }
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::DEFAULT_MAX_EVENT_BYTES;

    const HEAD: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

    fn chunked(body: &[u8]) -> Vec<u8> {
        let mut out = HEAD.to_vec();
        for piece in body.chunks(7) {
            out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            out.extend_from_slice(piece);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    fn relay(secret: &[u8], hide: bool) -> Relay {
        Relay::new(
            ResponseParser::new(false),
            secret.to_vec(),
            hide,
            DEFAULT_MAX_EVENT_BYTES,
        )
    }

    /// The client's body and the stop, the upstream's bytes read in `cuts` pieces.
    fn run(r: &mut Relay, wire: &[u8], cuts: &[usize]) -> (Vec<u8>, Option<Stop>) {
        let mut out = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&wire.len())) {
            if r.feed_raw(&wire[at..cut], &mut out).is_some() {
                break;
            }
            at = cut;
        }
        if r.stop().is_none() {
            r.feed_raw(b"", &mut out);
        }
        (unchunk(&out).expect("whole chunks"), r.stop().cloned())
    }

    const STREAM: &[u8] =
        b"data: {\"choices\":[{\"delta\":{\"content\":\"hi sk-1\"}}],\"usage\":null}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n\
data: [DONE]\n\n";

    #[test]
    fn relays_whole_events_at_every_cut() {
        let wire = chunked(STREAM);
        let whole = run(&mut relay(b"sk-1", false), &wire, &[]);
        let expected = String::from_utf8_lossy(STREAM).replace("sk-1", "[redacted]");
        assert_eq!(whole.0, expected.as_bytes());
        assert_eq!(whole.1, Some(Stop::Ended));
        for a in HEAD.len()..wire.len() {
            let mut r = relay(b"sk-1", false);
            assert_eq!(run(&mut r, &wire, &[a]), whole, "cut at {a}");
            assert_eq!((r.events, r.done, r.tapped.len()), (4, true, 2));
        }
    }

    #[test]
    fn hidden_usage_is_withheld() {
        let wire = chunked(STREAM);
        for a in HEAD.len()..wire.len() {
            let (body, stop) = run(&mut relay(b"", true), &wire, &[a]);
            assert_eq!(stop, Some(Stop::Ended));
            assert!(
                !body.windows(13).any(|w| w == b"prompt_tokens"),
                "cut at {a}"
            );
            assert!(body.ends_with(b"data: [DONE]\n\n"));
        }
        let kept =
            b"data: {\"choices\":[{\"index\":0}],\"usage\":{\"total_tokens\":3},\"id\":\"x\"}\n\n";
        let events = SseSplitter::new(1024).feed(kept).unwrap();
        assert_eq!(
            without_usage(&events),
            b"data: {\"choices\":[{\"index\":0}],\"id\":\"x\"}\n\n"
        );
    }

    #[test]
    fn events_are_written_again_line_by_line() {
        // Each data line a `data:` line of its own, an empty line (last, first or alone)
        // included, as the events were split.
        let lines = |d: &str| Event {
            data: d.as_bytes().to_vec(),
            ..Event::default()
        };
        let events = [lines("a\nb"), lines(""), lines("x\n"), lines("\n\ny")];
        let named = Event {
            event: Some("e".to_string()),
            id: Some("7".to_string()),
            ..lines("z")
        };
        let mut all = events.to_vec();
        all.push(named);
        let expected: &[u8] = b"data: a\ndata: b\n\ndata: \n\ndata: x\ndata: \n\n\
            data: \ndata: \ndata: y\n\nevent: e\nid: 7\ndata: z\n\n";
        assert_eq!(without_usage(&all), expected);
    }

    #[test]
    fn a_cut_event_is_a_truncation() {
        let wire = chunked(b"data: {\"a\":1}\n\ndata: {\"b\"");
        let (body, stop) = run(&mut relay(b"", false), &wire, &[]);
        assert_eq!(body, b"data: {\"a\":1}\n\n");
        assert_eq!(
            stop,
            Some(Stop::Fault(
                "upstream_stream_truncated",
                "the upstream stream ended mid-event".into()
            ))
        );
    }

    #[test]
    fn a_closed_connection_mid_body_is_a_fault() {
        let mut wire = HEAD.to_vec();
        wire.extend_from_slice(b"10\r\ndata: x\n\n");
        let (_, stop) = run(&mut relay(b"", false), &wire, &[]);
        assert!(matches!(
            stop,
            Some(Stop::Fault("upstream_connection_lost", _))
        ));
    }

    #[test]
    fn scrub_is_bytes_replace() {
        assert_eq!(&*scrub(b"aaaa", b"aa"), b"[redacted][redacted]");
        assert_eq!(&*scrub(b"xaaay", b"aa"), b"x[redacted]ay");
        assert_eq!(&*scrub(b"nothing", b"k"), b"nothing");
    }
}
