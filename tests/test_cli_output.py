"""The CLI's output as a shell sees it: `edgegw --version`, and a reader that closes stdout
before edgegw has written (`edgegw version | head -1`) ends the command quietly, with no
traceback, whichever command was writing. Real processes, real pipes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from edgegw.__main__ import EXIT_BROKEN_PIPE

EDGEGW = [sys.executable, "-m", "edgegw"]
FIXTURE = Path(__file__).parent / "fixtures" / "models_dev_api.json"
# Wall time for a child process (no timer of ours to jump to): a net, not a measurement.
PROCESS_S = 60


def _env(buffered: bool) -> dict[str, str]:
    """The environment with stdout block-buffered (a write fails at the flush) or unbuffered
    (the write itself fails): a closed pipe shows at different places in the two."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return env if buffered else {**env, "PYTHONUNBUFFERED": "1"}


@contextmanager
def _closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose read end is already closed."""
    read, write = os.pipe()
    os.close(read)
    try:
        yield write
    finally:
        os.close(write)


async def test_version_flag_prints_what_version_prints() -> None:
    with trio.fail_after(PROCESS_S):
        flag = await trio.run_process([*EDGEGW, "--version"], capture_stdout=True)
        command = await trio.run_process([*EDGEGW, "version"], capture_stdout=True)
    assert flag.stdout == command.stdout
    assert flag.stdout.startswith(b"edgegw ") and b"\npython " in flag.stdout


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize(
    "args",
    [
        ["version"],
        ["--version"],
        ["--help"],
        ["serve", "--help"],
        ["demo", "--port", "0"],
        ["models", "sync", "--from", str(FIXTURE)],
        ["bench", "--no-stream", "--duration", "0.3", "--warmup", "0", "--no-progress"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
async def test_a_closed_stdout_ends_the_command_quietly(
    args: list[str], buffered: bool, tmp_path: Path
) -> None:
    if args[0] == "models":
        args = [*args, "--out", str(tmp_path / "table.json")]
    with _closed_pipe() as stdout, trio.fail_after(PROCESS_S):
        done = await trio.run_process(
            [*EDGEGW, *args],
            stdout=stdout,
            capture_stderr=True,
            check=False,
            env=_env(buffered),
        )
    assert done.stderr == b""
    if args[-1] == "--help" and not buffered:
        # argparse ignores its own failed write of the help (and exits 0); nothing is left
        # to flush after it.
        assert done.returncode in (0, EXIT_BROKEN_PIPE)
    else:  # the demo included: its banner failed, so it stopped serving
        assert done.returncode == EXIT_BROKEN_PIPE


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
async def test_a_reader_that_takes_one_line(buffered: bool) -> None:
    """`edgegw version | head -1`: the first line arrives; closing after it is no error."""
    proc = await trio.lowlevel.open_process(
        [*EDGEGW, "version"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(buffered),
    )
    try:
        seen = b""
        with trio.fail_after(PROCESS_S):
            while b"\n" not in seen:
                chunk = await proc.stdout.receive_some(1)
                assert chunk, seen
                seen += chunk
            await proc.stdout.aclose()
            errors = b""
            while chunk := await proc.stderr.receive_some(4096):
                errors += chunk
            status = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proc.stdout.aclose()
        await proc.stderr.aclose()
    assert seen.startswith(b"edgegw ") and errors == b""
    # Whether edgegw wrote the rest before or after the close is the scheduler's choice.
    assert status in (0, EXIT_BROKEN_PIPE)
