"""Tenants' usage by calendar period, and the budgets it is held to, kept across restarts
in SQLite (WAL) off the request path.

Periods are calendar ones in UTC: the day, the ISO week (from Monday), the month. Chosen
over rolling windows because a budget then means what an invoice means ("50 USD this
month"), resets at a time everyone can name, and needs one counter per period rather than
a history per request.

`Usage` is the process's counters, by scope (`t/<tenant>`, `k/<tenant>/<key>`) and period:
a request adds to them in memory when it ends, and `Usage.run` (a process-lifetime task)
writes what was added to the SQLite file every FLUSH_S in a worker thread, then reads the
current periods back, so that the workers of one node (`--workers N`) sharing the file
agree within a flush. No request waits for the disk; a crash loses at most FLUSH_S of
usage; a graceful stop writes the rest.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from edgegw.keyfile import PERIODS, Budget
from edgegw.settings import Settings, SettingsError

if TYPE_CHECKING:
    import sqlite3  # imported when a store is opened: 1 MiB of every start otherwise

log = logging.getLogger("edgegw.tenants")

# How often added usage is written (and the other workers' read back).
FLUSH_S = 1.0
# The last write on shutdown gets at most this long.
FINAL_FLUSH_S = 5.0
# SQLite's wait for another worker's write lock.
BUSY_TIMEOUT_MS = 5000
STORE_NAME = "tenants.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    scope TEXT NOT NULL,
    period TEXT NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    nano_usd INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, period)
) WITHOUT ROWID
"""
ADD = """
INSERT INTO usage (scope, period, tokens, nano_usd) VALUES (?, ?, ?, ?)
ON CONFLICT (scope, period) DO UPDATE SET
    tokens = tokens + excluded.tokens, nano_usd = nano_usd + excluded.nano_usd
"""
CURRENT = "SELECT scope, period, tokens, nano_usd FROM usage WHERE period IN (?, ?, ?)"
# Keys made by the admin API (edgegw.routes.admin): the key file's grammar for a key line
# (`line`: its attributes, sha256= included), never the key itself.
KEYS_SCHEMA = """
CREATE TABLE IF NOT EXISTS admin_keys (
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    line TEXT NOT NULL,
    created REAL NOT NULL,
    revoked REAL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID
"""
LIVE_KEYS = "SELECT tenant, name, line, created FROM admin_keys WHERE revoked IS NULL"


def period_start(period: str, now: float) -> datetime:
    at = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        return at - timedelta(days=at.weekday())
    if period == "month":
        return at.replace(day=1)
    return at


def period_end(period: str, now: float) -> float:
    return _day_ends(int(now // 86400))[period]


@lru_cache(maxsize=4)
def _day_ends(day: int) -> dict[str, float]:
    return {p: _period_end(p, day * 86400.0) for p in PERIODS}


def _period_end(period: str, now: float) -> float:
    start = period_start(period, now)
    if period == "day":
        return (start + timedelta(days=1)).timestamp()
    if period == "week":
        return (start + timedelta(days=7)).timestamp()
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start.replace(year=year, month=month).timestamp()


def period_key(period: str, now: float) -> str:
    """`day:2026-12-05`, `week:2026-11-30` (its Monday), `month:2026-12`."""
    return _day_keys(int(now // 86400))[period]


def period_keys(now: float) -> dict[str, str]:
    """Every period's key at `now`, by period."""
    return _day_keys(int(now // 86400))


@lru_cache(maxsize=4)
def _day_keys(day: int) -> dict[str, str]:
    """The periods' keys of a UTC day (every request asks: formatting dates is slow)."""
    out = {}
    for period in PERIODS:
        start = period_start(period, day * 86400.0)
        out[period] = (
            f"{period}:{start:%Y-%m}" if period == "month" else f"{period}:{start:%Y-%m-%d}"
        )
    return out


def default_store_path() -> Path:
    """edgegw's data directory, as for the community table: $XDG_DATA_HOME/edgegw."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "edgegw" / STORE_NAME


class StoreError(SettingsError):
    """The usage file cannot be opened (the start stops, naming TENANTS_STORE_PATH)."""


def store_path(settings: Settings) -> Path | None:
    """TENANTS_STORE_PATH; else, when the key file sets a budget or the admin API is on
    (what must survive a restart), the data directory's file; else None (in memory)."""
    if settings.tenants_store_path is not None:
        return Path(settings.tenants_store_path)
    wanted = settings.key_file.has_budgets or settings.tenants_admin_key is not None
    return default_store_path() if wanted else None


Totals = dict[tuple[str, str], list[int]]  # (scope, period key) -> [tokens, nano-USD]
LiveKeys = dict[tuple[str, str], tuple[str, float]]  # (tenant, name) -> (line, created)


def _store_errors() -> tuple[type[Exception], ...]:
    """What a store's write can raise (evaluated only when something was raised)."""
    import sqlite3

    return (OSError, sqlite3.Error)


class Usage:
    """Usage by scope and period: in memory, and in the SQLite file at `path` when given.

    A request adds to `_added` (by scope: two dict updates); every FLUSH_S `run` folds it
    into each current period, written to the file (and the file's totals read back) or,
    without one, kept in memory. What is spent is the last totals plus what was added since.
    """

    def __init__(self, path: Path | None, clock: Callable[[], float]) -> None:
        self.path = path
        self._clock = clock
        self._totals: Totals = {}
        self._added: dict[str, list[int]] = {}
        self._db: sqlite3.Connection | None = None
        # The admin API's live keys, as the file last held them: (tenant, name) -> (line,
        # created); re-read with every flush, so every worker sharing the file sees them.
        self.admin_keys: LiveKeys = {}
        self._lock = trio.Lock()  # one worker thread at a time on the connection

    def spent(self, scope: str, unit: str, period: str, now: float) -> int:
        return self.spent_in(scope, 0 if unit == "tokens" else 1, period_key(period, now))

    def spent_in(self, scope: str, i: int, key: str) -> int:
        """What `scope` spent in the period `key` (period_key's): tokens (i 0) or nano-USD (1)."""
        found = self._totals.get((scope, key))
        added = self._added.get(scope)
        return (0 if found is None else found[i]) + (0 if added is None else added[i])

    def spent_budget(
        self, scope: str, budgets: tuple[Budget, ...], keys: dict[str, str]
    ) -> Budget | None:
        """The first of `budgets` that `scope` has spent in its current period (`keys`:
        period_keys'); every request with a budget asks, so spent_in is inlined."""
        added = self._added.get(scope)
        for b in budgets:
            i = b.unit != "tokens"  # 0 tokens, 1 nano-USD
            found = self._totals.get((scope, keys[b.period]))
            if (0 if found is None else found[i]) + (0 if added is None else added[i]) >= b.limit:
                return b
        return None

    def add(self, scopes: tuple[str, ...], tokens: int, nano_usd: int) -> None:
        if not tokens and not nano_usd:
            return
        for scope in scopes:
            row = self._added.get(scope)
            if row is None:
                self._added[scope] = [tokens, nano_usd]
            else:
                row[0] += tokens
                row[1] += nano_usd

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the file and read the current periods, started(); then fold what was added
        every FLUSH_S until cancelled, and once more then. Raises StoreError before
        started()."""
        if self.path is not None:
            try:
                await trio.to_thread.run_sync(self._open)
                await self._flush()
            except _store_errors() as e:
                raise StoreError(f"TENANTS_STORE_PATH: cannot use {self.path} ({e})") from None
        task_status.started()
        try:
            while True:
                await trio.sleep(FLUSH_S)
                await self._flush_logged()
        finally:
            with trio.move_on_after(FINAL_FLUSH_S, shield=True):
                await self._flush_logged()
            if self._db is not None:
                self._db.close()

    async def _flush_logged(self) -> None:
        try:
            await self._flush()
        except _store_errors() as e:
            log.warning("tenants' usage not written to %s (%s); kept to try again", self.path, e)

    async def _flush(self) -> None:
        added, self._added = self._added, {}
        keys = tuple(period_key(p, self._clock()) for p in PERIODS)
        rows = {(s, k): row for s, row in added.items() for k in keys}
        if self._db is None:  # in memory: fold, and forget the periods past
            current = {k: v for k, v in self._totals.items() if k[1] in keys}
            for k, (tokens, nano) in rows.items():
                row = current.setdefault(k, [0, 0])
                row[0] += tokens
                row[1] += nano
            self._totals = current
            return
        try:
            async with self._lock:
                self._totals, self.admin_keys = await trio.to_thread.run_sync(
                    self._write, rows, keys
                )
        except BaseException:
            for scope, (tokens, nano) in added.items():  # written next time
                self.add((scope,), tokens, nano)
            raise

    def _open(self) -> None:
        import sqlite3

        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection, used by one worker thread at a time (the flusher awaits each).
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL loses at most the last commits on power loss, never integrity.
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(SCHEMA)
        db.execute(KEYS_SCHEMA)
        db.commit()
        self._db = db

    def _write(self, rows: Totals, keys: tuple[str, ...]) -> tuple[Totals, LiveKeys]:
        db = self._db
        assert db is not None
        if rows:
            with db:
                db.executemany(ADD, [(s, p, t, n) for (s, p), (t, n) in rows.items()])
        totals = {(s, p): [t, n] for s, p, t, n in db.execute(CURRENT, keys)}
        return totals, {(t, n): (line, c) for t, n, line, c in db.execute(LIVE_KEYS)}

    async def save_key(self, tenant: str, name: str, line: str) -> bool:
        """Store an admin key's line; False when the tenant has a live key of that name."""
        return await self._keys_call(self._save_key, tenant, name, line)

    async def revoke_key(self, tenant: str, name: str) -> bool:
        """Revoke an admin key; False when there is no such live key."""
        return await self._keys_call(self._revoke_key, tenant, name)

    async def _keys_call(self, fn: Callable[..., tuple[bool, LiveKeys]], *args: str) -> bool:
        assert self._db is not None  # the admin API on, the store is opened (store_path)
        async with self._lock:
            done, self.admin_keys = await trio.to_thread.run_sync(fn, *args)
        return done

    def _save_key(self, tenant: str, name: str, line: str) -> tuple[bool, LiveKeys]:
        db = self._db
        assert db is not None
        with db:
            live = db.execute(
                "SELECT 1 FROM admin_keys WHERE tenant = ? AND name = ? AND revoked IS NULL",
                (tenant, name),
            ).fetchone()
            if live is None:
                db.execute(
                    "INSERT OR REPLACE INTO admin_keys VALUES (?, ?, ?, ?, NULL)",
                    (tenant, name, line, self._clock()),
                )
        return live is None, self._live()

    def _revoke_key(self, tenant: str, name: str, _unused: str = "") -> tuple[bool, LiveKeys]:
        db = self._db
        assert db is not None
        with db:
            changed = db.execute(
                "UPDATE admin_keys SET revoked = ? WHERE tenant = ? AND name = ? AND revoked IS NULL",
                (self._clock(), tenant, name),
            ).rowcount
        return changed > 0, self._live()

    def _live(self) -> LiveKeys:
        assert self._db is not None
        return {(t, n): (line, c) for t, n, line, c in self._db.execute(LIVE_KEYS)}
