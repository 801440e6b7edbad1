package main

// The Go reverse proxy floor: net/http/httputil.ReverseProxy in front of one upstream, every
// write flushed (FlushInterval -1, so streams pass event by event), keep-alive upstream
// connections with a large idle pool. No parsing, no rewriting of bodies: what a Go gateway
// costs before it does anything of its own.
//
// The request body is read whole before it goes upstream (as any gateway that looks at it
// does). Streamed straight through instead, the transport's body writer can still be waiting
// for the body's end when the answer's head is flushed to the client, which closes the body
// (net/http, HTTP/1.x): the writer fails and the transport closes the upstream connection in
// the middle of the answer (seen here on about one stream in 60).

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func runProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "loopback address to listen on")
	port := fs.Int("port", 9100, "port")
	upstream := fs.String("upstream", "", "upstream base URL, http://127.0.0.1:Q")
	idle := fs.Int("idle-per-host", 8192, "idle upstream connections kept")
	_ = fs.Parse(args)
	if err := loopback(*host); err != nil {
		return err
	}
	target, err := url.Parse(*upstream)
	if err != nil || target.Scheme != "http" {
		return fmt.Errorf("proxy: --upstream must be an http:// URL")
	}
	if err := loopback(target.Hostname()); err != nil {
		return err
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // no overall limit
		MaxIdleConnsPerHost: *idle,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		FlushInterval: -1,
		Transport:     transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			fmt.Fprintf(os.Stderr, "DEBUG err=%v cause=%v\n", err, context.Cause(r.Context()))
			w.WriteHeader(http.StatusBadGateway)
		},
		ModifyResponse: func(res *http.Response) error {
			go func() {
				<-res.Request.Context().Done()
				fmt.Fprintf(os.Stderr, "DEBUG ctx done cause=%v\n", context.Cause(res.Request.Context()))
			}()
			return nil
		},
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		rp.ServeHTTP(w, r)
	})
	srv := &http.Server{Addr: addr(*host, *port), Handler: handler, IdleTimeout: 75 * time.Second}
	fmt.Printf("go reverse proxy listening on http://%s -> %s\n", srv.Addr, target)
	return srv.ListenAndServe()
}
