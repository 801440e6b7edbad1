"""Client API keys (EDGEGW_API_KEYS, EDGEGW_API_KEYS_FILE, with its tenants: edgegw.keyfile),
with the file re-read while the gateway runs: when it changes (checked every FILE_POLL_S) or
at once on SIGHUP; and who a request comes from (`Caller`): a key's tenant, an OIDC caller's
tenant through TENANTS_OIDC_CLAIM, or the default tenant.

A presented key is found by its SHA-256 (keys are held only as hashes): a dict lookup whose
timing can tell at most something of a hash, never of a key.

A re-read swaps the whole key set in one assignment, so a request sees the old set or the
new one, never a mix, and no request waits for it. A file that cannot be read or holds a bad
line keeps the keys in force (and says so in the log); so does a file left with no key at all
while keys were required: client authentication never switches itself off.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

import trio

from edgegw.errors import fail
from edgegw.keyfile import Caller, Key, KeyFile, admin_keys, caller_of, digest
from edgegw.settings import Settings, SettingsError, read_key_file

log = logging.getLogger("edgegw.auth")

# How often the key file's identity (inode, size, mtime) is compared with the last read.
FILE_POLL_S = 1.0


# The key name of callers without a key of their own, in logs and metrics.
OIDC_KEY = "oidc"
ANONYMOUS_KEY = "-"


class ClientKeys:
    __slots__ = (
        "current",
        "required",
        "_fixed",
        "_path",
        "_seen",
        "_default",
        "_claim",
        "_admin_lines",
        "_admin_seen",
        "_admin",
        "_admin_api",
        "_anonymous",
    )

    def __init__(
        self,
        settings: Settings,
        admin_lines: Callable[[], Mapping[tuple[str, str], tuple[str, float]]] = dict,
    ) -> None:
        """`admin_lines`: the admin API's live keys as stored (edgegw.tenants.budgets)."""
        self._admin_lines = admin_lines
        self._admin_seen: object = None
        self._admin: Mapping[bytes, Key] = {}
        # With the admin API on, keys are required even before it has made one.
        self._admin_api = settings.tenants_admin_key is not None
        self.current: KeyFile = settings.key_file
        # Whether a request needs a key: an attribute, not a property, as every request asks.
        self.required = bool(self.current.keys) or self._admin_api
        self._anonymous: tuple[KeyFile, Caller] | None = None  # the last, for its key file
        self._fixed = settings.api_keys_fixed
        self._path = settings.api_keys_file
        self._seen = _identity(self._path) if self._path else None
        self._default = settings.tenants_default
        self._claim = (
            None if settings.tenants_oidc_claim is None else settings.tenants_oidc_claim.split(".")
        )

    def _admin_keys(self) -> Mapping[bytes, Key]:
        lines = self._admin_lines()
        if lines is not self._admin_seen:  # the store swaps in a new mapping when it changes
            self._admin, self._admin_seen = admin_keys(lines), lines
        return self._admin

    def accepts(self, presented: bytes | None) -> bool:
        return self.caller(presented) is not None

    def caller(self, presented: bytes | None) -> Caller | None:
        """The caller of key `presented`; None for no key or an unknown one; a key or a
        tenant past its expiry is refused (401 `key_expired`)."""
        if not presented:
            return None
        key_file = self.current
        d = digest(presented)
        key = key_file.keys.get(d)
        if key is None:
            key = self._admin_keys().get(d)
            if key is None or key.tenant not in key_file.tenants:
                return None
        caller = caller_of(key_file, key)
        now = time.time()
        for expires in (key.expires, caller.tenant.expires):
            if expires is not None and expires <= now:
                raise fail(
                    "key_expired",
                    "This API key has expired.",
                    headers=((b"www-authenticate", b"Bearer"),),
                )
        return caller

    def oidc_caller(self, claims: dict[str, Any]) -> Caller:
        """An OIDC caller's tenant: the first value of TENANTS_OIDC_CLAIM (a dotted path,
        a string or a list of strings) that names a tenant, else the default tenant."""
        key_file = self.current
        tenant = self._default
        if self._claim is not None:
            value: Any = claims
            for part in self._claim:
                value = value.get(part) if isinstance(value, dict) else None
            for name in (
                [value] if isinstance(value, str) else value if isinstance(value, list) else ()
            ):
                if isinstance(name, str) and name in key_file.tenants:
                    tenant = name
                    break
        return caller_of(key_file, Key(tenant, OIDC_KEY))

    def anonymous(self) -> Caller:
        """The caller of a request without client authentication: the default tenant (made
        once a key file: three frozen objects a request were 2 % of a request's time)."""
        key_file = self.current
        if (made := self._anonymous) is None or made[0] is not key_file:
            made = self._anonymous = (
                key_file,
                caller_of(key_file, Key(self._default, ANONYMOUS_KEY)),
            )
        return made[1]

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
            key_file = read_key_file(text, self._fixed, self._default)
        except (OSError, UnicodeDecodeError) as e:
            log.warning(
                "EDGEGW_API_KEYS_FILE: not re-read (%s); the keys in force stay",
                getattr(e, "strerror", None) or type(e).__name__,
            )
            return
        except SettingsError as e:  # names the line, never a key
            log.warning("%s; the keys in force stay", e)
            return
        if not key_file.keys:
            log.warning("EDGEGW_API_KEYS_FILE: holds no key now; the keys in force stay")
            return
        if key_file != self.current:
            self.current = key_file
            self.required = True  # it holds keys
            log.info(
                "EDGEGW_API_KEYS_FILE re-read: %d client key(s), %d tenant(s)",
                len(key_file.keys),
                len(key_file.tenants),
            )


def _identity(path: str | None) -> tuple[int, int, int] | None:
    """What tells that the file changed (an editor's rename gives a new inode)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
