"""`edgegw serve --workers N`: N worker processes sharing one listening socket.

The supervisor binds and listens once, then starts N copies of edgegw with the socket
inherited (`serve --worker-fd FD`, served by Hypercorn as `fd://FD`); each worker is a
Trio event loop of its own and the kernel spreads connections between them. The
supervisor holds the socket for its whole life, so a worker that dies never takes the
port down: it is replaced (with a growing pause if workers keep dying at once).
SIGTERM/SIGINT go to every worker, which drains (see edgegw.server.serve); the
supervisor waits for them and exits 0.
"""

from __future__ import annotations

import signal
import socket
import sys
from dataclasses import dataclass, field

import trio

from edgegw.settings import Settings

# A worker that dies sooner than this after its start counts as crash-looping.
STEADY_AFTER_S = 5.0
MAX_RESTART_PAUSE_S = 30.0
BACKLOG = 4096


def worker_command(fd: int, config_file: str | None) -> list[str]:
    """How to start this same edgegw as a worker, frozen (single binary) or not."""
    base = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "edgegw"]
    cmd = [*base, "serve", "--worker-fd", str(fd)]
    if config_file:
        cmd += ["--config", config_file]
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
    stopping: bool = False
    procs: dict[int, trio.Process] = field(default_factory=dict)


def run(settings: Settings, workers: int, config_file: str | None) -> int:
    sock = listen(settings)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"edgegw: listening on http://{shown}:{port} with {workers} workers", flush=True)
    try:
        trio.run(
            _supervise, worker_command(sock.fileno(), config_file), workers, sock.fileno(), settings
        )
    finally:
        sock.close()
    return 0


async def _supervise(cmd: list[str], workers: int, fd: int, settings: Settings) -> None:
    state = _State()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            for slot in range(workers):
                nursery.start_soon(_keep_running, cmd, fd, slot, state)
            async for _ in signals:
                break
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


async def _keep_running(cmd: list[str], fd: int, slot: int, state: _State) -> None:
    pause = 0.5
    while not state.stopping:
        proc = await trio.lowlevel.open_process(cmd, pass_fds=(fd,))
        state.procs[slot] = proc
        print(f"edgegw: worker {proc.pid} started", flush=True)
        started = trio.current_time()
        with trio.CancelScope(shield=True):
            code = await proc.wait()
        if state.stopping:
            return
        print(f"edgegw: worker {proc.pid} exited ({code}); starting another", flush=True)
        pause = (
            0.5
            if trio.current_time() - started > STEADY_AFTER_S
            else min(pause * 2, MAX_RESTART_PAUSE_S)
        )
        await trio.sleep(pause)
