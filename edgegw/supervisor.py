"""`edgegw serve --workers N`: N worker processes sharing one port.

On Linux every worker gets a listening socket of its own in one SO_REUSEPORT group (`serve
--worker-fd FD`, served as `fd://FD`), made by the supervisor for each start and closed on its
side once the worker has it; the kernel hashes each new connection to one of them. The
supervisor holds the port with a socket of the group that is bound but never listens (so it
gets no connections, and nobody else can bind the port). Measured against one listening socket
that every worker inherits (bench/README.md, history: 2 workers on 2 cores, 3 rounds,
2026-12-02, load 3-4): of 400 keep-alive connections the busier worker took 52-54 % with
SO_REUSEPORT and 67-84 % with the shared socket (whichever Trio loop wakes first accepts, and a
busy one keeps winning), and under a closed-loop load the busier worker did 50-51 % of the work
against 53-58 %. The price: connections waiting in a worker's accept queue when it dies are
reset, and with every worker down the port refuses instead of queueing. Elsewhere (no
SO_REUSEPORT), the supervisor listens once and every worker inherits that socket.

Each worker is a Trio event loop of its own. A worker that dies never takes the port down:
the others keep theirs, and it is replaced (with a growing pause if workers keep dying at once).
SIGTERM/SIGINT go to every worker, which drains (see edgegw.server.serve); the
supervisor waits for them and exits 0.

With TELEMETRY_ENABLED the supervisor also binds TELEMETRY_METRICS_PORT, once: each worker
serves its own metrics on a unix socket in a private directory (mode 0700, removed at
exit; `serve --metrics-socket PATH`, a fresh path per start) and a scrape of the port
answers their sum (edgegw/telemetry/scrape.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass, field

import trio

from edgegw.settings import EXIT_CONFIG, Settings
from edgegw.telemetry.scrape import serve_merged_metrics

# A worker that dies sooner than this after its start counts as crash-looping.
STEADY_AFTER_S = 5.0
MAX_RESTART_PAUSE_S = 30.0
from edgegw.http1.limits import LISTEN_BACKLOG as BACKLOG  # noqa: E402 (one backlog for both)


def worker_command(fd: int, config_file: str | None, metrics_socket: str | None) -> list[str]:
    """How to start this same edgegw as a worker, frozen (single binary) or not."""
    base = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "edgegw"]
    cmd = [*base, "serve", "--worker-fd", str(fd), "--supervisor-pid", str(os.getpid())]
    if config_file:
        cmd += ["--config", config_file]
    if metrics_socket:
        cmd += ["--metrics-socket", metrics_socket]
    return cmd


# One socket per worker in a SO_REUSEPORT group where the kernel balances it (module doc).
REUSEPORT = sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")


def listen(settings: Settings) -> socket.socket:
    """The supervisor's socket: with REUSEPORT bound only (it holds the port; `worker_socket`
    makes each worker's), else the listening socket every worker inherits."""
    return _bound(settings.host, settings.port, listening=not REUSEPORT)


def worker_socket(held: socket.socket) -> socket.socket:
    """The listening socket one worker is started with: the held one itself, or a new one
    in its SO_REUSEPORT group."""
    if not REUSEPORT:
        return held
    host, port = held.getsockname()[:2]
    return _bound(host, port, listening=True)


def _bound(host: str, port: int, *, listening: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if REUSEPORT:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        if listening:
            sock.listen(BACKLOG)
            sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class _State:
    held: socket.socket  # the supervisor's socket (module doc)
    config_file: str | None
    metrics_dir: str | None  # where the workers' metrics sockets go; None: no telemetry
    stopping: bool = False
    # A worker's settings refused its start: stop everything and exit EXIT_CONFIG.
    refused: bool = False
    # Set by SIGTERM/SIGINT or a refused start: the supervisor stops its workers.
    stop: trio.Event = field(default_factory=trio.Event)
    procs: dict[int, trio.Process] = field(default_factory=dict)  # slot -> its worker
    metrics_sockets: dict[int, str] = field(default_factory=dict)  # slot -> its worker's
    starts: int = 0  # workers started so far, to name their sockets

    def live_metrics_sockets(self) -> dict[int, str]:
        """pid -> metrics socket of every worker still running."""
        return {
            proc.pid: self.metrics_sockets[slot]
            for slot, proc in self.procs.items()
            if proc.returncode is None and slot in self.metrics_sockets
        }


def run(settings: Settings, workers: int, config_file: str | None) -> int:
    sock = listen(settings)
    host, port = sock.getsockname()[:2]
    print(f"edgegw: listening on {_url(host, port)} with {workers} workers", flush=True)
    # Private to this user; a scrape of the supervisor is what exposes the metrics.
    metrics_dir = tempfile.mkdtemp(prefix="edgegw-metrics-") if settings.telemetry_enabled else None
    try:
        state = _State(sock, config_file, metrics_dir)
        trio.run(_supervise, state, workers, settings)
    finally:
        sock.close()
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return EXIT_CONFIG if state.refused else 0


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _supervise(state: _State, workers: int, settings: Settings) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            if state.metrics_dir is not None:
                port = await nursery.start(
                    serve_merged_metrics,
                    settings.host,
                    settings.telemetry_metrics_port,
                    state.live_metrics_sockets,
                )
                url = _url(settings.host, port)
                print(f"edgegw: metrics on {url}/metrics, summed over the workers", flush=True)
            for slot in range(workers):
                nursery.start_soon(_keep_running, slot, state)

            async def on_signal() -> None:
                async for _ in signals:
                    state.stop.set()
                    return

            nursery.start_soon(on_signal)
            await state.stop.wait()
            state.stopping = True
            for proc in state.procs.values():
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            # Workers drain for graceful_timeout_s, plus their own margin; then force.
            with trio.move_on_after(settings.graceful_timeout_s + 15):
                for proc in list(state.procs.values()):
                    await proc.wait()
            for proc in state.procs.values():
                if proc.returncode is None:
                    proc.kill()
            nursery.cancel_scope.cancel()


async def _keep_running(slot: int, state: _State) -> None:
    pause = 0.5
    while not state.stopping:
        metrics_socket = None
        if state.metrics_dir is not None:
            state.starts += 1
            metrics_socket = os.path.join(state.metrics_dir, f"worker-{state.starts}.sock")
            state.metrics_sockets[slot] = metrics_socket
        listener = worker_socket(state.held)
        try:
            cmd = worker_command(listener.fileno(), state.config_file, metrics_socket)
            proc = await trio.lowlevel.open_process(cmd, pass_fds=(listener.fileno(),))
        finally:
            if listener is not state.held:
                listener.close()  # the worker's now: kept here, it would queue for nobody
        state.procs[slot] = proc
        print(f"edgegw: worker {proc.pid} started", flush=True)
        started = trio.current_time()
        with trio.CancelScope(shield=True):
            code = await proc.wait()
        if metrics_socket is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(metrics_socket)
        if state.stopping:
            return
        if code == EXIT_CONFIG:
            # Its settings refused the start (it said why): another would refuse too.
            print(f"edgegw: worker {proc.pid} refused to start; stopping", flush=True)
            state.refused = True
            state.stop.set()
            return
        print(f"edgegw: worker {proc.pid} exited ({code}); starting another", flush=True)
        pause = (
            0.5
            if trio.current_time() - started > STEADY_AFTER_S
            else min(pause * 2, MAX_RESTART_PAUSE_S)
        )
        await trio.sleep(pause)


# A worker notices its supervisor is gone within this time: it polls its parent's pid.
# Not the parent-death signal (PR_SET_PDEATHSIG): that fires when the *thread* that forked
# the worker ends, and trio forks in a worker thread (`open_process` runs Popen through
# `to_thread`) that its thread cache ends after 10 s idle, so every worker was sent SIGTERM
# and drained about 10 s after it started, cutting its streams.
ORPHAN_POLL_S = 0.5


async def exit_with_supervisor(supervisor_pid: int, stop: trio.Event) -> None:
    """Set `stop` (the worker drains and exits) when the supervisor dies, whatever killed
    it (SIGKILL, the OOM killer): nobody would replace or drain the worker otherwise, and it
    would keep the port."""
    while os.getppid() == supervisor_pid:  # noqa: ASYNC110 (another process, no event)
        await trio.sleep(ORPHAN_POLL_S)
    print(f"edgegw: worker {os.getpid()}: supervisor {supervisor_pid} is gone; exiting", flush=True)
    stop.set()
