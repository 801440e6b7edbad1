"""EDGEGW_API_KEYS_FILE re-read while the gateway serves: a change of the file (or SIGHUP)
swaps the keys without a restart and without a failed request; a broken or emptied file keeps
the keys in force."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import orjson
import trio

from edgegw.mock import MockUpstream

from .conftest import Gateway, start_gateway, upstream_env
from .rawhttp import request

CHAT = orjson.dumps({"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]})


async def status_with(gw: Gateway, key: str) -> int:
    resp = await request(
        gw.port, "POST", "/v1/chat/completions", CHAT, [("authorization", f"Bearer {key}")]
    )
    return resp.status


def replace(path: Path, text: str) -> None:
    """As editors and config tools do: write aside, then rename over the file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def wait_for(gw: Gateway, key: str, status: int) -> None:
    with trio.fail_after(10):
        while await status_with(gw, key) != status:  # noqa: ASYNC110 (the gateway's state)
            await trio.sleep(0.05)


async def test_key_file_changes_apply_without_a_failed_request(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# clients\nkey-stays\nkey-leaves\n")
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_API_KEYS_FILE=str(keys)))
    assert await status_with(gw, "key-comes") == 401
    failures: list[int] = []
    done = trio.Event()

    async def load() -> None:  # a steady client whose key is in every version of the file
        sent = 0
        while not done.is_set() and sent < 2000:
            status = await status_with(gw, "key-stays")
            sent += 1
            if status != 200:
                failures.append(status)

    async with trio.open_nursery() as clients:
        for _ in range(4):
            clients.start_soon(load)
        replace(keys, "key-stays\nkey-comes\n")
        await wait_for(gw, "key-comes", 200)
        assert await status_with(gw, "key-leaves") == 401
        keys.write_text("key-stays\nkey-comes\nkey-third\n")  # in place, same inode
        await wait_for(gw, "key-third", 200)
        done.set()
    assert failures == []


async def test_sighup_rereads_at_once(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("old-key\n")
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_API_KEYS_FILE=str(keys)))
    # Same size and a restored mtime: only the signal can tell the file changed.
    stat = keys.stat()
    keys.write_text("new-key\n")
    os.utime(keys, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    await trio.sleep(1.5)  # past a poll: the change is not seen without the signal
    assert await status_with(gw, "new-key") == 401
    os.kill(os.getpid(), signal.SIGHUP)
    await wait_for(gw, "new-key", 200)
    assert await status_with(gw, "old-key") == 401


async def test_a_broken_or_empty_file_keeps_the_keys_in_force(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("good-key\n")
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_API_KEYS_FILE=str(keys)))
    for text in ("bad key with spaces\n", "# nothing left\n"):
        replace(keys, text)
        await trio.sleep(1.5)  # at least one poll saw it
        assert await status_with(gw, "good-key") == 200
        assert await status_with(gw, "anything") == 401
    keys.unlink()
    await trio.sleep(1.5)
    assert await status_with(gw, "good-key") == 200
