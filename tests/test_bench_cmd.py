"""`edgegw bench`: short real runs (about a second each) against the built-in mock, through an
edgegw the command starts, a gateway the test starts (--target), and the mock alone (--direct);
the JSON it writes is checked for presence and sanity, never for speed. They run on wall time:
a load that streams answers is never idle for long, and an autojumping clock would end it at
its first idle moment; the two whose waits are only timers run on a virtual clock."""

from __future__ import annotations

import io
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from edgegw.bench.command import BenchError, parse_options, run_bench
from edgegw.bench.loadgen import (
    Histogram,
    Load,
    LoadSpec,
    bucket_bounds,
    bucket_index,
    send_one,
)
from edgegw.mock import MockConfig, MockUpstream

from .conftest import start_gateway, upstream_env

# Events of one stream from the mock: role, 16 content chunks, finish, usage, [DONE].
EVENTS_PER_STREAM = 20


async def bench(tmp_path: Path, *argv: str, name: str = "run") -> tuple[dict[str, Any], str, str]:
    """Run the command's core in this process; (the JSON it wrote, stdout, stderr)."""
    path = tmp_path / f"{name}.json"
    opts = parse_options([*argv, "--json", str(path)], environ={})
    out, err = io.StringIO(), io.StringIO()
    assert await run_bench(opts, out=out, err=err) == 0, err.getvalue()
    return json.loads(path.read_bytes()), out.getvalue(), err.getvalue()


def check_summary(s: dict[str, Any] | None, count: int | None = None) -> None:
    assert s is not None
    assert 0 <= s["min"] <= s["p50"] <= s["p90"] <= s["p99"] <= s["p999"] <= s["max"]
    assert s["min"] <= s["mean"] <= s["max"]
    if count is not None:
        assert s["count"] == count


def check_run(r: dict[str, Any]) -> None:
    """What every result holds, whatever the options."""
    assert r["schema"] == "edgegw-bench/1"
    assert r["requests"] > 0
    assert r["requests"] == r["ok"] + r["errors"]
    assert r["errors"] == sum(r["errors_by_kind"].values())
    http_errors = sum(n for kind, n in r["errors_by_kind"].items() if kind.startswith("http_"))
    assert sum(r["status_counts"].values()) >= r["ok"] + http_errors
    assert r["elapsed_s"] > 0
    assert r["throughput"]["requests_per_s"] == pytest.approx(r["requests"] / r["elapsed_s"], 0.01)
    assert sum(t["requests"] for t in r["timeline"]) == r["requests"]
    assert sum(t["errors"] for t in r["timeline"]) == r["errors"]
    if r["ok"]:
        check_summary(r["latency_ms"], r["ok"])
        assert sum(c for _, c in r["histograms_us"]["latency"]) == r["ok"]
    else:
        assert r["latency_ms"] is None and "latency" not in r["histograms_us"]
    assert r["connections"]["opened"] >= 1
    assert not r["interrupted"]


async def test_closed_loop_whole_answers(tmp_path: Path) -> None:
    r, out, _ = await bench(
        tmp_path, "--no-stream", "--connections", "4", "--duration", "0.5", "--warmup", "0.2"
    )
    check_run(r)
    p = r["parameters"]
    assert (p["target_kind"], p["loop"], p["connections"], p["stream"]) == (
        "in-process",
        "closed",
        4,
        False,
    )
    assert p["model"] == "openai/mock" and p["path"] == "/v1/chat/completions"
    assert p["mock"]["tokens"] == 16 and p["mock"]["url"].startswith("http://127.0.0.1:")
    assert r["errors"] == 0 and r["warmup"]["requests"] > 0
    assert r["tokens"] == 16 * r["ok"] and r["tokens_source"] == "usage"
    assert r["ttft_ms"] is None and r["gap_ms"] is None and r["send_delay_ms"] is None
    assert r["connections"]["peak"] <= 4
    assert "req/s" in out and "latency" in out and "first token" not in out


async def test_closed_loop_streams(tmp_path: Path) -> None:
    r, out, _ = await bench(
        tmp_path, "--stream", "--connections", "8", "--duration", "0.6", "--warmup", "0.2",
        "--mock-token-rate", "4000",
    )  # fmt: skip
    check_run(r)
    assert r["errors"] == 0 and r["parameters"]["stream"] is True
    check_summary(r["ttft_ms"], r["ok"])
    assert r["ttft_ms"]["p50"] <= r["latency_ms"]["p50"]
    check_summary(r["gap_ms"])
    assert r["events"] == EVENTS_PER_STREAM * r["ok"]
    assert r["tokens"] == 16 * r["ok"] and r["throughput"]["tokens_per_s"] > 0
    assert "first token" in out and "chunk gap" in out and "tokens/s" in out


async def test_open_loop_paces_requests(tmp_path: Path) -> None:
    r, out, _ = await bench(
        tmp_path, "--rate", "200", "--duration", "0.5", "--warmup", "0",
        "--mock-latency-ms", "5", "--mock-token-rate", "2000",
    )  # fmt: skip
    check_run(r)
    p = r["parameters"]
    assert (p["loop"], p["rate"], p["connections"]) == ("open", 200.0, 256)
    assert r["requests"] == 100  # due at 0, 5, ..., 495 ms: every one sent, late or not
    check_summary(r["send_delay_ms"], 100)
    check_summary(r["ttft_ms"], r["ok"])
    assert r["latency_ms"]["min"] >= 5  # the mock's delay is in every answer
    assert r["connections"]["peak"] <= 256
    assert "send delay" in out


async def test_errors_are_counted_by_kind(tmp_path: Path) -> None:
    r, out, _ = await bench(
        tmp_path, "--no-stream", "--mock-error-rate", "0.5", "--max-requests", "40",
        "--warmup", "0", "--duration", "30",
    )  # fmt: skip
    check_run(r)
    # The mock fails exactly every second request (the probe before the run took an odd one).
    assert r["requests"] == 40
    assert r["errors_by_kind"] == {"http_500": 20} and r["ok"] == 20
    assert r["error_rate"] == 0.5
    assert "http_500 20" in out


async def test_slow_answers_are_timeouts(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: the run waits on timers only, the mock's 300 ms and the 0.1 s timeout.
    r, out, _ = await bench(
        tmp_path, "--no-stream", "--mock-latency-ms", "300", "--timeout", "0.1",
        "--connections", "2", "--max-requests", "4", "--warmup", "0", "--duration", "30",
    )  # fmt: skip
    check_run(r)
    assert r["errors_by_kind"] == {"timeout": 4} and r["status_counts"] == {}
    assert "timeout 4" in out


async def test_direct_loads_the_mock_itself(tmp_path: Path) -> None:
    r, out, _ = await bench(tmp_path, "--direct", "--duration", "0.5", "--warmup", "0")
    check_run(r)
    p = r["parameters"]
    assert p["target_kind"] == "direct" and p["model"] == "mock"  # the provider's own name
    assert p["mock"]["url"] == p["target"] + "/v1"
    assert r["errors"] == 0 and r["ttft_ms"] is not None
    assert "the baseline" in out


async def test_compare_with_an_earlier_run(tmp_path: Path) -> None:
    before, _, _ = await bench(
        tmp_path, "--direct", "--no-stream", "--duration", "0.3", "--warmup", "0", name="before"
    )
    r, out, _ = await bench(
        tmp_path, "--no-stream", "--duration", "0.3", "--warmup", "0",
        "--compare", str(tmp_path / "before.json"),
    )  # fmt: skip
    cmp = r["comparison"]
    assert cmp["file"] == str(tmp_path / "before.json")
    assert cmp["parameters_differ"]["target_kind"] == ["direct", "in-process"]
    assert cmp["parameters_differ"]["model"] == ["mock", "openai/mock"]
    rps = cmp["changes"]["req/s"]
    assert rps["before"] == before["throughput"]["requests_per_s"]
    assert rps["now"] == r["throughput"]["requests_per_s"]
    p50 = cmp["changes"]["latency p50"]
    assert p50["change"] == pytest.approx(p50["now"] - p50["before"], abs=1e-3)
    assert "first token p50" not in cmp["changes"]  # neither run streamed
    assert "compared with" in out and "target_kind direct -> in-process" in out


async def test_compare_wants_a_bench_file(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(BenchError, match="--compare"):
        parse_options(["--compare", str(other)])
    with pytest.raises(BenchError, match="--compare"):
        parse_options(["--compare", str(tmp_path / "missing.json")])


async def test_target_a_running_gateway(tmp_path: Path, nursery: trio.Nursery) -> None:
    mock = MockUpstream(MockConfig(api_key="upstream-secret-key"))
    await nursery.start(mock.serve, "127.0.0.1", 0)
    gateway = await start_gateway(nursery, upstream_env(mock))
    r, out, _ = await bench(
        tmp_path, "--target", gateway.base, "--no-stream", "--duration", "0.5", "--warmup", "0"
    )
    check_run(r)
    assert r["parameters"]["target_kind"] == "external"
    assert r["parameters"]["target"] == gateway.base and r["errors"] == 0
    assert "OPENAI_API_URL=" + r["parameters"]["mock"]["url"] in out
    assert len(mock.requests) > r["requests"] // 2  # the load did reach the test's upstream


class CtrlCOnProgress(io.StringIO):
    """stderr that presses Ctrl-C at the first progress line: the load is surely running."""

    def __init__(self, interrupt: trio.Event) -> None:
        super().__init__()
        self.interrupt = interrupt

    def write(self, text: str) -> int:
        if "requests" in text:
            self.interrupt.set()
        return super().write(text)


async def test_interrupt_reports_what_ran(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    opts = parse_options(
        ["--duration", "30", "--warmup", "0", "--progress", "--json", str(path)], environ={}
    )
    interrupt = trio.Event()
    err = CtrlCOnProgress(interrupt)
    assert await run_bench(opts, out=io.StringIO(), err=err, interrupt=interrupt) == 0
    r = json.loads(path.read_bytes())
    assert r["interrupted"] is True and r["requests"] > 0 and r["elapsed_s"] < 30
    # stderr is no terminal here: forced progress writes whole lines, not `\r` rewrites
    line = err.getvalue().splitlines()[0]
    assert line.startswith("[run") and "requests" in line and line.endswith("req/s")
    assert "\r" not in err.getvalue()


async def test_interrupt_before_the_load_exits_130(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: the first answer never comes, so the 0.2 s before Ctrl-C is the only wait.
    opts = parse_options(["--model", "openai/mock-hang", "--duration", "1"])  # no first answer
    interrupt = trio.Event()

    async def press_ctrl_c() -> None:
        await trio.sleep(0.2)
        interrupt.set()

    nursery.start_soon(press_ctrl_c)
    assert await run_bench(opts, out=io.StringIO(), err=io.StringIO(), interrupt=interrupt) == 130


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_target_exits_2(tmp_path: Path) -> None:
    opts = parse_options(["--target", f"http://127.0.0.1:{closed_port()}", "--duration", "1"])
    err = io.StringIO()
    assert await run_bench(opts, out=io.StringIO(), err=err) == 2
    assert "cannot reach" in err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["--duration", "601"],
        ["--duration", "0"],
        ["--connections", "0"],
        ["--rate", "-1"],
        ["--max-requests", "100000000"],
        ["--mock-error-rate", "1.5"],
        ["--stream", "--no-such-option"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse_options(argv)
    assert e.value.code == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["--direct", "--target", "http://127.0.0.1:8080"],
        ["--target", "https://127.0.0.1:8443"],
        ["--target", "127.0.0.1:8080"],
        ["--json", "/nonexistent-folder/run.json"],
    ],
)
def test_conflicting_or_unusable_options(argv: list[str]) -> None:
    with pytest.raises(BenchError):
        parse_options(argv)


async def test_the_command_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    command = [sys.executable, "-m", "edgegw", "bench"]
    args = ["--no-stream", "--duration", "0.5", "--warmup", "0", "--no-progress"]
    with trio.fail_after(30):  # wall time: a child process, no timer of ours to jump to
        done = await trio.run_process(
            [*command, *args, "--json", str(path)], capture_stdout=True, capture_stderr=True
        )
        assert done.returncode == 0, done.stderr
        bad = await trio.run_process(
            [*command, "--duration", "9999"], capture_stderr=True, check=False
        )
    assert b"req/s" in done.stdout
    assert json.loads(path.read_bytes())["requests"] > 0
    assert bad.returncode == 2 and b"--duration" in bad.stderr


def test_histogram_buckets_tile_the_range() -> None:
    previous_high = -1
    for index in range(bucket_index(10**7) + 1):
        low, high = bucket_bounds(index)
        assert low == previous_high + 1 and bucket_index(low) == index == bucket_index(high)
        assert high - low <= max(0, low // 128)  # under 0.8 % wide
        previous_high = high


def test_histogram_percentiles() -> None:
    h = Histogram()
    assert h.summary_ms() is None
    for us in range(1, 100_001):
        h.record(us / 1e6)
    s = h.summary_ms()
    assert s is not None and s["count"] == 100_000
    assert (s["min"], s["max"]) == (0.001, 100.0)
    for name, expected in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9)):
        assert s[name] == pytest.approx(expected, rel=0.008)
    assert sum(c for _, c in h.buckets()) == 100_000


def chat_request(port: int, stream: bool) -> bytes:
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":%s}' % (
        b"true" if stream else b"false"
    )
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def test_load_hooks_see_the_measured_phase_and_each_stream(nursery: trio.Nursery) -> None:
    mock = MockUpstream(MockConfig(tokens=4))
    port = await nursery.start(mock.serve, "127.0.0.1", 0)
    spec = LoadSpec(
        address="127.0.0.1", port=port, request=chat_request(port, stream=True), stream=True,
        connections=2, rate=None, duration_s=30, warmup_s=0.05, max_requests=5, timeout_s=10,
    )  # fmt: skip
    phases: list[tuple[str, float]] = []
    streams: list[list[float]] = []
    load = Load(
        spec,
        on_phase=lambda phase: phases.append((phase, trio.current_time())),
        on_stream=streams.append,
    )
    await load.run()
    assert [name for name, _ in phases] == ["run", "done"]
    assert phases[0][1] >= load.measure_start and phases[1][1] >= load.finished
    assert load.warmup.ok > 0 and load.measured.ok == 5 and load.measured.errors == {}
    assert len(streams) == 5  # the measured streams only, each with its 4 content events
    assert all(len(times) == 4 and times == sorted(times) for times in streams)


async def test_send_one_leaves_the_connection_reusable(nursery: trio.Nursery) -> None:
    mock = MockUpstream(MockConfig())
    port = await nursery.start(mock.serve, "127.0.0.1", 0)
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        for streamed in (False, True):
            assert await send_one(stream, chat_request(port, streamed)) == (200, True)
    assert len(mock.requests) == 2


async def test_llm_scenario_measures_paced_streams(tmp_path: Path) -> None:
    """A bounded step search through an in-process edgegw: every figure is computed from the
    streams that ran (their counts tie to the mock's shape), none is judged for speed."""
    r, out, _ = await bench(
        tmp_path, "--scenario", "llm", "--mock-tokens", "5", "--mock-token-rate", "50",
        "--mock-first-token-ms", "20", "--llm-start", "2", "--llm-max-streams", "4",
        "--duration", "0.3", "--llm-budget", "3",
    )  # fmt: skip
    assert r["schema"] == "edgegw-bench-llm/1" and r["mock"]["tokens"] == 5
    assert r["steps"] and r["steps"][0]["streams"] == 2
    assert "sustained:" in out or "no step passed" in out
    for step in r["steps"]:
        ok = step["ok"]
        assert ok > 0 and step["requests"] == ok + step["errors"]
        # The stamps crossed the gateway: lag and gap come from the mock's own write times.
        assert step["gap_source"] == "stamps"
        assert step["relay_lag_ms"]["count"] == 5 * ok  # one per content event
        assert step["added_gap_ms"]["count"] == 4 * ok  # between consecutive content events
        assert step["ttft_ms"]["count"] == ok and step["ttft_added_ms"] is not None
        # role, 5 content, finish, usage, [DONE]: every stream of the step, warm-up included
        assert step["events"] % 9 == 0 and step["events"] >= 9 * ok
        assert step["cpu_s"] > 0 and step["cpu_us_per_event"] > 0
        assert 0 < step["in_flight"]["mean"] <= step["in_flight"]["max"]
        assert step["passed"] == (step["why"] is None)
    assert r["sustained_streams"] in (0, *(s["streams"] for s in r["steps"] if s["passed"]))
