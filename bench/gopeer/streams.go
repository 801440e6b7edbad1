package main

// streams: an open-loop generator of paced streams. Arrivals come at C / L per second (L the
// nominal stream length, --stream-s), so about C streams are in flight once the warm-up (one
// stream length) is over; arrivals go on until the end of the measured phase, then every
// stream still running is cut (connections closed) and the run ends. Measured: the streams
// *started* after the warm-up, and of them only what arrived before the measured phase ended.
//
// Per measured stream: TTFT (first content event minus the stream's due time), the relay
// lag of every content event (arrival minus its x_sent_ns stamp) and the added gap between
// consecutive content events (arrival gap minus stamp gap; minus --nominal-gap-ms where the
// target dropped the stamps: "gap_source"). In-flight (sent, not yet ended) is sampled every
// 100 ms over the measured phase. At most C + 64 connections are ever open.

import (
	"flag"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

const extraConnections = 64

type streamStats struct {
	mu           sync.Mutex
	added, lag   samples
	ttft         samples
	ok, cut      int
	errors       map[string]int
	warmupErrors map[string]int
	stamped      int
	unstamped    int
}

type slots struct {
	idle  chan *conn
	open  atomic.Int64
	limit int64
	addr  string
}

// get an idle connection, or a new one under the limit, or wait for one until deadline.
func (s *slots) get(deadline int64, stop <-chan struct{}) (*conn, string) {
	select {
	case c := <-s.idle:
		return c, ""
	default:
	}
	for {
		n := s.open.Load()
		if n >= s.limit {
			break
		}
		if s.open.CompareAndSwap(n, n+1) {
			c, err := dial(s.addr, 5*time.Second)
			if err != nil {
				s.open.Add(-1)
				return nil, "connect"
			}
			return c, ""
		}
	}
	t := time.NewTimer(time.Duration(deadline - nanotime()))
	defer t.Stop()
	select {
	case c := <-s.idle:
		return c, ""
	case <-t.C:
		return nil, "timeout"
	case <-stop:
		return nil, "stopped"
	}
}

func (s *slots) put(c *conn) {
	select {
	case s.idle <- c:
	default:
		s.drop(c)
	}
}

func (s *slots) drop(c *conn) {
	c.close()
	s.open.Add(-1)
}

func runStreams(args []string) error {
	fs := flag.NewFlagSet("streams", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "loopback address of the target")
	port := fs.Int("port", 0, "target port")
	path := fs.String("path", "/v1/chat/completions", "request path")
	bodyFile := fs.String("body-file", "", "the JSON request body (a streaming request)")
	c := fs.Int("streams", 50, "streams in flight (C)")
	seconds := fs.Float64("seconds", 10, "measured seconds")
	warmup := fs.Float64("warmup-s", 0, "warm-up seconds (default: one stream length)")
	streamS := fs.Float64("stream-s", 0, "nominal stream length in seconds (required)")
	nominalGap := fs.Float64("nominal-gap-ms", 0, "the mock's nominal token gap, for unstamped events")
	timeout := fs.Float64("timeout-s", 0, "per stream, from its due time (default 3 L + 10)")
	_ = fs.Parse(args)
	if err := loopback(*host); err != nil {
		return err
	}
	if *streamS <= 0 || *c < 1 || *seconds <= 0 || *port <= 0 {
		return fmt.Errorf("streams: --port, --streams, --seconds and --stream-s must be positive")
	}
	if *warmup <= 0 {
		*warmup = *streamS
	}
	if *timeout <= 0 {
		*timeout = 3**streamS + 10
	}
	body, err := readBody(*bodyFile)
	if err != nil {
		return err
	}
	req := encodeRequest(*host, *port, *path, body)
	limit := int64(*c + extraConnections)
	pool := &slots{idle: make(chan *conn, limit), limit: limit, addr: addr(*host, *port)}
	st := &streamStats{errors: map[string]int{}, warmupErrors: map[string]int{}}
	rate := float64(*c) / *streamS
	start := nanotime()
	measure := start + int64(*warmup*1e9)
	end := measure + int64(*seconds*1e9)
	timeoutNs := int64(*timeout * 1e9)
	gapNs := int64(*nominalGap * 1e6)
	stop := make(chan struct{})
	var inFlight atomic.Int64
	var eventsTotal, eventsRun, started, measuredStarted atomic.Int64
	var live sync.Map // *conn -> struct{}: closed at the end to cut what still runs
	var wg sync.WaitGroup

	fail := func(kind string) {
		now := nanotime()
		if now >= end {
			return
		}
		st.mu.Lock()
		if now >= measure {
			st.errors[kind]++
		} else {
			st.warmupErrors[kind]++
		}
		st.mu.Unlock()
	}
	one := func(due int64) {
		defer wg.Done()
		measured := due >= measure
		cn, kind := pool.get(due+timeoutNs, stop)
		if cn == nil {
			if kind != "stopped" {
				fail(kind)
			}
			return
		}
		live.Store(cn, struct{}{})
		inFlight.Add(1)
		var added, lag samples
		var first, prevAt, prevStamp int64 = -1, -1, -1
		stamped, unstamped := 0, 0
		_ = cn.tc.SetDeadline(time.Now().Add(time.Duration(due + timeoutNs - nanotime())))
		resp, err := cn.exchange(req, func(e event) {
			eventsTotal.Add(1)
			if e.at >= measure && e.at < end {
				eventsRun.Add(1)
			}
			if !measured || !e.content || e.at >= end {
				return
			}
			if first < 0 {
				first = e.at
			}
			if e.stamp >= 0 {
				stamped++
				lag = append(lag, e.at-e.stamp)
			} else {
				unstamped++
			}
			if prevAt >= 0 {
				made := gapNs
				if e.stamp >= 0 && prevStamp >= 0 {
					made = e.stamp - prevStamp
				}
				added = append(added, e.at-prevAt-made)
			}
			prevAt, prevStamp = e.at, e.stamp
		})
		inFlight.Add(-1)
		live.Delete(cn)
		now := nanotime()
		if err == nil && (resp.status < 200 || resp.status >= 300) {
			err = errKind(fmt.Sprintf("http_%d", resp.status))
		}
		if err == nil && resp.reusable && now < end {
			_ = cn.tc.SetDeadline(time.Time{})
			pool.put(cn)
		} else {
			pool.drop(cn)
		}
		st.mu.Lock()
		if measured {
			st.added = append(st.added, added...)
			st.lag = append(st.lag, lag...)
			st.stamped += stamped
			st.unstamped += unstamped
			if first >= 0 && first < end {
				st.ttft = append(st.ttft, first-due)
			}
		}
		st.mu.Unlock()
		switch {
		case now >= end:
			if measured {
				st.mu.Lock()
				st.cut++
				st.mu.Unlock()
			}
		case err != nil:
			fail(kindOf(err))
		case measured:
			st.mu.Lock()
			st.ok++
			st.mu.Unlock()
		}
	}

	var flight samples
	sampler := make(chan struct{})
	go func() {
		defer close(sampler)
		time.Sleep(time.Duration(measure - nanotime()))
		fmt.Println("phase run")
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if nanotime() >= end {
				return
			}
			flight = append(flight, inFlight.Load())
		}
	}()
	for i := 0; ; i++ {
		due := start + int64(float64(i)*1e9/rate)
		if due >= end {
			break
		}
		if wait := due - nanotime(); wait > 0 {
			time.Sleep(time.Duration(wait))
		}
		started.Add(1)
		if due >= measure {
			measuredStarted.Add(1)
		}
		wg.Add(1)
		go one(due)
	}
	if wait := end - nanotime(); wait > 0 {
		time.Sleep(time.Duration(wait))
	}
	<-sampler
	fmt.Println("phase done")
	close(stop)
	live.Range(func(k, _ any) bool { k.(*conn).close(); return true })
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Duration(min(2e9, timeoutNs))):
	}
	for {
		select {
		case cn := <-pool.idle:
			cn.close()
			continue
		default:
		}
		break
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	source := "stamps"
	switch {
	case st.unstamped > 0 && st.stamped == 0:
		source = "nominal"
	case st.unstamped > 0:
		source = "mixed"
	}
	fmin, fmax, fsum := int64(math.MaxInt64), int64(0), int64(0)
	for _, f := range flight {
		fmin, fmax, fsum = min(fmin, f), max(fmax, f), fsum+f
	}
	inflight := map[string]any{"mean": 0.0, "min": 0, "max": 0, "samples": len(flight)}
	if len(flight) > 0 {
		inflight = map[string]any{"mean": math.Round(float64(fsum)/float64(len(flight))*10) / 10,
			"min": fmin, "max": fmax, "samples": len(flight)}
	}
	errs := 0
	for _, n := range st.errors {
		errs += n
	}
	out := map[string]any{
		"streams_target":    *c,
		"arrivals_per_s":    math.Round(rate*1000) / 1000,
		"warmup_s":          *warmup,
		"seconds":           *seconds,
		"started":           started.Load(),
		"measured_started":  measuredStarted.Load(),
		"in_flight":         inflight,
		"requests":          map[string]any{"ok": st.ok, "errors": errs, "cut_at_end": st.cut},
		"errors_by_kind":    st.errors,
		"warmup_errors":     st.warmupErrors,
		"events_total":      eventsTotal.Load(),
		"events_run":        eventsRun.Load(),
		"events":            st.stamped + st.unstamped,
		"added_gap_ms":      summary(st.added, []string{"p50", "p90", "p99", "max"}, []float64{50, 90, 99, 100}),
		"relay_lag_ms":      summary(st.lag, []string{"p50", "p99"}, []float64{50, 99}),
		"ttft_ms":           summary(st.ttft, []string{"p50", "p99"}, []float64{50, 99}),
		"gap_source":        source,
		"connections_limit": limit,
	}
	if source != "stamps" {
		out["gap_note"] = fmt.Sprintf("%d of %d content events had no x_sent_ns stamp: their gaps are "+
			"taken against the nominal %g ms", st.unstamped, st.stamped+st.unstamped, *nominalGap)
	}
	return printJSON(out)
}
