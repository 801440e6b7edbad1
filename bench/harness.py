"""Shared pieces of the benchmark commands: processes, pinning, procfs readings and the load.

Everything here targets 127.0.0.1 only. Processes are pinned with sched_setaffinity, at start
(``preexec_fn``) or later for a whole process tree (every thread of every process), so one set
of servers can serve both the same-core latency layout and the split throughput layout.

The load generator is ``edgegw.bench.loadgen``, the one behind ``edgegw bench``, so figures
from here and from that command are taken with the same instrument; ``load`` runs it as a
closed loop and reads the server's CPU and this process's over exactly the measured phase.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from edgegw.bench.loadgen import Load, LoadSpec, Stats

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CHAT = (
    b'{"model":"openai/gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},'
    b'{"role":"user","content":"Say hello in five words."}],"max_tokens":16,"temperature":0.2}'
)
CHAT_DIRECT = CHAT.replace(b"openai/gpt-4o-mini", b"gpt-4o-mini")
PATH = "/v1/chat/completions"
CORE_A, CORE_B = 0, min(1, (os.cpu_count() or 1) - 1)
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
# Per request (a stream: to its end); past it the request counts as a "timeout" error. No cell
# comes near it: the slowest, a paced 50-token stream at 20 tokens/s, takes 2.5 s.
REQUEST_TIMEOUT_S = 30.0


def streaming(body: bytes) -> bytes:
    """The same chat request with ``"stream": true``."""
    return body[:-1] + b',"stream":true}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def raise_nofile() -> int:
    """Raise this process's open-file limit to its hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _child_setup(cpu: int) -> Callable[[], None]:
    def setup() -> None:
        os.sched_setaffinity(0, {cpu})
        raise_nofile()

    return setup


@contextmanager
def process(
    args: list[str],
    cpu: int,
    env: dict[str, str] | None = None,
    port: int | None = None,
    *,
    exe: str | None = None,
    ready_s: float = 20.0,
    log: Path | None = None,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen]:
    """Run ``exe args`` (default: this Python) pinned to ``cpu`` with the open-file limit
    raised, in ``cwd`` (default: the repository); wait until ``port`` accepts; terminate on
    exit."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [exe or sys.executable, *args],
        cwd=cwd or ROOT,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=out,
        preexec_fn=_child_setup(cpu),
    )
    try:
        if port is not None:
            wait_port(port, ready_s, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()


def mock_args(port: int, tokens: int = 16, token_rate: float = 0.0) -> list[str]:
    args = ["-m", "edgegw.mock", "--port", str(port), "--tokens", str(tokens)]
    if token_rate:
        args += ["--token-rate", str(token_rate)]
    return args


def gateway(port: int, mock_port: int, cpu: int):
    env = {
        "OPENAI_API_URL": f"http://127.0.0.1:{mock_port}/v1",
        "OPENAI_API_KEY": "bench-key",
        "LOG_LEVEL": "WARNING",
        "EDGEGW_WORKERS": "1",  # one process: the gateway under test is pinned to one core
    }
    return process(["-m", "edgegw", "serve", "--port", str(port)], cpu, env, port)


def bare(port: int, cpu: int):
    return process(["-m", "bench.bare_app", "--port", str(port)], cpu, port=port)


def post(port: int, path: str, body: bytes) -> bytes:
    """A whole POST request with a JSON body, as the load generator sends it."""
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


@dataclass(frozen=True)
class Run:
    """One load's measured phase, with the CPU used meanwhile."""

    stats: Stats  # edgegw.bench.loadgen's counters and histograms
    elapsed_s: float  # the measured phase: from the end of the skip to the last answer
    client_cpu_s: float  # this process (the load generator)
    server_cpu_s: float  # the ``pid`` process tree; nan without one

    @property
    def requests(self) -> int:
        """Finished, successfully or not (a stream: ended)."""
        return self.stats.requests

    @property
    def ok(self) -> int:
        """Answered 2xx (a stream: also ended with [DONE] and no error event)."""
        return self.stats.ok

    @property
    def errors(self) -> int:
        return self.stats.error_count

    @property
    def error_kinds(self) -> dict[str, int]:
        return self.stats.errors

    @property
    def statuses(self) -> dict[int, int]:
        return self.stats.statuses

    @property
    def rps(self) -> float:
        return self.stats.requests / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def events_per_s(self) -> float:
        return self.stats.events / self.elapsed_s if self.elapsed_s else 0.0

    def percentile_ms(self, q: float) -> float:
        """Of the successful requests' latency (a stream: to its end); nan when none."""
        return self.stats.latency.percentile_us(q) / 1000

    def ttft_ms(self, q: float) -> float:
        return self.stats.ttft.percentile_us(q) / 1000


def load(
    port: int,
    body: bytes,
    path: str,
    connections: int,
    seconds: float,
    max_requests: int,
    *,
    stream: bool = False,
    skip_s: float = 0.0,
    pid: int | None = None,
    on_stream: Callable[[list[float]], object] | None = None,
    rate: float | None = None,
) -> Run:
    """A closed loop of ``body`` POSTed to ``path`` on ``connections`` keep-alive connections
    for ``seconds`` in all, or ``max_requests`` measured requests; ``stream``: expect SSE.
    Requests started in the first ``skip_s`` seconds (connection set-up) are not measured.
    ``on_stream`` gets each measured stream's content event times (``Load``'s hook).
    ``rate``: an open loop of that many requests a second instead (at most ``connections``
    in flight)."""
    spec = LoadSpec(
        address="127.0.0.1",
        port=port,
        request=post(port, path, body),
        stream=stream,
        connections=connections,
        rate=rate,
        duration_s=max(0.0, seconds - skip_s),
        warmup_s=skip_s,
        max_requests=max_requests,
        timeout_s=REQUEST_TIMEOUT_S,
    )
    marks: dict[str, tuple[float, float]] = {}

    def mark(phase: str) -> None:
        server = cpu_seconds(pid) if pid is not None else float("nan")
        marks[phase] = (time.process_time(), server)

    run = Load(spec, on_phase=mark, on_stream=on_stream)
    trio.run(run.run)
    (client0, server0), (client1, server1) = marks["run"], marks["done"]
    return Run(run.measured, run.elapsed_s, client1 - client0, server1 - server0)


# --- procfs -------------------------------------------------------------------------------


def tree_pids(pid: int) -> list[int]:
    """``pid`` and all its descendants (via /proc/<pid>/task/<tid>/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                kids = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                todo.extend(int(k) for k in kids)
        except OSError:
            pass
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far, summed over the process tree (procfs)."""
    total = 0
    for p in tree_pids(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def rss_bytes(pid: int) -> int:
    """Resident set size summed over the process tree (statm, resident pages)."""
    total = 0
    for p in tree_pids(pid):
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE
        except OSError:
            pass
    return total


def fd_count(pid: int) -> int:
    return sum(len(os.listdir(f"/proc/{p}/fd")) for p in tree_pids(pid))


def pin_tree(pid: int, cpu: int) -> None:
    """Pin every thread of every process in the tree to ``cpu``."""
    for p in tree_pids(pid):
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                os.sched_setaffinity(int(task), {cpu})
        except OSError:
            pass


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def busy_cores(window_s: float = 3.0) -> float:
    """How many cores' worth of CPU the whole machine used over the last ``window_s``."""
    with CoreMeter() as meter:
        time.sleep(window_s)
    return sum(meter.busy.values())


def wait_quiet(threshold: float = 0.8, max_wait_s: float = 300.0) -> dict:
    """Wait, bounded, while others load the machine: until the 1-minute load average is at
    most ``threshold``, or the machine is nearly idle right now (under 0.25 cores busy over
    3 s; the average still remembers load that is over, e.g. the previous measurement)."""
    start = time.monotonic()
    first = loadavg()
    while True:
        now, busy = loadavg(), busy_cores()
        quiet = now[0] <= threshold or busy < 0.25
        if quiet or time.monotonic() - start > max_wait_s:
            break
        time.sleep(5)
    waited = time.monotonic() - start
    if waited > 5:
        print(
            f"  (waited {waited:.0f} s for the machine to quieten: load {first[0]:.2f} -> "
            f"{now[0]:.2f}, {busy:.2f} cores busy now)"
        )
    return {
        "loadavg_at_request": first,
        "waited_s": round(waited, 1),
        "loadavg": now,
        "busy_cores_now": round(busy, 3),
        "quiet": quiet,
    }


class CoreMeter:
    """Busy share of each core between start() and stop(), from /proc/stat."""

    @staticmethod
    def _read() -> dict[str, tuple[int, int]]:
        out = {}
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("cpu") and line[3:4].isdigit():
                name, *vals = line.split()
                v = [int(x) for x in vals]
                idle = v[3] + v[4]
                out[name] = (sum(v[:8]) - idle, sum(v[:8]))
        return out

    def __enter__(self) -> CoreMeter:
        self.before = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        after = self._read()
        self.busy = {
            k: (after[k][0] - b[0]) / max(1, after[k][1] - b[1]) for k, b in self.before.items()
        }


class RssSampler:
    """Sample the RSS of a process tree from a thread every ``every_s`` seconds."""

    def __init__(self, pid: int, every_s: float) -> None:
        self.pid, self.every_s = pid, every_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic() - self.t0, rss_bytes(self.pid)))
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> RssSampler:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic() - self.t0, rss_bytes(self.pid)))

    @property
    def peak(self) -> int:
        return max(r for _, r in self.samples)


def scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="edgegw-bench-"))


MiB = 1024 * 1024


class Others:
    """CPU the rest of the machine used over a with-block, in cores: the busy time of all
    cores (steal included) minus the CPU of our own processes (``pids`` and this process)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def _ours(self) -> float:
        t = os.times()
        return sum(cpu_seconds(p) for p in self.pids) + t.user + t.system

    def __enter__(self) -> Others:
        self._meter = CoreMeter().__enter__()
        self._t0, self._ours0 = time.monotonic(), self._ours()
        return self

    def __exit__(self, *exc: object) -> None:
        self._meter.__exit__()
        wall = time.monotonic() - self._t0
        self.cores = max(0.0, sum(self._meter.busy.values()) - (self._ours() - self._ours0) / wall)
        self.busy = self._meter.busy


def wait_idle(max_wait_s: float = 60.0) -> float:
    """Wait, bounded, until the machine is nearly idle (under 0.25 cores over 3 s)."""
    start = time.monotonic()
    while (busy := busy_cores()) >= 0.25 and time.monotonic() - start < max_wait_s:
        time.sleep(2)
    return busy


def cell(fn: Callable[[], object], pids: list[int], limit: float = 0.15, retries: int = 2):
    """Run one measurement; when others used more than ``limit`` cores meanwhile, wait for
    the machine to go idle (bounded) and run it again, at most ``retries`` times.
    Returns (result, others' cores during the kept run, attempts)."""
    for attempt in range(1, retries + 2):
        with Others(pids) as others:
            result = fn()
        if others.cores <= limit or attempt > retries:
            return result, others.cores, attempt
        print(f"    (others used {others.cores:.2f} cores during the cell: waiting, then again)")
        wait_idle()
    raise AssertionError("unreachable")
