"""edgegw's own HTTP/1.1 connection layer for plain (non-TLS) HTTP/1.1: Trio + h11, one
task per connection that runs the ASGI app for each of its requests in that task.

    limits.py      every bound and deadline, with its reason and nginx/Envoy counterpart
    screen.py      screen_head(): RFC 9112 applied strictly before anything parses a head
    wire.py        one socket: non-blocking reads and writes, the write stall, lingering close
    cycle.py       one request: its ASGI scope, receive() and send()
    connection.py  one connection: reading heads, the keep-alive loop; the shared Server state
    server.py      listening sockets (host:port, fd://N), the accept loop, the cap, the drain

Hypercorn stays available (EDGEGW_SERVER=hypercorn) for TLS and HTTP/2, which this layer
does not do: `Upgrade: h2c` is ignored (answered over HTTP/1.1) and the HTTP/2
prior-knowledge preface is refused with 400.
"""

# Measured with `python -m bench.adapter` (2026-12-01, 22:07-22:38 UTC; 2-vCPU AMD EPYC KVM
# guest, CPython 3.11.7, trio 0.35.0, h11 0.16.0, hypercorn 0.18.0): the server pinned to core
# 1, the mock and the load generator on core 0, 32 keep-alive connections, interleaved rounds
# (2 x 5 s, then twice 3 x 6 s), medians. The machine was shared: other work used 1.1-1.6 of
# its 2 cores during the cells, so req/s moved a lot; CPU per request is the steadier figure.
#
#                        Hypercorn-Trio            edgegw.http1              ratio
#   bare app             278-578 req/s             924-1,813 req/s           2.9-3.4x req/s
#                        1,282-1,858 µs CPU/req    314-395 µs CPU/req        4.1-4.7x less CPU
#   edgegw proxying      94-402 req/s              250-933 req/s             1.7-2.7x req/s
#                        1,848-2,804 µs CPU/req    746-1,082 µs CPU/req      2.4-3.3x less CPU
#
# Targets (the issue): the bare app at >= 2x Hypercorn-Trio's req/s per core, edgegw proxying
# at >= 1.5x: both met in every run. Where the layer's time went (cProfile, bare app): h11's
# response side was about a fifth of it, hence the hand framing in cycle.py; h11's request
# parsing is now the largest single part.
