// Command gopeer is edgegw's Go benchmark peer: an OpenAI-compatible mock upstream, a plain
// Go reverse proxy (the floor a Go gateway starts from) and two load generators (open-loop
// paced streams, closed-loop keep-alive requests). Standard library only; loopback only.
//
//	gopeer mock    --port P [--latency-ms L] [--tokens N] [--token-rate R] [--first-token-ms F] [--jitter J] [--stamp]
//	gopeer proxy   --port P --upstream http://127.0.0.1:Q
//	gopeer streams --port P --body-file F --streams C --seconds S --warmup-s W --stream-s L [--nominal-gap-ms G]
//	gopeer load    --port P --body-file F --connections N --seconds S [--stream] [--tls-ca PEM] [--header H]
//
// The generators print "phase run" when the measured phase begins, "phase done" when it
// ends, then one JSON object.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sort"
	_ "unsafe" // go:linkname
)

// nanotime is the runtime's CLOCK_MONOTONIC reading (vDSO on Linux): the clock of Python's
// time.perf_counter_ns(), shared by every process on the machine.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "mock":
		err = runMock(os.Args[2:])
	case "proxy":
		err = runProxy(os.Args[2:])
	case "streams":
		err = runStreams(os.Args[2:])
	case "load":
		err = runLoad(os.Args[2:])
	case "now":
		fmt.Println(nanotime())
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gopeer:", err)
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: gopeer mock|proxy|streams|load|now [flags] (see -h of each)")
	os.Exit(2)
}

// loopback refuses anything but a loopback IP address.
func loopback(host string) error {
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("refusing %q: loopback IP addresses only", host)
	}
	return nil
}

func addr(host string, port int) string {
	return net.JoinHostPort(host, fmt.Sprint(port))
}

// samples holds durations in nanoseconds; percentiles by nearest rank.
type samples []int64

func (s samples) sorted() samples {
	out := append(samples(nil), s...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func pct(sorted samples, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(q/100*float64(len(sorted))+0.999999) - 1
	if rank < 0 {
		rank = 0
	}
	if rank >= len(sorted) {
		rank = len(sorted) - 1
	}
	return float64(sorted[rank])
}

func ms(ns float64) float64 {
	return float64(int64(ns/1e3+0.5)) / 1e3 // whole microseconds, in ms
}

// summary in milliseconds of the given percentiles (q: 0..100; 100 = max); nil when empty.
func summary(s samples, names []string, qs []float64) map[string]any {
	if len(s) == 0 {
		return nil
	}
	sorted := s.sorted()
	out := map[string]any{"count": len(s)}
	for i, q := range qs {
		out[names[i]] = ms(pct(sorted, q))
	}
	return out
}

func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}
