"""`edgegw serve --workers N`: N worker processes sharing one listening socket.

The supervisor binds and listens once, then starts N copies of edgegw with the socket
inherited (`serve --worker-fd FD`, served by Hypercorn as `fd://FD`); each worker is a
Trio event loop of its own and the kernel spreads connections between them. The
supervisor holds the socket for its whole life, so a worker that dies never takes the
port down: it is replaced (with a growing pause if workers keep dying at once).
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


def listen(settings: Settings) -> socket.socket:
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((settings.host, settings.port))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


@dataclass
class _State:
    fd: int  # the listening socket the workers inherit
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
        state = _State(sock.fileno(), config_file, metrics_dir)
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
        cmd = worker_command(state.fd, state.config_file, metrics_socket)
        proc = await trio.lowlevel.open_process(cmd, pass_fds=(state.fd,))
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


# A worker notices its supervisor is gone within this time, even where the kernel does not
# signal it (the parent-death signal is Linux only, and is lost if the parent died first).
ORPHAN_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


async def exit_with_supervisor(supervisor_pid: int, stop: trio.Event) -> None:
    """Set `stop` (the worker drains and exits) when the supervisor dies, whatever killed
    it (SIGKILL, the OOM killer): nobody would replace or drain the worker otherwise, and it
    would keep the port."""
    if sys.platform == "linux":
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    while os.getppid() == supervisor_pid:  # noqa: ASYNC110 (another process, no event)
        await trio.sleep(ORPHAN_POLL_S)
    print(f"edgegw: worker {os.getpid()}: supervisor {supervisor_pid} is gone; exiting", flush=True)
    stop.set()
