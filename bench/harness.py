"""What every scenario shares: processes and their cores, procfs readings, the Go peer's runs,
waiting for a quiet machine, the one median/spread helper, the machine's description.

Everything here targets 127.0.0.1 only. Processes are pinned with sched_setaffinity, at start
(``preexec_fn``) or later for a whole process tree (every thread of every process), so one set
of servers can serve both the same-core latency layout and the split throughput layout.
"""

from __future__ import annotations

import atexit
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from bench import gopeer

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# The request of every scenario: the mock answers it with 16 tokens (200 when streamed whole).
CHAT = (
    b'{"model":"openai/gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},'
    b'{"role":"user","content":"Say hello in five words."}],"max_tokens":16,"temperature":0.2}'
)
CHAT_DIRECT = CHAT.replace(b"openai/gpt-4o-mini", b"gpt-4o-mini")  # to the mock itself
PATH = "/v1/chat/completions"
CORE_A, CORE_B = 0, min(1, (os.cpu_count() or 1) - 1)
BOTH = {CORE_A, CORE_B}
MiB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")

Result = dict[str, Any]


# --- numbers ------------------------------------------------------------------------------


def spread(values: Iterable[float | None], digits: int = 3) -> Result:
    """The median of the rounds and their range, NaN and None left out (None when none is
    left): every figure a scenario reports over rounds goes through here."""
    kept = [float(v) for v in values if v is not None and v == v]
    if not kept:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": round(statistics.median(kept), digits),
        "min": round(min(kept), digits),
        "max": round(max(kept), digits),
        "n": len(kept),
    }


def median(values: Iterable[float | None]) -> float | None:
    m: float | None = spread(values)["median"]
    return m


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


# --- processes ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_port(
    port: int, timeout_s: float = 20.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
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


def on_core(cpu: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child on ``cpu``, its open-file limit raised."""

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
    ready_s: float = 60.0,
    log: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``exe args`` (default: this Python) in the repository, pinned to ``cpu`` with the
    open-file limit raised; wait until ``port`` accepts; terminate on exit."""
    out: IO[bytes] | int = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        [exe or sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=out,
        preexec_fn=on_core(cpu),
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
        if not isinstance(out, int):
            out.close()


def edgegw_env(
    mock_port: int, workers: int = 1, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """edgegw in front of the mock, its admission bounds (1,024 by default) out of the way of
    the capacity search, quiet logs; ``extra`` on top."""
    return {
        "OPENAI_API_URL": f"http://127.0.0.1:{mock_port}/v1",
        "OPENAI_API_KEY": "bench-key",
        "LOG_LEVEL": "WARNING",
        "EDGEGW_WORKERS": str(workers),
        "EDGEGW_MAX_IN_FLIGHT": "100000",
        "UPSTREAM_POOL_MAX_PER_HOST": "100000",
        **(extra or {}),
    }


def edgegw(
    port: int, mock_port: int, cpu: int, extra: dict[str, str] | None = None
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """``edgegw serve`` (one worker) on ``cpu`` in front of the mock at ``mock_port``."""
    env = edgegw_env(mock_port, 1, extra)
    return process(["-m", "edgegw", "serve", "--port", str(port)], cpu, env, port)


def go_mock(binary: Path, port: int, *args: str) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """The Go mock on core 0 (``args``: its pacing, e.g. ``--token-rate 30 --stamp``)."""
    return process(["mock", "--port", str(port), *args], CORE_A, port=port, exe=str(binary))


def body_file(where: Path, name: str, body: bytes) -> str:
    path = where / f"{name}.json"
    path.write_bytes(body)
    return str(path)


def streaming(body: bytes, max_tokens: int | None = None) -> bytes:
    """The same chat request with ``"stream": true`` (and ``max_tokens`` when given)."""
    if max_tokens is not None:
        body = body.replace(b'"max_tokens":16', b'"max_tokens":%d' % max_tokens)
    return body[:-1] + b',"stream":true}'


def scratch_dir() -> Path:
    """A directory for a run's bodies and certificates, removed when the process exits."""
    path = Path(tempfile.mkdtemp(prefix="edgegw-bench-"))
    atexit.register(shutil.rmtree, path, True)
    return path


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
    """CPU time so far of every thread of the process tree (schedstat: nanoseconds)."""
    total = 0
    for p in tree_pids(pid):
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                total += int(Path(f"/proc/{p}/task/{task}/schedstat").read_text().split()[0])
        except OSError:
            continue
    return total / 1e9


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


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of every process of the tree onto ``cpus``."""
    for p in tree_pids(pid):
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                os.sched_setaffinity(int(task), cpus)
        except OSError:
            pass


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


class CoreMeter:
    """Busy share of each core over a with-block, from /proc/stat."""

    busy: dict[str, float]

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


class Others:
    """CPU the rest of the machine used over a with-block, in cores: the busy time of all
    cores (steal included) minus the CPU of our own processes (``pids`` and this process)."""

    cores: float

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def _ours(self) -> float:
        t = os.times()
        return sum(cpu_seconds(p) for p in self.pids) + t.user + t.system + t.children_user

    def __enter__(self) -> Others:
        self._meter = CoreMeter().__enter__()
        self._t0, self._ours0 = time.monotonic(), self._ours()
        return self

    def __exit__(self, *exc: object) -> None:
        self._meter.__exit__()
        wall = max(1e-9, time.monotonic() - self._t0)
        self.cores = max(0.0, sum(self._meter.busy.values()) - (self._ours() - self._ours0) / wall)


class RssSampler:
    """Sample the RSS of a process tree from a thread every ``every_s`` seconds."""

    t0: float

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


def busy_cores(window_s: float = 3.0) -> float:
    """How many cores' worth of CPU the whole machine used over the last ``window_s``."""
    with CoreMeter() as meter:
        time.sleep(window_s)
    return sum(meter.busy.values())


def wait_quiet(threshold: float = 0.8, max_wait_s: float = 120.0) -> Result:
    """Wait, bounded, while others load the machine: until the 1-minute load average is at
    most ``threshold``, or the machine is nearly idle right now (under 0.25 cores busy over
    3 s; the average still remembers load that is over, e.g. the previous measurement).
    ``max_wait_s`` 0: look once, do not wait."""
    start = time.monotonic()
    first = loadavg()
    while True:
        now = loadavg()
        busy = busy_cores(min(3.0, max_wait_s) or 0.2)
        quiet = now[0] <= threshold or busy < 0.25
        if quiet or time.monotonic() - start > max_wait_s:
            break
        time.sleep(5)
    waited = time.monotonic() - start
    if waited > 5:
        print(f"  (waited {waited:.0f} s for quiet: load {first[0]:.2f} -> {now[0]:.2f}, "
              f"{busy:.2f} cores busy now)")  # fmt: skip
    return {
        "loadavg": now,
        "busy_cores": round(busy, 3),
        "waited_s": round(waited, 1),
        "quiet": quiet,
    }


# --- the Go peer's generators ---------------------------------------------------------------


def generate(binary: Path, args: list[str], pid: int | None = None, rss: bool = False) -> Result:
    """One run of a Go generator (``gopeer load|streams ...``) pinned to core 0, with the CPU
    that the server tree ``pid`` used over exactly its measured phase (``server_cpu_s``) and,
    with ``rss``, that tree's resident memory sampled over it."""
    cpu, t = [0.0, 0.0], [0.0, 0.0]
    sampler: RssSampler | None = None
    rss_before = rss_bytes(pid) if pid is not None else 0

    def on_phase(phase: str) -> None:
        nonlocal sampler
        i = 0 if phase == "run" else 1
        cpu[i], t[i] = (cpu_seconds(pid) if pid is not None else 0.0), time.monotonic()
        if rss and pid is not None:
            if phase == "run":
                sampler = RssSampler(pid, 0.2).__enter__()
            elif sampler is not None:
                sampler.__exit__()

    result = gopeer.run(binary, args, on_phase, on_core(CORE_A))
    if pid is not None:
        result["server_cpu_s"] = round(cpu[1] - cpu[0], 4)
        result["server_busy_cores"] = round((cpu[1] - cpu[0]) / max(1e-9, t[1] - t[0]), 3)
    if sampler is not None and sampler.samples:
        result["rss_before_mib"] = round(rss_before / MiB, 1)
        result["rss_mean_mib"] = round(statistics.mean(r for _, r in sampler.samples) / MiB, 1)
    return result


def per_request_us(r: Result) -> float | None:
    """Server CPU µs per answered request of a ``generate`` result."""
    ok = r["ok"]
    return round(r["server_cpu_s"] / ok * 1e6, 1) if ok else None


# --- the record of a run --------------------------------------------------------------------


def machine() -> Result:
    """What a figure needs beside it: the CPU, the versions, the commit and whether the tree
    had local changes."""
    info: Result = {
        "python": platform.python_version(),
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "versions": {},
    }
    for pkg in ("edgegw", "trio", "h11", "orjson"):
        try:
            info["versions"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        info["loadavg_before"] = loadavg()
    except OSError:
        pass
    try:  # read-only: which commit the working tree is on, and whether it has local changes
        git = ["git", "-C", str(ROOT)]
        info["commit"] = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        info["tree_dirty"] = bool(
            subprocess.run(
                [*git, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, timeout=10,
            ).stdout.strip()
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info
