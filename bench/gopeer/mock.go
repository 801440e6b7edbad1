package main

// The mock upstream: what edgegw/mock.py answers for the options the benchmarks use,
// byte for byte in shape (orjson's compact JSON, the same members in the same order):
//
//	POST /v1/chat/completions  chat.completion, or with "stream": true a role chunk, the
//	                           content chunks (one token each), a finish chunk, a usage chunk
//	                           when stream_options.include_usage is true ("usage": null on the
//	                           others then), data: [DONE]; chunked transfer encoding, one
//	                           chunk (one write) per event
//	POST /v1/embeddings        OpenAI's list of --embedding-dim float32 vectors, one per
//	                           input (a string or an array of them), as JSON floats or with
//	                           "encoding_format": "base64" little-endian float32 in base64;
//	                           the vectors are fixed pseudo-random values, made once
//	GET  /v1/models, GET /health
//	POST /v1/traces            an OTLP/HTTP collector that keeps nothing: the body read
//	                           whole, 200 with an empty ExportTraceServiceResponse
//
// max_tokens / max_completion_tokens cap --tokens (finish_reason "length" when they cut it).
// Pacing: the first content chunk 1/R s + --first-token-ms after the head, each later one
// 1/R s times uniform[1-J, 1+J] (seeded per stream) after the one before, against absolute
// times. --stamp puts "x_sent_ns":<CLOCK_MONOTONIC ns> first in every event's JSON, taken
// just before the write. Scripted models, as the Python mock: mock-slow-first-byte-<ms>
// (wait <ms> before the head instead of --latency-ms) and mock-error-<status>. Only n = 1.

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

var words = []string{"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
	"edge", "gateways", "stream", "tokens", "to", "clients"}

const modelsBody = `{"object":"list","data":[{"id":"mock-small","object":"model","created":1700000000,"owned_by":"edgegw-mock"},{"id":"mock-large","object":"model","created":1700000000,"owned_by":"edgegw-mock"}]}`

type mockConfig struct {
	latency    time.Duration
	tokens     int
	tokenRate  float64
	firstToken time.Duration
	jitter     float64
	stamp      bool
}

type mock struct {
	cfg    mockConfig
	served atomic.Int64
	// The embedding answered for input i: its JSON floats and its base64 float32.
	vectorsJSON [][]byte
	vectorsB64  []string
}

// OpenAI's bound on inputs a request; distinctVectors are made at start and reused in turn.
const (
	maxEmbeddingInputs = 2048
	distinctVectors    = 256
)

func (m *mock) makeVectors(dim int) {
	rng := rand.New(rand.NewPCG(7, 11))
	raw := make([]byte, 4*dim)
	for i := 0; i < distinctVectors; i++ {
		js := []byte{'['}
		for d := 0; d < dim; d++ {
			x := float32(rng.Float64()*0.2 - 0.1)
			if d > 0 {
				js = append(js, ',')
			}
			js = strconv.AppendFloat(js, float64(x), 'g', -1, 32)
			binary.LittleEndian.PutUint32(raw[4*d:], math.Float32bits(x))
		}
		m.vectorsJSON = append(m.vectorsJSON, append(js, ']'))
		m.vectorsB64 = append(m.vectorsB64, base64.StdEncoding.EncodeToString(raw))
	}
}

func (m *mock) embeddings(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		mockError(w, 405, "method_not_allowed", r.Method+" is not allowed on /v1/embeddings")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return
	}
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if json.Unmarshal(body, &req) != nil {
		mockError(w, 400, "invalid_request", "body is not a JSON object")
		return
	}
	var inputs []string
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		inputs = []string{one}
	} else if json.Unmarshal(req.Input, &inputs) != nil || len(inputs) == 0 {
		mockError(w, 400, "invalid_request", "input must be a string or an array of strings")
		return
	}
	if len(inputs) > maxEmbeddingInputs {
		mockError(w, 400, "invalid_request", "too many inputs")
		return
	}
	tokens := 0
	out := []byte(`{"object":"list","data":[`)
	for i, text := range inputs {
		tokens += len(strings.Fields(text))
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `,"embedding":`...)
		if req.EncodingFormat == "base64" {
			out = strconv.AppendQuote(out, m.vectorsB64[i%distinctVectors])
		} else {
			out = append(out, m.vectorsJSON[i%distinctVectors]...)
		}
		out = append(out, '}')
	}
	model, _ := json.Marshal(req.Model)
	out = append(out, `],"model":`...)
	out = append(out, model...)
	out = append(out, fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"total_tokens":%d}}`, tokens, tokens)...)
	m.served.Add(1)
	writeJSON(w, 200, out)
}

func runMock(args []string) error {
	fs := flag.NewFlagSet("mock", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "loopback address to listen on")
	port := fs.Int("port", 9000, "port")
	latencyMs := fs.Float64("latency-ms", 0, "delay before each completion head")
	tokens := fs.Int("tokens", 16, "completion tokens")
	rate := fs.Float64("token-rate", 0, "streams: tokens per second; 0 = unpaced")
	firstMs := fs.Float64("first-token-ms", 0, "streams: wait after the head before token 1")
	jitter := fs.Float64("jitter", 0, "streams: gap spread, 0..1")
	stamp := fs.Bool("stamp", false, `streams: "x_sent_ns" first in every event`)
	dim := fs.Int("embedding-dim", 1536, "/v1/embeddings: floats a vector")
	_ = fs.Parse(args)
	if err := loopback(*host); err != nil {
		return err
	}
	if *tokens < 0 || *dim < 1 || *rate < 0 || *jitter < 0 || *jitter > 1 || *latencyMs < 0 || *firstMs < 0 {
		return fmt.Errorf("mock: invalid option")
	}
	m := &mock{cfg: mockConfig{
		latency: time.Duration(*latencyMs * 1e6), tokens: *tokens, tokenRate: *rate,
		firstToken: time.Duration(*firstMs * 1e6), jitter: *jitter, stamp: *stamp,
	}}
	m.makeVectors(*dim)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", m.chat)
	mux.HandleFunc("/v1/embeddings", m.embeddings)
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			mockError(w, 405, "method_not_allowed", r.Method+" is not allowed on /v1/models")
			return
		}
		writeJSON(w, 200, []byte(modelsBody))
	})
	mux.HandleFunc("/v1/traces", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header()["Content-Type"] = []string{"application/x-protobuf"}
		w.WriteHeader(200)
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mockError(w, 404, "not_found", "unknown path "+r.URL.Path)
	})
	srv := &http.Server{Addr: addr(*host, *port), Handler: mux, IdleTimeout: 75 * time.Second}
	fmt.Printf("mock upstream listening on http://%s\n", srv.Addr)
	return srv.ListenAndServe()
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func mockError(w http.ResponseWriter, status int, code, message string) {
	kind := "invalid_request_error"
	if status >= 500 {
		kind = "server_error"
	} else if status == 429 {
		kind = "requests"
		w.Header().Set("Retry-After", "7")
	}
	msg, _ := json.Marshal("mock upstream: " + message)
	writeJSON(w, status, []byte(fmt.Sprintf(
		`{"error":{"message":%s,"type":"%s","param":null,"code":"%s"}}`, msg, kind, code)))
}

type chatRequest struct {
	Model               *string         `json:"model"`
	N                   *int            `json:"n"`
	Stream              *bool           `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	Messages            []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

func (m *mock) chat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		mockError(w, 405, "method_not_allowed", r.Method+" is not allowed on /v1/chat/completions")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return
	}
	var req chatRequest
	if json.Unmarshal(body, &req) != nil {
		mockError(w, 400, "invalid_json", "request body is not a valid JSON object")
		return
	}
	model := "mock-small"
	if req.Model != nil {
		model = *req.Model
	}
	if req.N != nil && *req.N != 1 {
		mockError(w, 400, "invalid_request", "the Go mock answers n = 1 only")
		return
	}
	delay := m.cfg.latency
	if s, ok := strings.CutPrefix(model, "mock-slow-first-byte-"); ok {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			mockError(w, 400, "invalid_request", "malformed mock script")
			return
		}
		delay = time.Duration(v) * time.Millisecond
	} else if s, ok := strings.CutPrefix(model, "mock-error-"); ok {
		v, err := strconv.Atoi(s)
		if err != nil || v < 400 || v > 599 {
			mockError(w, 400, "invalid_request", "mock-error-<status> wants 400..599")
			return
		}
		mockError(w, v, "mock_error", "scripted failure ("+model+")")
		return
	}
	tokens, cap := m.cfg.tokens, req.MaxTokens
	if req.MaxCompletionTokens != nil {
		cap = req.MaxCompletionTokens
	}
	finish := "stop"
	if cap != nil && *cap < tokens {
		tokens, finish = max(*cap, 0), "length"
	}
	prompt := 0
	for _, msg := range req.Messages {
		var text string
		if json.Unmarshal(msg.Content, &text) == nil {
			prompt += len(strings.Fields(text))
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(msg.Content, &parts) == nil {
			for _, p := range parts {
				prompt += len(strings.Fields(p.Text))
			}
		}
	}
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`,
		prompt, tokens, prompt+tokens)
	id := m.served.Add(1)
	modelJSON, _ := json.Marshal(model)
	stream := req.Stream != nil && *req.Stream
	object := "chat.completion"
	if stream {
		object = "chat.completion.chunk"
	}
	head := fmt.Sprintf(`"id":"chatcmpl-mock%d","object":"%s","created":%d,"model":%s`,
		id, object, time.Now().Unix(), modelJSON)
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if !stream {
		writeJSON(w, 200, []byte(`{`+head+`,"choices":[{"index":0,"message":{"role":"assistant","content":"`+
			text(0, tokens)+`","refusal":null},"logprobs":null,"finish_reason":"`+finish+`"}],"usage":`+usage+`}`))
		return
	}
	var opts struct {
		IncludeUsage *bool `json:"include_usage"`
	}
	includeUsage := len(req.StreamOptions) > 0 && json.Unmarshal(req.StreamOptions, &opts) == nil &&
		opts.IncludeUsage != nil && *opts.IncludeUsage
	m.stream(w, r, head, tokens, finish, usage, includeUsage, uint64(id))
}

// text is tokens start..stop joined by spaces, with a leading space unless start is 0.
func text(start, stop int) string {
	var b strings.Builder
	for i := start; i < stop; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[i%len(words)])
	}
	return b.String()
}

func (m *mock) stream(w http.ResponseWriter, r *http.Request, head string, tokens int,
	finish, usage string, includeUsage bool, seed uint64) {
	h := w.Header()
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	w.WriteHeader(200)
	flusher := w.(http.Flusher)
	tail := "}\n\n"
	if includeUsage {
		tail = `,"usage":null}` + "\n\n"
	}
	buf := make([]byte, 0, 512)
	send := func(members string) bool {
		buf = append(buf[:0], "data: {"...)
		if m.cfg.stamp {
			buf = append(buf, `"x_sent_ns":`...)
			buf = strconv.AppendInt(buf, nanotime(), 10)
			buf = append(buf, ',')
		}
		buf = append(buf, members...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	due := nanotime()
	if !send(head + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]` + tail) {
		return
	}
	var rng *rand.Rand
	if m.cfg.jitter > 0 {
		rng = rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	}
	step := 0.0
	if m.cfg.tokenRate > 0 {
		step = 1e9 / m.cfg.tokenRate
	}
	done := r.Context().Done()
	for i := 0; i < tokens; i++ {
		d := step
		if i == 0 {
			d += float64(m.cfg.firstToken)
		} else if rng != nil {
			d *= 1 + m.cfg.jitter*(2*rng.Float64()-1)
		}
		if d > 0 {
			due += int64(d)
			if wait := due - nanotime(); wait > 0 {
				t := time.NewTimer(time.Duration(wait))
				select {
				case <-t.C:
				case <-done:
					t.Stop()
					return
				}
			}
		}
		if !send(head + `,"choices":[{"index":0,"delta":{"content":"` + text(i, i+1)[0:] + `"},"logprobs":null,"finish_reason":null}]` + tail) {
			return
		}
	}
	if !send(head + `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"` + finish + `"}]` + tail) {
		return
	}
	if includeUsage && !send(head+`,"choices":[],"usage":`+usage+"}\n\n") {
		return
	}
	if _, err := w.Write([]byte("data: [DONE]\n\n")); err == nil {
		flusher.Flush()
	}
}
