"""edgegw's own HTTP/1.1 connection layer, plain and over TLS: Trio and the Rust core, one task per
connection that runs the ASGI app for each of its requests in that task.

    limits.py      every bound and deadline, with its reason and nginx/Envoy counterpart
    wire.py        one socket: non-blocking reads and writes, the write stall, lingering close
    tls.py         the same over TLS: an SSLObject on memory BIOs, the handshake
    cycle.py       one request: its ASGI scope, receive() and send()
    connection.py  one connection: the handshake, reading and screening heads (the Rust
                   core's screen, RFC 9112 applied strictly), the keep-alive loop; the
                   shared Server state
    server.py      listening sockets (host:port, fd://N), the accept loop, the cap, the drain

HTTP/2 is not spoken here: `Upgrade: h2c` is ignored (answered over HTTP/1.1), the HTTP/2
prior-knowledge preface is refused with 400, and TLS offers only http/1.1 by ALPN
(Hypercorn serves HTTP/2 when SERVER_HTTP2_ENABLED asks for it). Its cost against
Hypercorn's Trio worker: bench/README.md, history.
"""
