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
