"""`edgegw bench`: a load test of a gateway in front of the built-in mock upstream.

The command always starts the mock (``edgegw.mock``) with the ``--mock-*`` settings. The load
goes to, by default, an edgegw started in this process with the mock as its ``openai``
provider; or to a running gateway (``--target URL``, which must itself be configured to use
the mock); or to the mock itself (``--direct``), the baseline for what a gateway adds.
The load generator is ``edgegw.bench.loadgen``: closed loop (``--connections``) or open loop
(``--rate``), bounded by ``--duration`` and ``--max-requests``. It prints throughput,
latency, time to first token, gaps between stream events and errors by kind, and can write
all of it as JSON (``--json``) and compare it with an earlier run's JSON (``--compare``).
``--scenario llm`` runs the LLM-shaped step search of ``edgegw.bench.llm`` instead: model-paced
streams arriving open loop, the largest number carried at once with the added gap between
tokens kept under ``--llm-gap-p99-ms``, and CPU per event, RSS per stream and TTFT added.

Exit status: 0 when the run completed (errors are counted, not fatal; Ctrl-C during the load
ends it early and still reports), 2 for bad arguments or a target that cannot be reached or
does not answer at the start, 130 when interrupted before the load began, 1 when the --json
file could not be written.

Longer than the guide because most of it is the option table (every `--mock-*` and load
option with its bounds and help text), which reads best as one list.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any, TextIO
from urllib.parse import urlsplit

import orjson
import trio

from edgegw.bench import llm
from edgegw.bench.loadgen import Load, LoadSpec, Probe, probe
from edgegw.bench.options import DEFAULT_CONNECTIONS, DEFAULT_OPEN_LOOP_CONNECTIONS, BenchOptions
from edgegw.bench.report import (
    API_KEY_ENV,
    BenchError,
    _check_writable,
    _comparison,
    _parameters,
    _print_header,
    _print_report,
    _probe_problem,
    _probe_warning,
    _read_run,
    _result,
)
from edgegw.mock import MockConfig, MockUpstream

MAX_DURATION_S = 600.0
MAX_WARMUP_S = 60.0
MAX_REQUESTS = 10_000_000
MAX_CONNECTIONS = 4096
MAX_RATE = 50_000.0  # far above what one Python process can send; a typo guard, not a target
CONNECT_TIMEOUT_S = 5.0  # the first connection, before the run
PROBE_TIMEOUT_S = 5.0  # the first request's answer, at least
MOCK_KEY = "edgegw-bench"  # what the in-process gateway sends the mock (which checks none)
_LLM = llm.LlmSpec()  # the llm scenario's defaults
USAGE = """\
examples:
  edgegw bench                                  # 10 s, streaming, 32 connections, via edgegw
  edgegw bench --no-stream --rate 500 --duration 30 --json run.json
  edgegw bench --direct --json direct.json      # the mock alone: the baseline
  edgegw bench --mock-latency-ms 50 --mock-token-rate 40 --mock-tokens 64 --connections 128
  edgegw bench --compare run.json               # print the change against an earlier run
  edgegw bench --scenario llm --json llm.json   # paced streams: how many at once, and their cost
  edgegw bench --scenario llm --direct          # the same search against the mock alone
  OPENAI_API_URL=http://127.0.0.1:9000/v1 OPENAI_API_KEY=x edgegw serve &
  edgegw bench --target http://127.0.0.1:8080 --mock-port 9000

The target gets Authorization: Bearer $EDGEGW_BENCH_API_KEY when that variable is set."""


def _bounded(kind: Callable[[str], float], lo: float, hi: float) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not lo <= value <= hi or (isinstance(value, float) and math.isnan(value)):
            raise argparse.ArgumentTypeError(f"must be within [{lo:g}, {hi:g}]")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Load-test a gateway in front of the built-in mock upstream and print throughput,\n"
        "latency percentiles, time to first token, gaps between stream events and errors."
    )
    parser.epilog = USAGE
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    where = parser.add_argument_group("what to load")
    where.add_argument(
        "--target",
        metavar="URL",
        help="a running gateway, http://host:port (default: start edgegw in this process, "
        "in front of the mock); it must send the model's requests to the mock",
    )
    where.add_argument(
        "--direct", action="store_true", help="load the mock itself: the baseline for a gateway"
    )
    where.add_argument(
        "--scenario",
        choices=("requests", "llm"),
        default="requests",
        help="requests: the load below (default); llm: the paced-stream step search "
        "(the --llm-* options; the mock paces like a model unless --mock-* say otherwise)",
    )
    where.add_argument(
        "--target-pid",
        type=_bounded(int, 1, 2**31),
        metavar="PID",
        help="llm: read CPU and RSS of this process tree (the --target) instead of this process",
    )
    where.add_argument(
        "--model", default="openai/mock", help="model to ask for (default openai/mock)"
    )
    where.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="streaming chat completions (default) or whole answers",
    )
    load = parser.add_argument_group("how much load")
    load.add_argument(
        "--connections",
        type=_bounded(int, 1, MAX_CONNECTIONS),
        metavar="N",
        help=f"closed loop: N connections, each sending as soon as its answer is in "
        f"(default {DEFAULT_CONNECTIONS}); with --rate: the most that may be opened "
        f"(default {DEFAULT_OPEN_LOOP_CONNECTIONS})",
    )
    load.add_argument(
        "--rate",
        type=_bounded(float, 0.1, MAX_RATE),
        metavar="R",
        help="open loop: R requests per second on schedule, latency timed from when each "
        "was due (no coordinated omission)",
    )
    load.add_argument(
        "--duration",
        type=_bounded(float, 0.1, MAX_DURATION_S),
        default=10.0,
        metavar="S",
        help=f"seconds measured (default 10, at most {MAX_DURATION_S:g})",
    )
    load.add_argument(
        "--warmup",
        type=_bounded(float, 0, MAX_WARMUP_S),
        default=1.0,
        metavar="S",
        help="seconds of load before measuring (default 1)",
    )
    load.add_argument(
        "--max-requests",
        type=_bounded(int, 1, MAX_REQUESTS),
        default=1_000_000,
        metavar="N",
        help="stop after N measured requests (default 1,000,000)",
    )
    load.add_argument(
        "--timeout",
        type=_bounded(float, 0.01, MAX_DURATION_S),
        default=30.0,
        metavar="S",
        help="per request, counted as an error past it (default 30)",
    )
    mock = parser.add_argument_group("the mock upstream")
    mock.add_argument(
        "--mock-latency-ms",
        type=_bounded(float, 0, 600_000),
        default=None,
        metavar="MS",
        help="delay before each answer's head (default 0)",
    )
    mock.add_argument(
        "--mock-token-rate",
        type=_bounded(float, 0, 1e6),
        default=None,
        metavar="R",
        help="tokens per second when streaming; 0 = as fast as possible (default; llm: 30)",
    )
    mock.add_argument(
        "--mock-tokens",
        type=_bounded(int, 0, 100_000),
        default=None,
        metavar="N",
        help="tokens per answer (default 16; llm: 200)",
    )
    mock.add_argument(
        "--mock-chunk-tokens",
        type=_bounded(int, 1, 100_000),
        default=1,
        metavar="N",
        help="tokens per stream chunk (default 1)",
    )
    mock.add_argument(
        "--mock-first-token-ms",
        type=_bounded(float, 0, 600_000),
        default=None,
        metavar="MS",
        help="streams: wait after the head before the first token (default 0; llm: 250)",
    )
    mock.add_argument(
        "--mock-jitter",
        type=_bounded(float, 0, 1),
        default=None,
        metavar="J",
        help="streams: each token gap times uniform [1-J, 1+J] (default 0; llm: 0.2)",
    )
    mock.add_argument(
        "--mock-error-rate",
        type=_bounded(float, 0, 1),
        default=0.0,
        metavar="F",
        help="share of requests the mock answers with a 500 (default 0)",
    )
    mock.add_argument(
        "--mock-port",
        type=_bounded(int, 0, 65535),
        default=0,
        metavar="PORT",
        help="mock port (default: any free one; fix it for a --target configured in advance)",
    )
    search = parser.add_argument_group("the llm scenario (--scenario llm)")
    search.add_argument(
        "--llm-start",
        type=_bounded(int, 1, MAX_CONNECTIONS),
        default=_LLM.start_streams,
        metavar="N",
        help=f"concurrent streams of the first step (default {_LLM.start_streams})",
    )
    search.add_argument(
        "--llm-max-streams",
        type=_bounded(int, 1, MAX_CONNECTIONS),
        default=_LLM.max_streams,
        metavar="N",
        help=f"the search stops at N (default {_LLM.max_streams})",
    )
    search.add_argument(
        "--llm-budget",
        type=_bounded(float, 0.1, 3600),
        default=_LLM.budget_s,
        metavar="S",
        help=f"no step starts that would end after S seconds (default {_LLM.budget_s:g}); "
        "--duration is each step's measured time",
    )
    search.add_argument(
        "--llm-gap-p99-ms",
        type=_bounded(float, 0.01, 10_000),
        default=_LLM.gap_p99_ms,
        metavar="MS",
        help=f"a step passes with no error and the added token gap's p99 at most MS "
        f"(default {_LLM.gap_p99_ms:g})",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write every result to FILE as JSON")
    out.add_argument(
        "--compare", metavar="FILE", help="print the change against an earlier --json FILE"
    )
    out.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a status line on stderr every second (default: when stderr is a terminal)",
    )


def options_from_args(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> BenchOptions:
    """Check what argparse cannot check alone; BenchError names the problem."""
    env = os.environ if environ is None else environ
    if args.direct and args.target:
        raise BenchError("--direct loads the mock itself: give --target or --direct, not both")
    if args.target:
        _split_target(args.target)  # raises BenchError
    if args.json:
        _check_writable(args.json)
    is_llm = args.scenario == "llm"
    if is_llm and (args.compare or args.rate or args.connections or not args.stream):
        raise BenchError("--scenario llm sets its own load: no --compare, --rate, "
                         "--connections or --no-stream")  # fmt: skip
    if args.target_pid and not (is_llm and args.target):
        raise BenchError("--target-pid goes with --scenario llm and --target")
    compare = _read_run(args.compare) if args.compare else None
    base = llm.LLM_MOCK if is_llm else MockConfig()

    def pick(value: float | None, default: float) -> float:
        return default if value is None else value

    try:
        mock = MockConfig(
            latency_s=pick(args.mock_latency_ms, base.latency_s * 1000) / 1000,
            token_rate=pick(args.mock_token_rate, base.token_rate),
            tokens=int(pick(args.mock_tokens, base.tokens)),
            chunk_tokens=args.mock_chunk_tokens,
            error_rate=args.mock_error_rate,
            first_token_s=pick(args.mock_first_token_ms, base.first_token_s * 1000) / 1000,
            jitter=pick(args.mock_jitter, base.jitter),
            stamp=is_llm,
        )
        if is_llm and not mock.token_rate:
            raise ValueError("--scenario llm wants a paced mock (--mock-token-rate > 0)")
    except ValueError as e:
        raise BenchError(str(e)) from None
    spec = llm.LlmSpec(
        start_streams=min(args.llm_start, args.llm_max_streams),
        max_streams=args.llm_max_streams,
        step_s=args.duration,
        budget_s=args.llm_budget,
        gap_p99_ms=args.llm_gap_p99_ms,
    )
    return BenchOptions(
        target=args.target,
        direct=args.direct,
        mock=mock,
        mock_port=args.mock_port,
        model=args.model,
        stream=args.stream,
        connections=args.connections,
        rate=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        max_requests=args.max_requests,
        timeout_s=args.timeout,
        json_path=args.json,
        compare=compare,
        compare_path=args.compare,
        progress=args.progress,
        api_key=env.get(API_KEY_ENV) or None,
        scenario=args.scenario,
        llm=spec,
        target_pid=args.target_pid,
    )


def parse_options(argv: Sequence[str], environ: dict[str, str] | None = None) -> BenchOptions:
    """The options of `edgegw bench ARGV` (argparse exits 2 on a bad one, BenchError here)."""
    parser = argparse.ArgumentParser(prog="edgegw bench")
    add_arguments(parser)
    return options_from_args(parser.parse_args(argv), environ)


def run(args: argparse.Namespace) -> int:
    try:
        options = options_from_args(args)
    except BenchError as e:
        print(f"edgegw bench: {e}", file=sys.stderr)
        return 2
    return trio.run(_run_until_interrupted, options)


async def _run_until_interrupted(options: BenchOptions) -> int:
    interrupt = trio.Event()
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            with trio.open_signal_receiver(signal.SIGINT) as signals:
                async for _ in signals:
                    interrupt.set()

        nursery.start_soon(watch)
        code = await run_bench(options, interrupt=interrupt)
        nursery.cancel_scope.cancel()
    return code


async def run_bench(
    opts: BenchOptions,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    interrupt: trio.Event | None = None,
) -> int:
    """The whole command: start the mock (and the gateway), load, report; the exit status."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    interrupt = trio.Event() if interrupt is None else interrupt
    started_at = datetime.datetime.now(datetime.UTC)
    async with trio.open_nursery() as nursery:
        try:
            return await _bench(opts, nursery, out, err, interrupt, started_at)
        except BenchError as e:
            print(f"edgegw bench: {e}", file=err)
            return 2
        finally:
            nursery.cancel_scope.cancel()  # the mock and the gateway go with the run


async def _bench(
    opts: BenchOptions,
    nursery: trio.Nursery,
    out: TextIO,
    err: TextIO,
    interrupt: trio.Event,
    started_at: datetime.datetime,
) -> int:
    mock = MockUpstream(opts.mock)
    try:
        mock_port = await nursery.start(mock.serve, "127.0.0.1", opts.mock_port)
    except OSError as e:
        raise BenchError(f"cannot start the mock on port {opts.mock_port}: {e.strerror}") from None
    mock_url = f"http://127.0.0.1:{mock_port}/v1"
    model = opts.model
    if opts.direct:
        kind, base = "direct", f"http://127.0.0.1:{mock_port}"
        model = model.split("/", 1)[1] if "/" in model else model  # the provider's own name
    elif opts.target:
        kind, base = "external", opts.target
    else:
        kind, base = "in-process", await _start_gateway(nursery, mock_url)
    host, port, path = _split_target(base)
    most = opts.loop_connections
    if opts.scenario == "llm":
        most = math.ceil(opts.llm.max_streams * 1.25) + llm.MAX_EXTRA_CONNECTIONS
    need = most * {"in-process": 4, "direct": 2, "external": 2}[kind] + 64
    _ensure_file_descriptors(need, most)
    address = await _resolve(host, port)
    spec = LoadSpec(
        address=address,
        port=port,
        request=_encode_request(host, port, path, model, opts.stream, opts.api_key),
        stream=opts.stream,
        connections=opts.loop_connections,
        rate=opts.rate,
        duration_s=opts.duration_s,
        warmup_s=opts.warmup_s,
        max_requests=opts.max_requests,
        timeout_s=opts.timeout_s,
    )
    params = _parameters(opts, kind, base, path, model, mock_url)
    if opts.scenario == "llm":
        llm.print_header(opts.mock, opts.llm, f"{base}{path} ({kind})", out)
    else:
        _print_header(params, out)
    load = Load(spec)
    searched: dict[str, Any] = {}
    first: Probe | None = None
    problem: str | None = None
    async with trio.open_nursery() as watchers:
        with trio.CancelScope() as startup:
            watchers.start_soon(_interrupt_on, interrupt, startup, load)
            # Generous: a strict --timeout is for counting slow answers, not refusing to start.
            wait_s = max(opts.timeout_s, PROBE_TIMEOUT_S)
            first = await probe(spec, connect_timeout_s=CONNECT_TIMEOUT_S, answer_timeout_s=wait_s)
            problem = _probe_problem(first, base)
            if problem is None:
                if first.kind is not None or not 200 <= first.status < 300:
                    print(_probe_warning(first, kind, mock_url), file=err)
                if opts.progress if opts.progress is not None else err.isatty():
                    watchers.start_soon(_show_progress, load, err, err.isatty())
        if first is not None and problem is None and opts.scenario == "llm":
            searched = await _search(opts, spec, kind, out)
        elif first is not None and problem is None:
            await load.run()  # outside `startup`: Ctrl-C now ends the load, not the command
        watchers.cancel_scope.cancel()
    if first is None:
        return 130
    if problem is not None:
        raise BenchError(problem)
    if opts.scenario == "llm":
        result = {**searched, "schema": "edgegw-bench-llm/1", "parameters": params,
                  "started_at": started_at.isoformat()}  # fmt: skip
        llm.print_search(result, out)
    else:
        result = _result(load, params, started_at)
    if opts.compare is not None and opts.scenario != "llm":
        result["comparison"] = _comparison(opts.compare, result, opts.compare_path or "")
    if opts.scenario != "llm":
        _print_report(result, out)
    if opts.json_path:
        try:
            data = orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n"
            await trio.Path(opts.json_path).write_bytes(data)
        except OSError as e:
            print(f"edgegw bench: cannot write {opts.json_path}: {e.strerror}", file=err)
            return 1
    return 0


async def _search(opts: BenchOptions, spec: LoadSpec, kind: str, out: TextIO) -> dict[str, Any]:
    """The llm scenario's step search against the probed target."""
    if opts.target_pid is not None:
        meter = llm.Meter.of_pid(opts.target_pid, f"process {opts.target_pid} and its children")
    else:
        meter = llm.Meter.this_process(
            {
                "in-process": "this process: gateway, mock and load generator together",
                "direct": "this process: mock and load generator (no gateway)",
                "external": "this process: mock and load generator (not the target)",
            }[kind]
        )
    target = llm.Target(spec.address, spec.port, spec.request)
    return await llm.search(target, opts.mock, opts.llm, meter, out=out)


async def _start_gateway(nursery: trio.Nursery, mock_url: str) -> str:
    """edgegw on 127.0.0.1, any port, with the mock as its only provider; its base URL."""
    from edgegw.server import serve
    from edgegw.settings import Settings

    # Only what the run needs: the user's environment (real provider keys, telemetry) stays out.
    settings = Settings.load(
        environ=MappingProxyType(
            {
                "SERVER_HOST": "127.0.0.1",
                "SERVER_PORT": "0",
                "OPENAI_API_URL": mock_url,
                "OPENAI_API_KEY": MOCK_KEY,
                "LOG_LEVEL": "WARNING",
            }
        )
    )
    binds: list[str] = await nursery.start(
        lambda task_status: serve(settings, task_status=task_status)
    )
    return binds[0]


def _split_target(url: str) -> tuple[str, int, str]:
    """(host, port, path of chat completions) of a gateway's base URL."""
    try:
        parts = urlsplit(url)
        port = parts.port or 80
    except ValueError:
        raise BenchError(f"--target {url!r}: not a URL") from None
    if parts.scheme != "http" or not parts.hostname:
        raise BenchError(f"--target {url!r}: expected http://host:port (plain HTTP only)")
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions" if path.endswith("/v1") else "/v1/chat/completions"
    return parts.hostname, port, path


async def _resolve(host: str, port: int) -> str:
    """One address for the whole run (a name is not looked up again per connection)."""
    try:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    except (OSError, trio.TooSlowError):
        raise BenchError(f"cannot resolve {host}") from None
    # IPv4 first: "localhost" often lists ::1 first while servers listen on 127.0.0.1.
    infos.sort(key=lambda info: info[0] != trio.socket.AF_INET)
    return str(infos[0][4][0])


def _ensure_file_descriptors(need: int, connections: int) -> None:
    try:
        import resource
    except ImportError:  # not on this platform: nothing to check
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard == resource.RLIM_INFINITY or hard >= need:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        else:
            raise BenchError(
                f"{connections} connections need about {need} open files; the limit is {hard}"
            )


def _encode_request(
    host: str, port: int, path: str, model: str, stream: bool, api_key: str | None
) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    payload = orjson.dumps(body)
    shown = f"[{host}]" if ":" in host else host
    lines = [
        f"POST {path} HTTP/1.1",
        f"host: {shown}:{port}",
        "content-type: application/json",
        "accept: text/event-stream" if stream else "accept: application/json",
        "user-agent: edgegw-bench",
        f"content-length: {len(payload)}",
    ]
    if api_key:
        lines.append(f"authorization: Bearer {api_key}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


async def _interrupt_on(event: trio.Event, startup: trio.CancelScope, load: Load) -> None:
    """Ctrl-C: before the load, give up; during it, stop and report what ran."""
    await event.wait()
    startup.cancel()
    load.interrupt()


async def _show_progress(load: Load, err: TextIO, tty: bool) -> None:
    """One status line about once a second: rewritten in place on a terminal, else appended."""
    last_count, last_t = 0, trio.current_time()
    try:
        while True:
            await trio.sleep(1.0)
            now = trio.current_time()
            count = load.warmup.requests + load.measured.requests
            errors = load.warmup.error_count + load.measured.error_count
            rate = (count - last_count) / (now - last_t) if now > last_t else 0.0
            last_count, last_t = count, now
            phase = load.phase()
            if phase == "warm-up":
                clock = f"warm-up {now - load.start:4.1f}/{load.spec.warmup_s:g} s"
            else:
                clock = f"{phase} {now - load.measure_start:5.1f}/{load.spec.duration_s:g} s"
            line = f"[{clock}] {count:,} requests, {errors:,} errors, {rate:,.0f} req/s"
            err.write(f"\r{line}\x1b[K" if tty else line + "\n")
            err.flush()
    finally:
        if tty:
            err.write("\r\x1b[K")
            err.flush()
