"""Listening sockets (`host:port` or an inherited `fd://N`), the accept loop with the
connection cap, and the drain. (The state connections share, `Server`, lives in
edgegw.http1.connection.)

    serve_http1(app, sock, limits, shutdown_trigger=..., grace_s=..., task_status=...)

Lifetimes are nested nurseries, as in Hypercorn's Trio worker: the connection tasks live
in the outer (handler) nursery, the accept loop in an inner one. When `shutdown_trigger`
returns: stop accepting and close the listening socket, close the connections waiting for
a request (idle kept-alive ones and new ones that sent nothing), let the others finish
their request (each then closes), and after `grace_s` cancel what is left; then return.

The cap: past IDLE_SHED_AT of it, every accept closes the longest-idle kept-alive
connection; at it, accepting pauses (the kernel's backlog queues the newcomers) until a
connection ends, after closing an idle one if there is any.
"""

from __future__ import annotations

import errno
import logging
import resource
import socket
import ssl
from collections.abc import Awaitable, Callable

import trio

from edgegw.http1.connection import Connection, ServerState
from edgegw.http1.cycle import App
from edgegw.http1.limits import FD_RESERVE, LISTEN_BACKLOG, ConnectionLimits

log = logging.getLogger("edgegw.http1")

# accept() failing for want of resources: shed an idle connection, pause, retry.
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# accept() failing because that one peer gave up or is unreachable (as trio's list).
_PEER_ERRNOS = {
    getattr(errno, name)
    for name in (
        "ECONNABORTED",
        "EPROTO",
        "EPERM",
        "ENETDOWN",
        "ENOPROTOOPT",
        "EHOSTDOWN",
        "ENONET",
        "EHOSTUNREACH",
        "EOPNOTSUPP",
        "ENETUNREACH",
    )
    if hasattr(errno, name)
}
ACCEPT_PAUSE_S = 0.1
# Connections accepted before the loop yields: one a turn let a queue of newcomers wait a
# whole turn of a saturated loop each, seconds of first-token time at 1,024 paced streams.
ACCEPT_BATCH = 64


def raise_nofile() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            log.warning("could not raise RLIMIT_NOFILE from %d to %d", soft, hard)
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_cap(limits: ConnectionLimits, nofile: int) -> int:
    """max_connections, lowered to what the descriptor limit leaves room for."""
    if nofile == resource.RLIM_INFINITY:
        return limits.max_connections
    return max(1, min(limits.max_connections, (nofile - FD_RESERVE) // 2))


def open_listener(bind: str) -> socket.socket:
    """A listening, non-blocking socket for `host:port` (`[v6]:port`) or `fd://N`."""
    if bind.startswith("fd://"):
        sock = socket.socket(fileno=int(bind[5:]))
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"{bind} is not a stream socket")
    else:
        host, _, port = bind.rpartition(":")
        host = host.strip("[]")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, int(port)))
        except BaseException:
            sock.close()
            raise
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def bind_url(sock: socket.socket, scheme: str = "http") -> str:
    """The bind string Hypercorn reports: http://host:port, https://[v6]:port."""
    host, port = sock.getsockname()[:2]
    host = f"[{host}]" if sock.family == socket.AF_INET6 else host
    return f"{scheme}://{host}:{port}"


async def accept_loop(server: ServerState, listener: socket.socket, handlers: trio.Nursery) -> None:
    """Accept connections into `handlers`, one task each, within the connection cap; up to
    ACCEPT_BATCH of those waiting at each turn of the loop."""
    last_warning = -1e9
    accepted = 0
    while True:
        while len(server.connections) >= server.cap and not server.shed_idle():
            server.slot_freed = trio.Event()
            await server.slot_freed.wait()
            server.slot_freed = None
        try:
            sock, addr = listener.accept()
        except BlockingIOError:
            accepted = 0
            await trio.lowlevel.wait_readable(listener)
            continue
        except OSError as e:
            if e.errno in _PEER_ERRNOS:
                continue
            if e.errno not in _RESOURCE_ERRNOS:
                raise
            now = trio.current_time()
            if now - last_warning > 10:
                log.warning("accept failed (%s); pausing", errno.errorcode.get(e.errno))
                last_warning = now
            server.shed_idle()
            await trio.sleep(ACCEPT_PAUSE_S)
            continue
        sock.setblocking(False)
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if len(server.connections) >= server.shed_at:
            server.shed_idle()
        conn = Connection(server, sock, addr[:2] if isinstance(addr, tuple) else None)
        server.connections.add(conn)
        handlers.start_soon(conn.run)
        accepted += 1
        if accepted >= ACCEPT_BATCH:
            accepted = 0
            await trio.lowlevel.checkpoint()


async def serve_http1(
    app: App,
    listener: socket.socket,
    limits: ConnectionLimits,
    *,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    grace_s: float = 30.0,
    tls: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `app` on `listener` (which this closes), over TLS with `tls`, until cancelled,
    or until `shutdown_trigger` returns and the drain is over; started([bind]) once
    accepting."""
    try:
        cap = connection_cap(limits, raise_nofile())
        local = listener.getsockname()
        local = local[:2] if isinstance(local, tuple) else local
        server = ServerState(app, limits, local, cap, tls)
        async with trio.open_nursery() as handlers:
            async with trio.open_nursery() as front:
                front.start_soon(accept_loop, server, listener, handlers)
                front.start_soon(server.reap_idle)
                task_status.started([bind_url(listener, server.scheme)])
                if shutdown_trigger is None:
                    await trio.sleep_forever()
                await shutdown_trigger()
                front.cancel_scope.cancel()
            _close_listener(listener)
            server.begin_drain()
            handlers.cancel_scope.deadline = trio.current_time() + grace_s
    finally:
        _close_listener(listener)


def _close_listener(listener: socket.socket) -> None:
    if listener.fileno() >= 0:
        trio.lowlevel.notify_closing(listener)
        listener.close()
