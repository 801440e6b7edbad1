package main

// A lean HTTP/1.1 client for the generators: one pre-encoded request, written as is on a
// keep-alive connection; the response framed by hand (Content-Length, chunked or to EOF)
// and, for SSE, split into events on blank lines. Every event is timed with the CLOCK_MONOTONIC
// reading taken when the socket read that completed it returned.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

type timedConn struct {
	net.Conn
	last int64 // nanotime when the latest Read returned
}

func (c *timedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.last = nanotime()
	return n, err
}

type conn struct {
	tc *timedConn
	r  *bufio.Reader
}

// clientTLS, when set (load --tls-ca), makes every connection HTTPS (HTTP/1.1 by ALPN).
var clientTLS *tls.Config

// useTLS trusts the CA certificates in the PEM file caFile for every later dial.
func useTLS(caFile string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("no certificate in %s", caFile)
	}
	clientTLS = &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	return nil
}

func dial(address string, timeout time.Duration) (*conn, error) {
	c, err := net.DialTimeout("tcp", address, timeout)
	if err != nil {
		return nil, err
	}
	if clientTLS != nil {
		tc := tls.Client(c, clientTLS)
		_ = tc.SetDeadline(time.Now().Add(timeout))
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			return nil, err
		}
		_ = tc.SetDeadline(time.Time{})
		c = tc
	}
	tc := &timedConn{Conn: c}
	return &conn{tc: tc, r: bufio.NewReaderSize(tc, 64<<10)}, nil
}

func (c *conn) close() { _ = c.tc.Close() }

// event is what an SSE consumer is told about one event.
type event struct {
	at      int64 // arrival (nanotime)
	content bool  // carries generated text
	stamp   int64 // x_sent_ns, -1 when absent
	done    bool  // data: [DONE]
	err     bool  // an error event
}

// errKind names a failed exchange, as edgegw's load generator does.
type errKind string

func (e errKind) Error() string { return string(e) }

const (
	errClosed   errKind = "closed"
	errProtocol errKind = "protocol"
	errNotSSE   errKind = "not_sse"
	errSSE      errKind = "sse_error"
	errCut      errKind = "stream_incomplete"
)

func kindOf(err error) string {
	var k errKind
	if errors.As(err, &k) {
		return string(k)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "timeout"
	}
	return string(errClosed)
}

type response struct {
	status   int
	reusable bool
	events   int
	sawDone  bool
}

var (
	prefixContent = []byte(`"content":"`)
	prefixText    = []byte(`"text":"`)
	prefixStamp   = []byte(`{"x_sent_ns":`)
	prefixError   = []byte(`{"error"`)
	dataDone      = []byte("[DONE]")
)

// exchange writes req and reads the whole response; onEvent (streams) gets every SSE event.
func (c *conn) exchange(req []byte, onEvent func(event)) (response, error) {
	var resp response
	if _, err := c.tc.Write(req); err != nil {
		return resp, errClosed
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return resp, errClosed
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return resp, errProtocol
	}
	resp.status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return resp, errProtocol
	}
	length, chunked, keep, sse := int64(-1), false, line[7] == '1', false
	for {
		line, err = c.r.ReadSlice('\n')
		if err != nil {
			return resp, errClosed
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return resp, errProtocol
		}
		name, value := bytes.ToLower(line[:colon]), bytes.TrimSpace(line[colon+1:])
		switch string(name) {
		case "content-length":
			length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil {
				return resp, errProtocol
			}
		case "transfer-encoding":
			chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case "connection":
			keep = !bytes.EqualFold(value, []byte("close"))
		case "content-type":
			sse = bytes.HasPrefix(bytes.ToLower(value), []byte("text/event-stream"))
		}
	}
	ok := resp.status >= 200 && resp.status < 300
	if onEvent != nil && ok && !sse {
		return resp, errNotSSE
	}
	split := &splitter{}
	body := func(p []byte) error {
		if onEvent == nil || !ok {
			return nil
		}
		return split.feed(p, c.tc.last, func(e event) {
			resp.events++
			if e.done {
				resp.sawDone = true
			}
			onEvent(e)
		})
	}
	switch {
	case chunked:
		if err := c.readChunked(body); err != nil {
			return resp, err
		}
	case length >= 0:
		if err := c.readN(length, body); err != nil {
			return resp, err
		}
	default:
		keep = false
		buf := make([]byte, 32<<10)
		for {
			n, err := c.r.Read(buf)
			if n > 0 {
				if e := body(buf[:n]); e != nil {
					return resp, e
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return resp, errClosed
			}
		}
	}
	if onEvent != nil && ok && (!resp.sawDone || len(split.pending) > 0) {
		return resp, errCut
	}
	resp.reusable = keep
	return resp, nil
}

func (c *conn) readN(n int64, body func([]byte) error) error {
	for n > 0 {
		want := int(min(n, int64(c.r.Size())))
		p, err := c.r.Peek(want)
		if err != nil {
			return errClosed
		}
		if e := body(p); e != nil {
			return e
		}
		_, _ = c.r.Discard(want)
		n -= int64(want)
	}
	return nil
}

func (c *conn) readChunked(body func([]byte) error) error {
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return errClosed
		}
		size := bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(size, ';'); i >= 0 {
			size = size[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || n < 0 {
			return errProtocol
		}
		if n == 0 {
			for { // trailers, then the blank line
				line, err = c.r.ReadSlice('\n')
				if err != nil {
					return errClosed
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if err := c.readN(n, body); err != nil {
			return err
		}
		crlf, err := c.r.ReadSlice('\n')
		if err != nil || len(bytes.TrimRight(crlf, "\r\n")) != 0 {
			return errProtocol
		}
	}
}

// splitter cuts an SSE body into events at blank lines ("\n\n" or "\r\n\r\n").
type splitter struct{ pending []byte }

func (s *splitter) feed(p []byte, at int64, emit func(event)) error {
	s.pending = append(s.pending, p...)
	off := 0
	defer func() { s.pending = s.pending[:copy(s.pending, s.pending[off:])] }()
	for {
		rest := s.pending[off:]
		i := bytes.Index(rest, []byte("\n\n"))
		j := bytes.Index(rest, []byte("\r\n\r\n"))
		end, skip := i, 2
		if j >= 0 && (i < 0 || j < i) {
			end, skip = j, 4
		}
		if end < 0 {
			return nil
		}
		block := rest[:end]
		off += end + skip
		e := event{at: at, stamp: -1}
		data := false
		for len(block) > 0 {
			line := block
			if k := bytes.IndexByte(block, '\n'); k >= 0 {
				line, block = block[:k], block[k+1:]
			} else {
				block = nil
			}
			line = bytes.TrimRight(line, "\r")
			if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = true
				v = bytes.TrimPrefix(v, []byte(" "))
				switch {
				case bytes.Equal(v, dataDone):
					e.done = true
				case bytes.HasPrefix(v, prefixError):
					e.err = true
				default:
					e.content = hasText(v, prefixContent) || hasText(v, prefixText)
					if digits, ok := bytes.CutPrefix(v, prefixStamp); ok {
						k := 0
						for k < len(digits) && digits[k] >= '0' && digits[k] <= '9' {
							k++
						}
						if n, err := strconv.ParseInt(string(digits[:k]), 10, 64); err == nil {
							e.stamp = n
						}
					}
				}
			} else if bytes.Equal(line, []byte("event: error")) || bytes.Equal(line, []byte("event:error")) {
				e.err = true
			}
		}
		if data || e.err {
			emit(e)
			if e.err {
				return errSSE
			}
		}
	}
}

// hasText: `"content":"x` with a non-empty string (the role chunk's "" does not count).
func hasText(v, prefix []byte) bool {
	i := bytes.Index(v, prefix)
	return i >= 0 && i+len(prefix) < len(v) && v[i+len(prefix)] != '"'
}

func readBody(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(b, "\r\n"), nil
}

func encodeRequest(host string, port int, path string, body []byte, extra ...string) []byte {
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n",
		path, addr(host, port))
	for _, h := range extra {
		head += h + "\r\n"
	}
	head += fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))
	return append([]byte(head), body...)
}

// headerFlags: a repeatable --header, each `Name: value` (no CR or LF).
type headerFlags []string

func (h *headerFlags) String() string { return strings.Join(*h, ", ") }

func (h *headerFlags) Set(v string) error {
	name, _, ok := strings.Cut(v, ":")
	if !ok || name == "" || strings.ContainsAny(v, "\r\n") {
		return fmt.Errorf("--header %q: want `Name: value`", v)
	}
	*h = append(*h, v)
	return nil
}
