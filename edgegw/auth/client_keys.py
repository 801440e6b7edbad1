"""Client API keys (EDGEGW_API_KEYS, EDGEGW_API_KEYS_FILE), with the file re-read while
the gateway runs: when it changes (checked every FILE_POLL_S) or at once on SIGHUP.

A re-read swaps the whole key set in one assignment, so a request sees the old set or the
new one, never a mix, and no request waits for it. A file that cannot be read or holds a bad
line keeps the keys in force (and says so in the log); so does a file left with no key at all
while keys were required: client authentication never switches itself off.
"""

from __future__ import annotations

import hmac
import logging
import os
import signal

import trio

from edgegw.settings import Settings, SettingsError, key_file_keys

log = logging.getLogger("edgegw.auth")

# How often the key file's identity (inode, size, mtime) is compared with the last read.
FILE_POLL_S = 1.0


class ClientKeys:
    __slots__ = ("current", "_fixed", "_path", "_seen")

    def __init__(self, settings: Settings) -> None:
        self.current: tuple[bytes, ...] = settings.api_keys
        self._fixed = settings.api_keys_fixed
        self._path = settings.api_keys_file
        self._seen = _identity(self._path) if self._path else None

    @property
    def required(self) -> bool:
        return bool(self.current)

    def accepts(self, presented: bytes | None) -> bool:
        if not presented:
            return False
        ok = False
        # Compare against every key, whatever matched, so timing tells nothing.
        for key in self.current:
            ok |= hmac.compare_digest(presented, key)
        return ok

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Re-read the key file when it changes or on SIGHUP, until cancelled."""
        if self._path is None:
            task_status.started()
            await trio.sleep_forever()
        with trio.open_signal_receiver(signal.SIGHUP) as hangups:
            task_status.started()
            async with trio.open_nursery() as nursery:

                async def on_hangup() -> None:
                    async for _ in hangups:
                        await self.reload()

                nursery.start_soon(on_hangup)
                while True:
                    await trio.sleep(FILE_POLL_S)
                    if _identity(self._path) != self._seen:
                        await self.reload()

    async def reload(self) -> None:
        assert self._path is not None
        self._seen = _identity(self._path)
        try:
            text = await trio.Path(self._path).read_text(encoding="utf-8")
            from_file = key_file_keys(text)
        except (OSError, UnicodeDecodeError, SettingsError) as e:
            log.warning(
                "EDGEGW_API_KEYS_FILE: not re-read (%s); the keys in force stay",
                getattr(e, "strerror", None) or type(e).__name__,
            )
            return
        keys = tuple(dict.fromkeys(self._fixed + from_file))
        if not keys:
            log.warning("EDGEGW_API_KEYS_FILE: holds no key now; the keys in force stay")
            return
        if keys != self.current:
            self.current = keys
            log.info("EDGEGW_API_KEYS_FILE re-read: %d client key(s)", len(keys))


def _identity(path: str | None) -> tuple[int, int, int] | None:
    """What tells that the file changed (an editor's rename gives a new inode)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
