//! Incremental Server-Sent Events splitting (the WHATWG event-stream grammar).
//!
//! `feed(bytes)` returns the events completed by those bytes and keeps the rest; how a
//! stream is cut into pieces never changes the events it yields. Lines end with LF,
//! CRLF or CR (a CR at the end of one piece and an LF at the start of the next are one
//! line ending). Comment lines are skipped, several `data:` lines join with `\n`,
//! a blank line dispatches, and an event without data is not dispatched.
//!
//! [`SseSplitter::pending`] is the tail a relay must hold back to send only whole events:
//! the bytes fed after the end of the last block (the line ending of the last blank line,
//! whether that block was dispatched, a comment or an event without data). A relay that
//! sends everything it was given except the last `pending` bytes has sent exactly the
//! stream up to a block boundary. Two choices make this exact:
//!   - a CR that ends a blank line ends its block at once (the event is dispatched and may
//!     be sent without waiting for the next byte); when the next piece starts with the LF
//!     of that CRLF, the LF belongs to the ended block: it is never counted in `pending`, so
//!     it goes out at the head of the next relayed piece. A reader that splits events per
//!     the grammar takes CR, LF across two reads as one line ending, so the relayed bytes
//!     are still whole events;
//!   - a UTF-8 BOM at the start of the stream belongs to the first block.
//!
//! The bytes held for the block being assembled are bounded, and the bound counts what a
//! relay holds, not only what the splitter keeps: past `max_event_bytes` of `pending` (the
//! raw lines since the last block ended, comments and unknown fields included) the stream
//! is an upstream fault ([`UpstreamFault::EventTooLarge`]), not a reason to grow memory.

use std::sync::LazyLock;

use memchr::memmem::Finder;

use crate::error::UpstreamFault;

/// Default bound on one event: far above any chat chunk, far below a memory problem.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;

const BOM: &[u8] = b"\xEF\xBB\xBF";

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    pub event: Option<String>,
    pub data: Vec<u8>,
    pub id: Option<String>,
    pub retry: Option<u64>,
}

impl Event {
    pub fn is_done(&self) -> bool {
        self.data == b"[DONE]"
    }
}

/// What a relay needs from the events one piece completed, and nothing else: how many,
/// whether `[DONE]` was among them, and the data of the few its usage tap must read (usage,
/// tool calls, a finish reason: [`needs_tap`]). Most chat chunks carry none of these, so a
/// relayed content chunk costs the relay's Python no object and no test (bench/sse_tap.py).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tapped {
    pub events: usize,
    pub done: bool,
    pub data: Vec<Vec<u8>>,
}

/// An event the usage tap reads: a `usage` member that is not null (many providers send
/// `"usage":null` on every chunk), a tool call, or a finish reason that is a string. A
/// byte test, as the tap's own was: the tap then parses the few events it names.
pub fn needs_tap(data: &[u8]) -> bool {
    has_usage(data) || TOOL_CALLS.find(data).is_some() || FINISH_REASON.find(data).is_some()
}

/// A usage member that is not null (edgegw.tap.has_usage).
pub fn has_usage(data: &[u8]) -> bool {
    USAGE.find(data).is_some() && USAGE_NULL.find(data).is_none()
}

// The tap's needles, each searcher built once: `memmem::find` builds one a call, which was a
// fifth of a relayed stream's instructions (bench/README.md, "The relay in the core").
static USAGE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\":"));
static USAGE_NULL: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\":null"));
static TOOL_CALLS: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"tool_calls\""));
static FINISH_REASON: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"\"finish_reason\":\""));

#[derive(Debug)]
pub struct SseSplitter {
    max_event_bytes: usize,
    /// The line being assembled across pieces.
    line: Vec<u8>,
    /// The previous piece ended in CR: an LF starting the next one belongs to it.
    pending_cr: bool,
    /// ...and that CR ended a blank line, so such an LF is part of the ended block.
    pending_cr_ended_block: bool,
    /// Bytes fed since the end of the last block (see the module docs).
    pending: usize,
    at_stream_start: bool,
    current: Event,
    has_data: bool,
}

impl SseSplitter {
    pub fn new(max_event_bytes: usize) -> Self {
        SseSplitter {
            max_event_bytes,
            line: Vec::new(),
            pending_cr: false,
            pending_cr_ended_block: false,
            pending: 0,
            at_stream_start: true,
            current: Event::default(),
            has_data: false,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Event>, UpstreamFault> {
        let mut out = Vec::new();
        let mut i = 0;
        if self.pending_cr && !chunk.is_empty() {
            self.pending_cr = false;
            if chunk[0] == b'\n' {
                i = 1;
                if !self.pending_cr_ended_block {
                    self.pending += 1;
                    self.check_bound()?;
                }
            }
        }
        while i < chunk.len() {
            let rest = &chunk[i..];
            match memchr::memchr2(b'\n', b'\r', rest) {
                None => {
                    self.line.extend_from_slice(rest);
                    self.pending += rest.len();
                    self.check_bound()?;
                    break;
                }
                Some(off) => {
                    let end = i + off;
                    let blank = if self.line.is_empty() {
                        self.process_line(&chunk[i..end], &mut out)
                    } else {
                        let mut line = std::mem::take(&mut self.line);
                        line.extend_from_slice(&chunk[i..end]);
                        let blank = self.process_line(&line, &mut out);
                        line.clear();
                        self.line = line;
                        blank
                    };
                    let start = i;
                    i = end + 1;
                    if chunk[end] == b'\r' {
                        if i < chunk.len() {
                            if chunk[i] == b'\n' {
                                i += 1;
                            }
                        } else {
                            self.pending_cr = true;
                            self.pending_cr_ended_block = blank;
                        }
                    }
                    if blank {
                        self.pending = 0;
                    } else {
                        self.pending += i - start;
                    }
                    self.check_bound()?;
                }
            }
        }
        Ok(out)
    }

    /// `feed` for a relay: the events summarised as [`Tapped`].
    pub fn feed_tapped(&mut self, chunk: &[u8]) -> Result<Tapped, UpstreamFault> {
        let mut out = Tapped::default();
        for event in self.feed(chunk)? {
            out.events += 1;
            if event.is_done() {
                out.done = true;
            } else if needs_tap(&event.data) {
                out.data.push(event.data);
            }
        }
        Ok(out)
    }

    /// Bytes fed so far after the end of the last complete block: what a relay holds back
    /// so that what it sends ends on an event boundary (see the module docs). `finish()`
    /// leaves it as it is: that tail is what the end of the stream discards.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// End of stream. Returns true when an event was left incomplete (a truncated stream);
    /// per the grammar that event is discarded.
    pub fn finish(&mut self) -> bool {
        let incomplete = self.has_data || !self.line.is_empty();
        self.line.clear();
        self.current = Event::default();
        self.has_data = false;
        self.pending_cr = false;
        self.pending_cr_ended_block = false;
        incomplete
    }

    /// `pending` counts every raw byte of the block so far (the partial line included), so it
    /// bounds the line and the data the splitter keeps as well as what a relay holds.
    fn check_bound(&self) -> Result<(), UpstreamFault> {
        if self.pending > self.max_event_bytes {
            Err(UpstreamFault::EventTooLarge {
                limit: self.max_event_bytes,
            })
        } else {
            Ok(())
        }
    }

    /// Returns true for a blank line: the end of a block.
    fn process_line(&mut self, mut line: &[u8], out: &mut Vec<Event>) -> bool {
        if self.at_stream_start {
            self.at_stream_start = false;
            if line.starts_with(BOM) {
                line = &line[BOM.len()..];
            }
        }
        if line.is_empty() {
            self.dispatch(out);
            return true;
        }
        if line[0] == b':' {
            return false; // comment
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.current.data.push(b'\n');
                }
                self.current.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.current.event = Some(String::from_utf8_lossy(value).into_owned()),
            // An id containing NUL is ignored (WHATWG), as is a retry that is not all digits.
            b"id" if !value.contains(&0) => {
                self.current.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.current.retry = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
            }
            _ => {} // unknown fields, and the ignored values above
        }
        false
    }

    fn dispatch(&mut self, out: &mut Vec<Event>) {
        if self.has_data {
            out.push(std::mem::take(&mut self.current));
        } else {
            self.current = Event::default();
        }
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(pieces: &[&[u8]]) -> Vec<Event> {
        let mut s = SseSplitter::new(DEFAULT_MAX_EVENT_BYTES);
        let mut out = Vec::new();
        for p in pieces {
            out.extend(s.feed(p).unwrap());
        }
        out
    }

    const STREAM: &[u8] = b"\xEF\xBB\xBF: keep-alive\r\n\r\nevent: delta\r\nid: 7\r\nretry: 1500\r\ndata: {\"a\":1}\r\ndata: second\r\n\r\ndata:x\rdata: y\r\rdata\n\nid: only-id\n\ndata: [DONE]\n\n";

    fn expected() -> Vec<Event> {
        vec![
            Event {
                event: Some("delta".into()),
                data: b"{\"a\":1}\nsecond".to_vec(),
                id: Some("7".into()),
                retry: Some(1500),
            },
            Event {
                data: b"x\ny".to_vec(),
                ..Default::default()
            },
            Event {
                data: b"".to_vec(),
                ..Default::default()
            },
            Event {
                data: b"[DONE]".to_vec(),
                ..Default::default()
            },
        ]
    }

    #[test]
    fn tapped_names_only_what_the_tap_reads() {
        let stream: &[u8] =
            b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n\
data: {\"choices\":[{\"delta\":{\"tool_calls\":[]}}]}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":null}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n\
data: [DONE]\n\n";
        for cut in 0..stream.len() {
            let mut s = SseSplitter::new(DEFAULT_MAX_EVENT_BYTES);
            let a = s.feed_tapped(&stream[..cut]).unwrap();
            let b = s.feed_tapped(&stream[cut..]).unwrap();
            assert_eq!(a.events + b.events, 6, "cut at {cut}");
            assert!(b.done && !a.done || cut == stream.len());
            let tapped: Vec<Vec<u8>> = a.data.into_iter().chain(b.data).collect();
            let all = split_all(&[stream]);
            let want: Vec<Vec<u8>> = [1, 2, 4].iter().map(|&i| all[i].data.clone()).collect();
            assert_eq!(tapped, want, "cut at {cut}");
        }
    }

    #[test]
    fn whole_stream() {
        let events = split_all(&[STREAM]);
        assert_eq!(events, expected());
        assert!(events[3].is_done());
    }

    #[test]
    fn every_cut_gives_the_same_events() {
        let bytewise: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(split_all(&bytewise), expected());
        for cut in 0..STREAM.len() {
            assert_eq!(
                split_all(&[&STREAM[..cut], &STREAM[cut..]]),
                expected(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn bound_on_event_size() {
        let mut s = SseSplitter::new(64);
        assert!(s.feed(&[b'a'; 100]).is_err());
        let mut s = SseSplitter::new(64);
        let mut failed = false;
        for _ in 0..10 {
            if s.feed(b"data: 0123456789\n").is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
        // Many small events never trip the bound.
        let mut s = SseSplitter::new(64);
        for _ in 0..1000 {
            assert_eq!(s.feed(b"data: 0123456789\n\n").unwrap().len(), 1);
        }
    }

    /// Where blocks end in a whole stream, found apart from the splitter: after the line
    /// ending of each blank line (a trailing CR is a line ending at the end of the stream).
    /// Also where a relayed piece may end: those, and between the CR and LF of a blank
    /// line's CRLF.
    fn block_ends(stream: &[u8]) -> (Vec<usize>, Vec<usize>) {
        let (mut ends, mut cuts) = (Vec::new(), Vec::new());
        let mut start = 0;
        let mut i = 0;
        while i < stream.len() {
            if stream[i] != b'\r' && stream[i] != b'\n' {
                i += 1;
                continue;
            }
            let crlf = stream[i] == b'\r' && stream.get(i + 1) == Some(&b'\n');
            let line = &stream[start..i];
            let blank = line.is_empty() || (start == 0 && line == BOM);
            i += if crlf { 2 } else { 1 };
            if blank {
                if crlf {
                    cuts.push(i - 1);
                }
                ends.push(i);
                cuts.push(i);
            }
            start = i;
        }
        (ends, cuts)
    }

    /// What a relay sends, piece by piece: all it has except the last `pending` bytes.
    fn relay(pieces: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut s = SseSplitter::new(DEFAULT_MAX_EVENT_BYTES);
        let mut held: Vec<u8> = Vec::new();
        let mut sent = Vec::new();
        for p in pieces {
            held.extend_from_slice(p);
            s.feed(p).unwrap();
            let cut = held.len() - s.pending();
            sent.push(held.drain(..cut).collect());
        }
        sent
    }

    fn check_relay(stream: &[u8], pieces: &[&[u8]]) {
        let (ends, cuts) = block_ends(stream);
        let sent = relay(pieces);
        let mut at = 0;
        for piece in &sent {
            at += piece.len();
            assert!(
                at == 0 || cuts.contains(&at),
                "a piece ends at {at}: {pieces:?}"
            );
        }
        assert_eq!(at, ends.last().copied().unwrap_or(0), "{pieces:?}");
        assert_eq!(sent.concat(), stream[..at].to_vec());
    }

    #[test]
    fn pending_is_the_tail_after_the_last_block() {
        let mut s = SseSplitter::new(1024);
        s.feed(b"data: a\n\ndata: b").unwrap();
        assert_eq!(s.pending(), 7);
        s.feed(b"\n").unwrap();
        assert_eq!(s.pending(), 8);
        s.feed(b"\n: comment\n\nevent: x\n\n").unwrap();
        assert_eq!(
            s.pending(),
            0,
            "a comment block and a data-less event end too"
        );
        s.feed(b"data: c\r").unwrap();
        assert_eq!(s.pending(), 8);
        s.feed(b"\n").unwrap();
        assert_eq!(s.pending(), 9, "the LF of a data line's CRLF is held");
        s.feed(b"\r").unwrap();
        assert_eq!(
            s.pending(),
            0,
            "a CR ending a blank line ends the block at once"
        );
        s.feed(b"\n").unwrap();
        assert_eq!(
            s.pending(),
            0,
            "...and the LF after it belongs to that block"
        );
        s.feed(b"\n").unwrap();
        assert_eq!(s.pending(), 0, "a further blank line is a block of its own");
        s.feed(b"data: d").unwrap();
        assert!(s.finish());
        assert_eq!(s.pending(), 7, "finish() leaves the discarded tail");
    }

    #[test]
    fn pending_counts_the_bom_in_the_first_block() {
        let mut s = SseSplitter::new(1024);
        s.feed(b"\xEF\xBB").unwrap();
        assert_eq!(s.pending(), 2);
        s.feed(b"\xBF\r\n").unwrap();
        assert_eq!(s.pending(), 0, "a BOM then a line ending is a blank line");
        check_relay(
            b"\xEF\xBB\xBF\r\ndata: x\n\n",
            &[b"\xEF\xBB\xBF\r", b"\ndata: x\n\n"],
        );
    }

    #[test]
    fn relayed_pieces_are_whole_blocks_at_every_cut() {
        let streams: &[&[u8]] = &[
            STREAM,
            b"data: a\r\n\r\ndata: b\r\n\r\n",
            b"data: a\r\rdata: b\r\r",
            b": c\n\n\n\ndata: x\n\ndata: tail",
            b"\xEF\xBB\xBF\ndata: x\n\n",
            b"",
        ];
        for &stream in streams {
            check_relay(stream, &[stream]);
            check_relay(stream, &stream.chunks(1).collect::<Vec<_>>());
            for a in 0..=stream.len() {
                for b in a..=stream.len() {
                    check_relay(stream, &[&stream[..a], &stream[a..b], &stream[b..]]);
                }
            }
        }
    }

    #[test]
    fn bound_counts_what_a_relay_holds() {
        // Comments and data-less fields are kept by no one but the relay: bounded too.
        let mut s = SseSplitter::new(64);
        let mut failed = false;
        for _ in 0..10 {
            if s.feed(b": keep-alive\nevent: x\n").is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
    }

    #[test]
    fn bound_does_not_depend_on_a_crlf_cut() {
        // 8 bytes then CRLF: over a bound of 9 whether or not the CR and LF come together.
        let line = b"data: ab\r\n";
        assert!(SseSplitter::new(9).feed(line).is_err());
        let mut s = SseSplitter::new(9);
        s.feed(&line[..9]).unwrap();
        assert!(s.feed(&line[9..]).is_err());
    }

    #[test]
    fn finish_reports_truncation() {
        let mut s = SseSplitter::new(1024);
        s.feed(b"data: partial\n").unwrap();
        assert!(s.finish());
        s.feed(b"data: whole\n\n").unwrap();
        assert!(!s.finish());
    }
}
