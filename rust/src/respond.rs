//! The head of a response to edgegw's client (edgegw/http1/cycle.py's `http.response.start`):
//! the app's headers checked and scanned for the framing, the server's own added, written in
//! one buffer. In Python the scan was a loop of Python operations per header. And an upstream
//! request (edgegw/upstream.py), its head checked and written with its body in one buffer.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// How the body is delimited (edgegw/http1/cycle.py `Framing`, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length = 0,
    Chunked = 1,
    /// To an HTTP/1.0 client without a Content-Length: to the end of the connection.
    Close = 2,
    /// HEAD, 204, 304.
    None = 3,
}

/// An app's header the server will not send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadFault {
    /// A name that is not a token, or a control byte (but a tab) in a value: a header that
    /// would be read as another, or not at all (RFC 9110 field-name, field-value).
    ForbiddenByte,
    /// Transfer-Encoding set by the app: the server frames the response.
    TransferEncoding,
    /// A Content-Length that is not a decimal count.
    BadLength,
}

impl HeadFault {
    pub fn message(self) -> &'static str {
        match self {
            HeadFault::ForbiddenByte => "a response header name or value with forbidden bytes",
            HeadFault::TransferEncoding => "the server frames the response, not the app",
            HeadFault::BadLength => "a response Content-Length that is not a count",
        }
    }
}

/// The head and how the body follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub bytes: Vec<u8>,
    pub framing: Framing,
    pub length: Option<u64>,
    pub keep_alive: bool,
}

/// What the connection tells about the response.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub status: u16,
    pub reason: &'a [u8],
    pub http11: bool,
    /// A HEAD request: no body whatever the headers say.
    pub head_request: bool,
    /// Whether the connection may stay open, before the app's headers have their say.
    pub keep_alive: bool,
}

/// h11's reading of `Connection`: a `close` token among its comma-separated ones.
pub fn has_close(value: &[u8]) -> bool {
    value
        .split(|b| *b == b',')
        .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
}

/// RFC 9110's tchar: what a field name is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A control byte a field value may not hold (a tab it may).
fn is_ctl(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

fn length_of(value: &[u8]) -> Result<u64, HeadFault> {
    let digits = value.trim_ascii();
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(HeadFault::BadLength);
    }
    Ok(digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// The head of a response with the app's `headers`: the status line, the headers as given,
/// then Date (unless the app gave one), Transfer-Encoding when chunked and Connection: close
/// when the connection ends with this response.
pub fn response_head<'h>(
    cx: Context<'_>,
    headers: impl IntoIterator<Item = (&'h [u8], &'h [u8])>,
) -> Result<Head, HeadFault> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(cx.status.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(cx.reason);
    out.extend_from_slice(b"\r\n");
    let (mut length, mut dated, mut keep_alive) = (None, false, cx.keep_alive);
    for (name, value) in headers {
        if name.is_empty() || !name.iter().all(|b| is_tchar(*b)) || value.iter().any(|b| is_ctl(*b))
        {
            return Err(HeadFault::ForbiddenByte);
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            length = Some(length_of(value)?);
        } else if name.eq_ignore_ascii_case(b"date") {
            dated = true;
        } else if name.eq_ignore_ascii_case(b"connection") && has_close(value) {
            keep_alive = false;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err(HeadFault::TransferEncoding);
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if !dated {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(&http_date());
        out.extend_from_slice(b"\r\n");
    }
    let framing = if cx.head_request || cx.status == 204 || cx.status == 304 {
        Framing::None
    } else if length.is_some() {
        Framing::Length
    } else if cx.http11 {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Framing::Chunked
    } else {
        keep_alive = false; // HTTP/1.0: the body ends where the connection does
        Framing::Close
    };
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Head {
        bytes: out,
        framing,
        length,
        keep_alive,
    })
}

/// An upstream request's byte that could split it: the last guard against header injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFault {
    /// CR, LF, space or tab in the target.
    Path,
    /// CR or LF in a header's name or value, or a colon in its name.
    Header,
}

impl RequestFault {
    pub fn message(self) -> &'static str {
        match self {
            RequestFault::Path => "invalid upstream path",
            RequestFault::Header => "invalid header",
        }
    }
}

/// The parts of an upstream request's head, in the order they are written.
pub struct RequestHead<'a> {
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub host: &'a [u8],
    /// The framing header line, CRLF included (empty for none).
    pub framing: &'a [u8],
    pub user_agent: &'a [u8],
}

/// An upstream request in one buffer: the request line, Host, `headers` as given, the framing
/// line, User-Agent, the blank line, then `body`.
pub fn upstream_request<'h>(
    rh: RequestHead<'_>,
    headers: impl IntoIterator<Item = (&'h [u8], &'h [u8])>,
    body: &[u8],
) -> Result<Vec<u8>, RequestFault> {
    if rh
        .target
        .iter()
        .any(|b| matches!(b, b'\r' | b'\n' | b' ' | b'\t'))
    {
        return Err(RequestFault::Path);
    }
    let mut out = Vec::with_capacity(512 + body.len());
    for part in [
        rh.method,
        b" ",
        rh.target,
        b" HTTP/1.1\r\nhost: ",
        rh.host,
        b"\r\n",
    ] {
        out.extend_from_slice(part);
    }
    for (name, value) in headers {
        let splits = |b: &u8| matches!(b, b'\r' | b'\n');
        if name.iter().any(|b| splits(b) || *b == b':') || value.iter().any(splits) {
            return Err(RequestFault::Header);
        }
        for part in [name, b": ", value, b"\r\n"] {
            out.extend_from_slice(part);
        }
    }
    for part in [
        rh.framing,
        b"user-agent: ",
        rh.user_agent,
        b"\r\n\r\n",
        body,
    ] {
        out.extend_from_slice(part);
    }
    Ok(out)
}

const DAYS: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// RFC 9110's IMF-fixdate of a Unix time (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn imf_fixdate(unix: u64) -> Vec<u8> {
    let days = unix / 86_400;
    let secs = unix % 86_400;
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (a Thursday).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = Vec::with_capacity(29);
    out.extend_from_slice(DAYS[((days + 3) % 7) as usize]);
    out.extend_from_slice(
        format!(
            ", {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
            std::str::from_utf8(MONTHS[(month - 1) as usize]).expect("ASCII"),
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        )
        .as_bytes(),
    );
    out
}

thread_local! {
    static DATE: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
}

/// The Date header value now, formatted once a second (a thread's own).
pub fn http_date() -> Vec<u8> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != now {
            *text = imf_fixdate(now);
            *at = now;
        }
        text.clone()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_upstream_request_in_one_buffer() {
        let rh = |target: &'static [u8]| RequestHead {
            method: b"POST",
            target,
            host: b"api.example:8080",
            framing: b"content-length: 2\r\n",
            user_agent: b"edgegw/0.1",
        };
        let headers: [(&[u8], &[u8]); 1] = [(b"authorization", b"Bearer k")];
        assert_eq!(
            upstream_request(rh(b"/v1/x?a=1"), headers, b"{}").unwrap(),
            b"POST /v1/x?a=1 HTTP/1.1\r\nhost: api.example:8080\r\nauthorization: Bearer k\r\n\
              content-length: 2\r\nuser-agent: edgegw/0.1\r\n\r\n{}"
                .to_vec()
        );
        for target in [&b"/a b"[..], b"/a\tb", b"/a\r\nx: y", b"/a\n"] {
            let got = upstream_request(rh(target), [], b"");
            assert_eq!(got, Err(RequestFault::Path));
        }
        let bad: [(&[u8], &[u8]); 4] = [
            (b"x", b"a\r\nb: c"),
            (b"x", b"a\nb"),
            (b"x:y", b"v"),
            (b"x\r", b"v"),
        ];
        for header in bad {
            assert_eq!(
                upstream_request(rh(b"/"), [header], b""),
                Err(RequestFault::Header)
            );
        }
        let fine: [(&[u8], &[u8]); 1] = [(b"x", b"tab\tand \x00 kept")];
        assert!(upstream_request(rh(b"/"), fine, b"").is_ok());
    }

    use super::*;

    fn cx(status: u16) -> Context<'static> {
        Context {
            status,
            reason: b"OK",
            http11: true,
            head_request: false,
            keep_alive: true,
        }
    }

    #[test]
    fn dates_are_imf_fixdates() {
        assert_eq!(imf_fixdate(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(imf_fixdate(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(imf_fixdate(1_798_761_599), b"Thu, 31 Dec 2026 23:59:59 GMT");
    }

    #[test]
    fn a_sized_answer_keeps_its_headers_in_order_and_gets_a_date() {
        let h = response_head(
            cx(200),
            [
                (&b"content-type"[..], &b"application/json"[..]),
                (b"Content-Length", b" 12 "),
                (b"Date", b"then"),
            ],
        )
        .unwrap();
        assert_eq!(
            h.bytes,
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length:  12 \r\n\
              Date: then\r\n\r\n"
        );
        assert_eq!(
            (h.framing, h.length, h.keep_alive),
            (Framing::Length, Some(12), true)
        );
    }

    #[test]
    fn the_server_frames_what_the_app_did_not_size() {
        let h = response_head(cx(200), []).unwrap();
        let text = String::from_utf8(h.bytes).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\ndate: "));
        assert!(text.ends_with(" GMT\r\ntransfer-encoding: chunked\r\n\r\n"));
        assert_eq!(h.framing, Framing::Chunked);
        let old = Context {
            http11: false,
            ..cx(200)
        };
        let h = response_head(old, []).unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        assert!(h.bytes.ends_with(b"connection: close\r\n\r\n"));
        for c in [
            cx(204),
            cx(304),
            Context {
                head_request: true,
                ..cx(200)
            },
        ] {
            let h = response_head(c, [(&b"content-length"[..], &b"5"[..])]).unwrap();
            assert_eq!(h.framing, Framing::None);
        }
    }

    #[test]
    fn a_close_token_ends_the_connection() {
        let h = response_head(cx(200), [(&b"Connection"[..], &b"keep-alive, Close"[..])]).unwrap();
        assert!(!h.keep_alive);
        assert!(h.bytes.ends_with(b"connection: close\r\n\r\n"));
        assert!(!has_close(b"closed"));
    }

    #[test]
    fn injected_or_server_owned_headers_are_refused() {
        for (name, value, fault) in [
            (&b"x"[..], &b"a\r\nb: c"[..], HeadFault::ForbiddenByte),
            (b"x", b"a\0", HeadFault::ForbiddenByte),
            (b"x\ny", b"a", HeadFault::ForbiddenByte),
            (b"x y", b"a", HeadFault::ForbiddenByte),
            (b"", b"a", HeadFault::ForbiddenByte),
            (b"x", b"a\x01", HeadFault::ForbiddenByte),
            (
                b"Transfer-Encoding",
                b"chunked",
                HeadFault::TransferEncoding,
            ),
            (b"content-length", b"-1", HeadFault::BadLength),
            (b"content-length", b"", HeadFault::BadLength),
            (
                b"content-length",
                b"99999999999999999999",
                HeadFault::BadLength,
            ),
        ] {
            assert_eq!(response_head(cx(200), [(name, value)]), Err(fault));
        }
    }
}
