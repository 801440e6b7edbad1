"""Every bound the HTTP/1.1 connection layer puts on what a client can make the process
hold, in one table: what it bounds, why, and its nginx / Envoy counterpart. Every row
applies to both listeners, plain HTTP and HTTPS (edgegw.http1.tls).

`ConnectionLimits` carries the values one server runs with (built from `Settings`, whose fields
have the same names and take their defaults from here); `LIMIT_TABLE` is the documentation
and the environment variable of each, and drives both the settings parser and the README
table ("Limits and timeouts"). The rows marked fixed are constants, not settings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    # A new connection must deliver its whole request head this long after it was
    # accepted; on a kept-alive connection, this long after the head's first byte.
    header_timeout_s: float = 10.0
    # Longest silence while a request body arrives.
    body_idle_timeout_s: float = 30.0
    # The whole request body, from the end of its head.
    body_timeout_s: float = 120.0
    # How long an idle kept-alive connection waits for its next request.
    keepalive_timeout_s: float = 75.0
    # A response write that makes no progress for this long ends the connection and
    # cancels the request (and so its upstream exchange).
    write_stall_timeout_s: float = 60.0
    # Request line + header fields + the blank line, in bytes, enforced exactly.
    max_head_bytes: int = 64 * 1024
    # Client connections one process holds; idle kept-alive ones are closed first near it.
    max_connections: int = 10_000


DEFAULT_LIMITS = ConnectionLimits()

# -- fixed bounds (not settings) --------------------------------------------------------
# Pending connections the kernel queues before accept() (capped by net.core.somaxconn);
# the supervisor's shared socket uses the same number.
LISTEN_BACKLOG = 4096
# Header fields in one request head.
MAX_HEADER_COUNT = 100
# Bytes read from a socket at once; a connection buffers at most max_head_bytes more
# than this of a head or of pipelined requests.
READ_SIZE = 64 * 1024
# After the last response on a connection: how long unread request bytes are drained
# (after our FIN) before the socket is closed, so the client reads the answer instead
# of a reset, and how many bytes at most.
LINGER_S = 2.0
LINGER_MAX_BYTES = 1024 * 1024
# Descriptors kept back from max_connections for listeners, upstream connections and
# files: the cap is min(max_connections, (RLIMIT_NOFILE - FD_RESERVE) // 2), since every
# client connection may need an upstream one.
FD_RESERVE = 256
# Near the cap (this share of it), each accept closes the longest-idle kept-alive
# connection.
IDLE_SHED_AT = 0.9
# TLS handshakes in progress at once (each holds OpenSSL state while its client answers):
# past it, a new connection ends the oldest handshake.
MAX_HANDSHAKES = 1024


@dataclass(frozen=True, slots=True)
class Limit:
    name: str  # the ConnectionLimits / Settings field, or the constant's name
    env: str | None  # its environment variable; None for a fixed bound
    unit: str  # "s" (a duration: 30s, 500ms, 2m) or "bytes" / "count"
    answer: str  # what the client sees when it is reached
    reason: str
    counterpart: str  # nginx / Envoy


LIMIT_TABLE: tuple[Limit, ...] = (
    Limit(
        "header_timeout_s",
        "SERVER_HEADER_TIMEOUT",
        "s",
        "408 + close (silent close if nothing was sent)",
        "a slowloris head holds a socket and a task",
        "nginx client_header_timeout (60s); Envoy request_headers_timeout",
    ),
    Limit(
        "body_idle_timeout_s",
        "SERVER_BODY_IDLE_TIMEOUT",
        "s",
        "408 + close",
        "a body that stops arriving holds a slot of EDGEGW_MAX_IN_FLIGHT; this frees it",
        "nginx client_body_timeout (60s); Envoy stream_idle_timeout",
    ),
    Limit(
        "body_timeout_s",
        "SERVER_BODY_TIMEOUT",
        "s",
        "408 + close",
        "a body trickled just fast enough to dodge the idle timeout still ends",
        "Envoy request_timeout; nginx has none",
    ),
    Limit(
        "keepalive_timeout_s",
        "SERVER_KEEPALIVE_TIMEOUT",
        "s",
        "close",
        "idle connections cost a descriptor each; longer than nginx's upstream keepalive_timeout (60s) so the proxy closes first",
        "nginx keepalive_timeout (75s); Envoy common_http_protocol_options.idle_timeout",
    ),
    Limit(
        "write_stall_timeout_s",
        "SERVER_WRITE_STALL_TIMEOUT",
        "s",
        "close; the request (and its upstream exchange) is cancelled",
        "a client that stops reading holds the stream and its upstream",
        "nginx send_timeout (60s); Envoy stream_idle_timeout",
    ),
    Limit(
        "max_head_bytes",
        "SERVER_MAX_HEADER_SIZE",
        "bytes",
        "431 + close",
        "a head is buffered whole before it is screened",
        "nginx large_client_header_buffers (4 x 8k); Envoy max_request_headers_kb (60)",
    ),
    Limit(
        "max_connections",
        "SERVER_MAX_CONNECTIONS",
        "count",
        "accepting pauses (the kernel backlog queues); idle kept-alive connections closed first",
        "each connection is a descriptor, a task and buffers; bounded by RLIMIT_NOFILE too",
        "nginx worker_connections; Envoy max_active_downstream_connections",
    ),
    Limit(
        "LISTEN_BACKLOG",
        None,
        "count",
        "connect() waits in the kernel queue",
        "bursts of new connections are queued, not refused (Hypercorn's default is 100)",
        "nginx listen backlog= (511); Envoy tcp_backlog_size (128)",
    ),
    Limit(
        "MAX_HEADER_COUNT",
        None,
        "count",
        "431 + close",
        "every header lookup walks the list",
        "Envoy max_headers_count (100)",
    ),
    Limit(
        "LINGER_S",
        None,
        "s",
        "close",
        "unread request bytes at close would reset the connection and lose the answer",
        "nginx lingering_time / lingering_timeout",
    ),
    Limit(
        "max_body_bytes",
        "SERVER_MAX_REQUEST_BODY_SIZE",
        "bytes",
        "413 (from the app)",
        "enforced by the application as it reads (Content-Length first)",
        "nginx client_max_body_size; Envoy buffer filter max_request_bytes",
    ),
    Limit(
        "max_in_flight",
        "EDGEGW_MAX_IN_FLIGHT",
        "count",
        "503 + Retry-After (from the app)",
        "requests being handled; a request takes its slot once its body is whole",
        "Envoy overload manager / circuit breaker max_requests",
    ),
    Limit(
        "max_bodies",
        "EDGEGW_MAX_BODIES",
        "count",
        "503 overloaded + Retry-After (from the app)",
        "request bodies being read hold no in-flight slot, so they are bounded on their own",
        "nginx limit_conn (per zone); Envoy overload manager",
    ),
    Limit(
        "max_bodies_per_client",
        "EDGEGW_MAX_BODIES_PER_CLIENT",
        "count",
        "503 overloaded + Retry-After (from the app)",
        "one client address cannot take every place for bodies being read",
        "nginx limit_conn $binary_remote_addr; Envoy local rate limit per descriptor",
    ),
    Limit(
        "max_body_bytes_in_progress",
        "EDGEGW_MAX_BODIES_BYTES",
        "bytes",
        "503 overloaded + Retry-After (from the app)",
        "the bytes of bodies still arriving, held by the process at once",
        "Envoy overload manager max_heap_size_bytes",
    ),
    Limit(
        "MAX_HANDSHAKES",
        None,
        "count",
        "the oldest handshake in progress is ended",
        "a TLS handshake holds OpenSSL state while its client answers (within the head deadline)",
        "nginx ssl_handshake_timeout; Envoy transport_socket_connect_timeout",
    ),
)

# The rows that are fields of ConnectionLimits (and so of Settings).
SETTABLE: tuple[Limit, ...] = tuple(
    row for row in LIMIT_TABLE if row.name in {f.name for f in fields(ConnectionLimits)}
)
