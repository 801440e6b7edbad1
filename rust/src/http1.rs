//! HTTP/1.1 response framing for the upstream client, sans I/O: bytes in, the head once,
//! decoded body bytes, and the end.
//!
//! Replaces h11 on the client side of the proxy, where h11's client cycle was a third of
//! everything the gateway adds to a proxied request (bench/README.md, "upstream client").
//! The head is parsed by
//! `httparse` (the parser under hyper); framing follows RFC 9112 §6: no body for
//! HEAD/1xx/204/304, chunked when it is the final transfer coding, else Content-Length
//! (every value equal), else until the peer closes.

use crate::error::UpstreamFault;

/// Largest response head accepted (provider heads are a few hundred bytes).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header fields in one head.
pub const MAX_HEADERS: usize = 96;
/// Longest chunk-size line or trailer line (extensions included).
const MAX_LINE_BYTES: usize = 4096;
/// Most trailer bytes in total.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What one `feed` produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub head: Option<Head>,
    pub body: Vec<u8>,
    pub done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkDataEnd,
    Trailers(usize),
    UntilClose,
    Done,
}

#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    buf: Vec<u8>,
    head_request: bool,
    reusable: bool,
    /// Bytes that came after the message (a pipelined next request, on the server side).
    trailing: Vec<u8>,
}

fn bad(msg: &str) -> UpstreamFault {
    UpstreamFault::BadResponse(msg.to_string())
}

impl ResponseParser {
    /// `head_request`: the request was HEAD, so no response has a body.
    pub fn new(head_request: bool) -> Self {
        ResponseParser {
            state: State::Head,
            buf: Vec::new(),
            head_request,
            reusable: true,
            trailing: Vec::new(),
        }
    }

    /// The framing of a request's body, its head already parsed (by the head screen):
    /// chunked, else `content_length` bytes, else none (RFC 9112 §6.3: a request without
    /// either has no body).
    pub fn request_body(content_length: Option<u64>, chunked: bool) -> Self {
        let state = match (chunked, content_length) {
            (true, _) => State::ChunkSize,
            (false, Some(n)) if n > 0 => State::Length(n),
            _ => State::Done,
        };
        ResponseParser {
            state,
            buf: Vec::new(),
            head_request: false,
            reusable: true,
            trailing: Vec::new(),
        }
    }

    /// The bytes that came after the message, taken.
    pub fn take_trailing(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.trailing)
    }

    /// The connection may carry another request once this response is done.
    pub fn reusable(&self) -> bool {
        self.reusable && self.state == State::Done
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    pub fn feed(&mut self, data: &[u8]) -> Result<Progress, UpstreamFault> {
        let mut progress = Progress::default();
        // Fast path: body bytes with nothing buffered need no copy into `buf`.
        let mut input: &[u8] = data;
        let owned;
        if !self.buf.is_empty() {
            self.buf.extend_from_slice(data);
            owned = std::mem::take(&mut self.buf);
            input = &owned;
        }
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                State::Done => {
                    if !rest.is_empty() {
                        // Bytes after the response: the connection cannot be trusted again.
                        // (After a request's body: the next request, pipelined.)
                        self.reusable = false;
                        self.trailing.extend_from_slice(rest);
                    }
                    break;
                }
                State::Head => match self.parse_head(rest)? {
                    None => {
                        self.buf.extend_from_slice(rest);
                        break;
                    }
                    Some((used, head)) => {
                        pos += used;
                        let interim = (100..200).contains(&head.status);
                        if !interim {
                            progress.head = Some(head);
                        }
                        if self.state == State::Done {
                            progress.done = true;
                        }
                    }
                },
                State::Length(remaining) => {
                    let take = remaining.min(rest.len() as u64) as usize;
                    progress.body.extend_from_slice(&rest[..take]);
                    pos += take;
                    let left = remaining - take as u64;
                    if left == 0 {
                        self.state = State::Done;
                        progress.done = true;
                    } else {
                        self.state = State::Length(left);
                        break;
                    }
                }
                State::UntilClose => {
                    progress.body.extend_from_slice(rest);
                    break;
                }
                State::ChunkSize => match find_crlf(rest) {
                    None => {
                        if least_line_len(rest) > MAX_LINE_BYTES {
                            return Err(bad("chunk-size line too long"));
                        }
                        self.buf.extend_from_slice(rest);
                        break;
                    }
                    Some(end) => {
                        let size = parse_chunk_size(&rest[..end])?;
                        pos += end + 2;
                        self.state = if size == 0 {
                            State::Trailers(0)
                        } else {
                            State::ChunkData(size)
                        };
                    }
                },
                State::ChunkData(remaining) => {
                    if rest.is_empty() {
                        break;
                    }
                    let take = remaining.min(rest.len() as u64) as usize;
                    progress.body.extend_from_slice(&rest[..take]);
                    pos += take;
                    let left = remaining - take as u64;
                    self.state = if left == 0 {
                        State::ChunkDataEnd
                    } else {
                        State::ChunkData(left)
                    };
                }
                State::ChunkDataEnd => {
                    if rest.len() < 2 {
                        if rest.first().is_some_and(|&b| b != b'\r') {
                            return Err(bad("chunk data not followed by CRLF"));
                        }
                        self.buf.extend_from_slice(rest);
                        break;
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(bad("chunk data not followed by CRLF"));
                    }
                    pos += 2;
                    self.state = State::ChunkSize;
                }
                State::Trailers(seen) => match find_crlf(rest) {
                    None => {
                        if seen + least_line_len(rest) > MAX_TRAILER_BYTES {
                            return Err(bad("trailers too large"));
                        }
                        self.buf.extend_from_slice(rest);
                        break;
                    }
                    Some(0) => {
                        pos += 2;
                        self.state = State::Done;
                        progress.done = true;
                    }
                    Some(end) => {
                        if seen + end > MAX_TRAILER_BYTES {
                            return Err(bad("trailers too large"));
                        }
                        pos += end + 2;
                        self.state = State::Trailers(seen + end + 2);
                    }
                },
            }
        }
        Ok(progress)
    }

    /// The peer closed the connection. Ends a close-delimited body; anywhere else the
    /// response was cut short.
    pub fn feed_eof(&mut self) -> Result<Progress, UpstreamFault> {
        self.reusable = false;
        match self.state {
            State::UntilClose => {
                self.state = State::Done;
                Ok(Progress {
                    done: true,
                    ..Progress::default()
                })
            }
            State::Done => Ok(Progress {
                done: true,
                ..Progress::default()
            }),
            _ => Err(UpstreamFault::Closed),
        }
    }

    fn parse_head(&mut self, data: &[u8]) -> Result<Option<(usize, Head)>, UpstreamFault> {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut slots);
        let used = match resp.parse(data) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if data.len() > MAX_HEAD_BYTES {
                    return Err(bad("response head too large"));
                }
                return Ok(None);
            }
            Err(httparse::Error::TooManyHeaders) => return Err(bad("too many header fields")),
            Err(_) => return Err(bad("malformed response head")),
        };
        if used > MAX_HEAD_BYTES {
            return Err(bad("response head too large"));
        }
        let status = resp.code.unwrap_or(0);
        let version = resp.version.unwrap_or(0);
        let mut content_length: Option<u64> = None;
        let mut chunked = false;
        let mut has_te = false;
        let mut close = version == 0;
        let mut headers = Vec::with_capacity(resp.headers.len());
        for h in resp.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"content-length") {
                let text = std::str::from_utf8(h.value).map_err(|_| bad("bad Content-Length"))?;
                for part in text.split(',') {
                    let part = part.trim();
                    if part.is_empty()
                        || !part.bytes().all(|b| b.is_ascii_digit())
                        || part.len() > 19
                    {
                        return Err(bad("bad Content-Length"));
                    }
                    let n: u64 = part.parse().map_err(|_| bad("bad Content-Length"))?;
                    if content_length.is_some_and(|c| c != n) {
                        return Err(bad("conflicting Content-Length values"));
                    }
                    content_length = Some(n);
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                has_te = true;
                let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
                chunked = trim(last).eq_ignore_ascii_case(b"chunked");
            } else if name.eq_ignore_ascii_case(b"connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = trim(token);
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && version == 0 {
                        close = false;
                    }
                }
            }
            headers.push((name.to_ascii_lowercase(), h.value.to_vec()));
        }
        if close {
            self.reusable = false;
        }
        let head = Head { status, headers };
        if (100..200).contains(&status) {
            if status == 101 {
                return Err(bad("unexpected protocol switch"));
            }
            return Ok(Some((used, head))); // interim: stay in Head for the final response
        }
        if has_te && content_length.is_some() {
            // RFC 9112 §6.1 forbids sending both: read by its chunks, but the upstream may
            // have meant the length, so what follows on the connection is not trusted.
            self.reusable = false;
        }
        self.state = if self.head_request || status == 204 || status == 304 {
            State::Done
        } else if has_te {
            if chunked {
                State::ChunkSize
            } else {
                self.reusable = false;
                State::UntilClose
            }
        } else if let Some(n) = content_length {
            if n == 0 {
                State::Done
            } else {
                State::Length(n)
            }
        } else {
            self.reusable = false;
            State::UntilClose
        };
        Ok(Some((used, head)))
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

/// The shortest a line still without its CRLF can turn out to be: a CR at the end of what
/// has come may be the first half of that CRLF. Bounding this, not `rest.len()`, keeps a
/// verdict from depending on where the reads were cut (seen while writing fuzz/
/// `http1_response`'s cut-independence check; a line of MAX_LINE_BYTES is past that
/// target's input size, so `line_bounds_do_not_depend_on_a_crlf_cut` pins it).
fn least_line_len(rest: &[u8]) -> usize {
    rest.len() - usize::from(rest.last() == Some(&b'\r'))
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, UpstreamFault> {
    if line.len() > MAX_LINE_BYTES {
        return Err(bad("chunk-size line too long"));
    }
    let digits = line.split(|&b| b == b';').next().unwrap_or(b"");
    let digits = trim(digits);
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(bad("bad chunk size"));
    }
    let text = std::str::from_utf8(digits).map_err(|_| bad("bad chunk size"))?;
    u64::from_str_radix(text, 16).map_err(|_| bad("bad chunk size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_bounds_do_not_depend_on_a_crlf_cut() {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        // A chunk-size line of exactly MAX_LINE_BYTES (a long extension), then a 1-byte chunk.
        let mut line = b"1;x=".to_vec();
        line.resize(MAX_LINE_BYTES, b'a');
        let mut stream = head.clone();
        stream.extend_from_slice(&line);
        stream.extend_from_slice(b"\r\nz\r\n0\r\n\r\n");
        let whole = run(&[&stream], false).unwrap();
        assert_eq!((&whole.1[..], whole.2), (&b"z"[..], true));
        let cr = head.len() + line.len() + 1; // just after the CR
        assert_eq!(run(&[&stream[..cr], &stream[cr..]], false).unwrap(), whole);
        // A trailer section that reaches MAX_TRAILER_BYTES exactly at a line's CR.
        let mut stream = head;
        stream.extend_from_slice(b"0\r\nX: ");
        let start = stream.len() - 3;
        stream.resize(start + MAX_TRAILER_BYTES, b'v');
        stream.extend_from_slice(b"\r\n\r\n");
        let whole = run(&[&stream], false).unwrap();
        let cr = start + MAX_TRAILER_BYTES + 1;
        assert_eq!(run(&[&stream[..cr], &stream[cr..]], false).unwrap(), whole);
    }

    fn run(pieces: &[&[u8]], eof: bool) -> Result<(Option<Head>, Vec<u8>, bool), UpstreamFault> {
        let mut p = ResponseParser::new(false);
        let (mut head, mut body, mut done) = (None, Vec::new(), false);
        for piece in pieces {
            let got = p.feed(piece)?;
            if got.head.is_some() {
                head = got.head;
            }
            body.extend(got.body);
            done |= got.done;
        }
        if eof {
            done |= p.feed_eof()?.done;
        }
        Ok((head, body, done))
    }

    const CHUNKED: &[u8] =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n";

    #[test]
    fn content_length_and_every_split() {
        let resp = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello";
        for cut in 0..resp.len() {
            let (head, body, done) = run(&[&resp[..cut], &resp[cut..]], false).unwrap();
            let head = head.unwrap();
            assert_eq!(head.status, 201);
            assert_eq!(head.headers[1], (b"x-a".to_vec(), b"b".to_vec()));
            assert_eq!(body, b"hello");
            assert!(done);
        }
    }

    /// A request body framed after its head, with the next request pipelined behind it:
    /// the body, then the rest kept whole, wherever the reads were cut.
    #[test]
    fn request_bodies_keep_what_follows() {
        let next = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        let chunked = [
            &b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-t: 1\r\n\r\n"[..],
            next,
        ]
        .concat();
        let sized = [&b"hello world"[..], next].concat();
        for (data, length, is_chunked) in [(&chunked, None, true), (&sized, Some(11), false)] {
            for cut in 0..data.len() {
                let mut p = ResponseParser::request_body(length, is_chunked);
                let mut body = Vec::new();
                for piece in [&data[..cut], &data[cut..]] {
                    body.extend(p.feed(piece).unwrap().body);
                }
                assert!(p.is_done(), "cut {cut}");
                assert_eq!(body, b"hello world", "cut {cut}");
                assert_eq!(p.take_trailing(), next, "cut {cut}");
            }
        }
        let mut none = ResponseParser::request_body(None, false);
        assert!(none.is_done());
        none.feed(next).unwrap();
        assert_eq!(none.take_trailing(), next);
        let mut bad = ResponseParser::request_body(None, true);
        assert!(bad.feed(b"zz\r\n").is_err());
    }

    #[test]
    fn chunked_bytewise_and_split() {
        let bytewise: Vec<&[u8]> = CHUNKED.chunks(1).collect();
        let (_, body, done) = run(&bytewise, false).unwrap();
        assert_eq!(body, b"hello world");
        assert!(done);
        for cut in 0..CHUNKED.len() {
            let (_, body, done) = run(&[&CHUNKED[..cut], &CHUNKED[cut..]], false).unwrap();
            assert_eq!(
                (body.as_slice(), done),
                (&b"hello world"[..], true),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn reuse_rules() {
        let mut p = ResponseParser::new(false);
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        assert!(p.reusable());
        let mut p = ResponseParser::new(false);
        p.feed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        assert!(p.is_done() && !p.reusable());
        let mut p = ResponseParser::new(false);
        p.feed(b"HTTP/1.0 200 OK\r\n\r\nabc").unwrap();
        assert!(!p.is_done());
        assert!(p.feed_eof().unwrap().done);
        assert!(!p.reusable());
        let mut p = ResponseParser::new(false);
        p.feed(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        )
        .unwrap();
        assert!(p.is_done() && !p.reusable());
        let mut p = ResponseParser::new(true);
        assert!(
            p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
                .unwrap()
                .done
        );
    }

    #[test]
    fn interim_responses_are_skipped() {
        let (head, body, done) = run(
            &[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"],
            false,
        )
        .unwrap();
        assert_eq!(head.unwrap().status, 200);
        assert_eq!((body.as_slice(), done), (&b"ok"[..], true));
    }

    #[test]
    fn malformed_and_truncated() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX",
            b"garbage\r\n\r\n",
        ] {
            assert!(
                run(&[bad], false).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            run(&[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"], true),
            Err(UpstreamFault::Closed)
        );
        assert!(run(&[&[b'a'; MAX_HEAD_BYTES + 10]], false).is_err());
    }
}
