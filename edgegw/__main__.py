"""`edgegw serve`, `edgegw demo`, `edgegw bench`, `edgegw models sync` and `edgegw version`
(also `edgegw --version` and `python -m edgegw`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

import trio

from edgegw.providers import ProviderConfig
from edgegw.settings import EXIT_CONFIG, Settings, SettingsError

DEMO_KEY = "demo-upstream-key"
# What the demo's mock lists: the model its examples use, and the mock's own names.
DEMO_MODELS = ("gpt-4o-mini", "mock-small", "mock-large")
# The status when stdout's reader leaves first (`edgegw version | head -1`): 128 + SIGPIPE, what
# a tool the signal ended reports, so a pipeline under `set -o pipefail` treats edgegw like `cat`.
EXIT_BROKEN_PIPE = 141


class _PrintVersions(argparse.Action):
    """`--version`: what `edgegw version` prints, worked out only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        print(versions())
        parser.exit()


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI; `bench`'s options are added only when `command` is "bench", so that
    `serve` never imports the benchmarking code."""
    parser = argparse.ArgumentParser(
        prog="edgegw", description="Edge inference gateway (OpenAI API)."
    )
    parser.add_argument("--version", action=_PrintVersions, help="the same as `edgegw version`")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--host", help="address to listen on (SERVER_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (SERVER_PORT, default 8080)")
    serve.add_argument(
        "--config", help="YAML/JSON file with settings (keys named like the environment variables)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="processes sharing the port (EDGEGW_WORKERS, default: one per core)",
    )
    serve.add_argument("--worker-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--supervisor-pid", type=int, help=argparse.SUPPRESS)
    # A worker's private socket for its metrics, which the supervisor scrapes and sums.
    serve.add_argument("--metrics-socket", help=argparse.SUPPRESS)
    demo = sub.add_parser("demo", help="run the gateway in front of the built-in mock provider")
    demo.add_argument("--port", type=int, default=8080, help="gateway port (default 8080)")
    demo.add_argument(
        "--token-rate", type=float, default=20.0, help="mock tokens per second when streaming"
    )
    sub.add_parser("version", help="print edgegw's version and those of its bundled libraries")
    bench = sub.add_parser("bench", help="load-test a gateway against the built-in mock upstream")
    if command == "bench":
        from edgegw.bench import command as benchcmd

        benchcmd.add_arguments(bench)
    models = sub.add_parser("models", help="the community model table")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    sync = models_sub.add_parser(
        "sync",
        help="convert the models.dev dataset into the community model table",
        description=(
            "Read models.dev's api.json (a URL or a local file) and write the table of context "
            "windows, per-token prices and modalities that GET /v1/models?include=... uses."
        ),
    )
    sync.add_argument(
        "--from",
        dest="source",
        default=None,
        metavar="URL_OR_FILE",
        help="models.dev's api.json: an http(s) URL or a local file "
        "(default https://models.dev/api.json)",
    )
    sync.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help=(
            "where to write the table (default: EDGEGW_COMMUNITY_MODELS_FILE if set, else "
            "$XDG_DATA_HOME/edgegw/community_models.json, which the gateway reads)"
        ),
    )
    return parser


def _models_sync(source: str | None, out: str | None) -> int:
    from edgegw.models.community import DEFAULT_SOURCE, CommunityError, sync, user_table_path

    target = Path(
        out or os.environ.get("EDGEGW_COMMUNITY_MODELS_FILE", "").strip() or user_table_path()
    )
    try:
        counts = sync(source or DEFAULT_SOURCE, target)
    except CommunityError as e:
        print(f"edgegw models sync: {e}", file=sys.stderr)
        return 1
    summary = ", ".join(f"{pid} {n}" for pid, n in sorted(counts.items()))
    print(f"wrote {sum(counts.values())} models to {target} ({summary})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; a reader that closes stdout early ends it quietly, with EXIT_BROKEN_PIPE."""
    try:
        try:
            status = _command(argv)
        finally:  # also after argparse's exit: a closed pipe shows at this flush
            sys.stdout.flush()
    except* BrokenPipeError:  # in a group when a Trio task wrote (the demo's banner, a report)
        # Python ignores SIGPIPE, so the write raised; stdout now goes nowhere, so that the
        # interpreter's own flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = EXIT_BROKEN_PIPE
    return status


def _command(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(argv[0] if argv else None).parse_args(argv)
    if args.command == "models":
        return _models_sync(args.source, args.out)
    if args.command == "version":
        print(versions())
        return 0
    if args.command == "bench":
        from edgegw.bench import command as benchcmd

        return benchcmd.run(args)
    try:
        if args.command == "serve":
            settings = Settings.load(
                config_file=args.config,
                overrides={"host": args.host, "port": args.port, "workers": args.workers},
            )
        else:
            settings = Settings.load(overrides={"port": args.port})
    except SettingsError as e:
        print(f"edgegw: {e}", file=sys.stderr)
        return 2
    from edgegw.logs import configure

    configure(settings)
    if args.command == "serve" and args.worker_fd is None:
        from edgegw.envcheck import exposure

        for message in settings.start_warnings:  # once per machine, not once per worker
            logging.getLogger("edgegw.settings").warning("%s", message)
        keyed = settings.key_file.keys or settings.tenants_admin_key  # hashed keys count too
        if warning := exposure(settings.host, bool(keyed or settings.auth_enabled)):
            logging.getLogger("edgegw.settings").warning("%s", warning)
    try:
        if args.command == "serve":
            workers = settings.workers or os.cpu_count() or 1
            if args.worker_fd is None and workers > 1:
                from edgegw import supervisor

                return supervisor.run(settings, workers, args.config)
            bind = None if args.worker_fd is None else f"fd://{args.worker_fd}"
            refused: BaseException | None = None
            try:
                trio.run(
                    _serve_until_signal, settings, bind, args.metrics_socket, args.supervisor_pid
                )
            except* SettingsError as group:  # found while starting (e.g. an unusable issuer)
                refused = group.exceptions[0]
            if refused is not None:
                print(f"edgegw: {refused}", file=sys.stderr, flush=True)
                return EXIT_CONFIG
        else:
            trio.run(_demo, settings, args.token_rate)
    except KeyboardInterrupt:
        pass
    return 0


def versions() -> str:
    """One line per component: edgegw, Python, and the HTTP stack it carries."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import h11

    lines = []
    for dist in ("edgegw", "hypercorn", "trio", "orjson"):
        try:
            lines.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            lines.append(f"{dist} unknown")
    lines.insert(1, f"h11 {h11.__version__}")  # type: ignore[attr-defined]
    lines.append(f"python {platform.python_version()}")
    return "\n".join(lines)


async def _serve_until_signal(
    settings: Settings,
    bind: str | None = None,
    metrics_socket: str | None = None,
    supervisor_pid: int | None = None,
) -> None:
    from edgegw.server import serve

    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        nursery.start_soon(_set_on_signal, stop)
        if supervisor_pid is not None:
            from edgegw.supervisor import exit_with_supervisor

            nursery.start_soon(exit_with_supervisor, supervisor_pid, stop)

        async def serving(task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(
                settings,
                shutdown_trigger=stop.wait,
                bind=bind,
                metrics_socket=metrics_socket,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()

        binds = await nursery.start(serving)
        if bind is None:  # a supervisor's worker: the supervisor says where it listens
            print(f"edgegw: listening on {binds[0]}", flush=True)


async def _demo(settings: Settings, token_rate: float) -> None:
    from dataclasses import replace

    from edgegw.mock import MockConfig, MockUpstream
    from edgegw.providers import PROVIDERS
    from edgegw.server import serve

    config = MockConfig(token_rate=token_rate, tokens=24, api_key=DEMO_KEY, models=DEMO_MODELS)
    mock = MockUpstream(config)
    async with trio.open_nursery() as nursery:
        mock_port = await nursery.start(mock.serve, "127.0.0.1", 0)
        providers = {
            "openai": ProviderConfig(
                PROVIDERS["openai"], f"http://127.0.0.1:{mock_port}/v1", DEMO_KEY
            )
        }
        settings = replace(settings, providers=MappingProxyType(providers))
        stop = trio.Event()
        nursery.start_soon(_set_on_signal, stop)
        async with trio.open_nursery() as gateway:
            binds = await gateway.start(
                lambda task_status: serve(
                    settings, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            _print_examples(binds[0], mock_port)
        # serve() has drained and returned; now the mock and the signal watcher go.
        nursery.cancel_scope.cancel()


async def _set_on_signal(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop.set()
            return


def _print_examples(base: str, mock_port: int) -> None:
    print(
        f"""
edgegw demo: gateway on {base}, built-in mock provider on http://127.0.0.1:{mock_port}
(the mock stands in for the 'openai' provider; no network and no keys needed; it answers
`tools` with a call to one and `response_format` json_schema with JSON the schema accepts)

  curl -s {base}/v1/models

  curl -s {base}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model": "openai/gpt-4o-mini", "messages": [{{"role": "user", "content": "Hello"}}]}}'

  curl -sN {base}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model": "openai/gpt-4o-mini", "stream": true, "messages": [{{"role": "user", "content": "Hello"}}]}}'

  python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="{base}/v1", api_key="unused")
print(client.chat.completions.create(model="openai/gpt-4o-mini",
      messages=[{{"role": "user", "content": "Hello"}}]).choices[0].message.content)
for chunk in client.chat.completions.create(model="openai/gpt-4o-mini", stream=True,
      messages=[{{"role": "user", "content": "Hello"}}]):
    print(chunk.choices[0].delta.content or "", end="", flush=True) if chunk.choices else None
print()
PY

Ctrl-C to stop.""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
