package main

// load: a closed loop of keep-alive connections, each sending the request again as soon as
// the answer is whole. Requests started after --warmup-s and ended before the end of the
// measured phase are counted; latency runs from the send. With --stream the answers must be
// SSE streams ending in [DONE] ("streams/s" counts them).

import (
	"flag"
	"fmt"
	"math"
	"sync"
	"time"
)

func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "loopback address of the target")
	port := fs.Int("port", 0, "target port")
	path := fs.String("path", "/v1/chat/completions", "request path")
	bodyFile := fs.String("body-file", "", "the JSON request body")
	connections := fs.Int("connections", 64, "connections, one request in flight on each")
	seconds := fs.Float64("seconds", 5, "measured seconds")
	warmup := fs.Float64("warmup-s", 1, "seconds before the measured phase (not counted)")
	stream := fs.Bool("stream", false, "expect SSE streams")
	timeout := fs.Float64("timeout-s", 30, "per request")
	var extra headerFlags
	fs.Var(&extra, "header", "an extra request header, `Name: value` (repeatable)")
	tlsCA := fs.String("tls-ca", "", "HTTPS, trusting the CA certificates of this PEM file")
	_ = fs.Parse(args)
	if *tlsCA != "" {
		if err := useTLS(*tlsCA); err != nil {
			return err
		}
	}
	if err := loopback(*host); err != nil {
		return err
	}
	if *connections < 1 || *seconds <= 0 || *port <= 0 {
		return fmt.Errorf("load: --port, --connections and --seconds must be positive")
	}
	body, err := readBody(*bodyFile)
	if err != nil {
		return err
	}
	req := encodeRequest(*host, *port, *path, body, extra...)
	address := addr(*host, *port)
	start := nanotime()
	measure := start + int64(*warmup*1e9)
	end := measure + int64(*seconds*1e9)
	timeoutNs := time.Duration(*timeout * 1e9)
	var mu sync.Mutex
	var latency samples
	okCount, events := 0, 0
	errs := map[string]int{}
	var wg sync.WaitGroup
	conns := make([]*conn, *connections)
	worker := func(i int) {
		defer wg.Done()
		var lat samples
		ok, ev := 0, 0
		myErrs := map[string]int{}
		defer func() {
			mu.Lock()
			latency = append(latency, lat...)
			okCount += ok
			events += ev
			for k, v := range myErrs {
				errs[k] += v
			}
			mu.Unlock()
		}()
		for nanotime() < end {
			if conns[i] == nil {
				c, err := dial(address, 5*time.Second)
				if err != nil {
					if nanotime() >= measure {
						myErrs["connect"]++
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				conns[i] = c
			}
			c := conns[i]
			t0 := nanotime()
			_ = c.tc.SetDeadline(time.Now().Add(timeoutNs))
			n := 0
			var onEvent func(event)
			if *stream {
				onEvent = func(event) { n++ }
			}
			resp, err := c.exchange(req, onEvent)
			t1 := nanotime()
			if err == nil && (resp.status < 200 || resp.status >= 300) {
				err = errKind(fmt.Sprintf("http_%d", resp.status))
			}
			if err != nil || !resp.reusable {
				c.close()
				conns[i] = nil
			}
			if t0 < measure || t1 >= end {
				continue
			}
			if err != nil {
				myErrs[kindOf(err)]++
				continue
			}
			ok++
			ev += n
			lat = append(lat, t1-t0)
		}
	}
	wg.Add(*connections)
	for i := range *connections {
		go worker(i)
	}
	go func() {
		time.Sleep(time.Duration(measure - nanotime()))
		fmt.Println("phase run")
	}()
	time.Sleep(time.Duration(end - nanotime()))
	fmt.Println("phase done")
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(timeoutNs + 2*time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range conns {
		if c != nil {
			c.close()
		}
	}
	errCount := 0
	for _, v := range errs {
		errCount += v
	}
	out := map[string]any{
		"connections":    *connections,
		"seconds":        *seconds,
		"ok":             okCount,
		"errors":         errCount,
		"errors_by_kind": errs,
		"rps":            math.Round(float64(okCount)/(float64(end-measure)/1e9)*10) / 10,
		"latency_ms":     summary(latency, []string{"p50", "p99", "p999", "max"}, []float64{50, 99, 99.9, 100}),
	}
	if *stream {
		out["streams_per_s"] = out["rps"]
		out["events"] = events
		out["events_per_stream"] = 0.0
		if okCount > 0 {
			out["events_per_stream"] = math.Round(float64(events)/float64(okCount)*100) / 100
		}
		out["events_per_s"] = math.Round(float64(events) / *seconds)
	}
	return printJSON(out)
}
