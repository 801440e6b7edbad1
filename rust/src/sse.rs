//! Incremental Server-Sent Events splitting (the WHATWG event-stream grammar).
//!
//! `feed(bytes)` returns the events completed by those bytes and keeps the rest; how a
//! stream is cut into pieces never changes the events it yields. Lines end with LF,
//! CRLF or CR (a CR at the end of one piece and an LF at the start of the next are one
//! line ending). Comment lines are skipped, several `data:` lines join with `\n`,
//! a blank line dispatches, and an event without data is not dispatched. The bytes held
//! for the event being assembled are bounded: past `max_event_bytes` the stream is an
//! upstream fault ([`UpstreamFault::EventTooLarge`]), not a reason to grow memory.

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

#[derive(Debug)]
pub struct SseSplitter {
    max_event_bytes: usize,
    /// The line being assembled across pieces.
    line: Vec<u8>,
    /// The previous piece ended in CR: an LF starting the next one belongs to it.
    pending_cr: bool,
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
            }
        }
        while i < chunk.len() {
            let rest = &chunk[i..];
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.line.extend_from_slice(rest);
                    self.check_bound()?;
                    break;
                }
                Some(off) => {
                    let end = i + off;
                    if self.line.is_empty() {
                        self.process_line(&chunk[i..end], &mut out);
                    } else {
                        let mut line = std::mem::take(&mut self.line);
                        line.extend_from_slice(&chunk[i..end]);
                        self.process_line(&line, &mut out);
                        line.clear();
                        self.line = line;
                    }
                    self.check_bound()?;
                    i = end + 1;
                    if chunk[end] == b'\r' {
                        if i < chunk.len() {
                            if chunk[i] == b'\n' {
                                i += 1;
                            }
                        } else {
                            self.pending_cr = true;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// End of stream. Returns true when an event was left incomplete (a truncated stream);
    /// per the grammar that event is discarded.
    pub fn finish(&mut self) -> bool {
        let incomplete = self.has_data || !self.line.is_empty();
        self.line.clear();
        self.current = Event::default();
        self.has_data = false;
        self.pending_cr = false;
        incomplete
    }

    fn check_bound(&self) -> Result<(), UpstreamFault> {
        if self.line.len() + self.current.data.len() > self.max_event_bytes {
            Err(UpstreamFault::EventTooLarge {
                limit: self.max_event_bytes,
            })
        } else {
            Ok(())
        }
    }

    fn process_line(&mut self, mut line: &[u8], out: &mut Vec<Event>) {
        if self.at_stream_start {
            self.at_stream_start = false;
            if line.starts_with(BOM) {
                line = &line[BOM.len()..];
            }
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return; // comment
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

    #[test]
    fn finish_reports_truncation() {
        let mut s = SseSplitter::new(1024);
        s.feed(b"data: partial\n").unwrap();
        assert!(s.finish());
        s.feed(b"data: whole\n\n").unwrap();
        assert!(!s.finish());
    }
}
