"""What watches the exchanges with an upstream while they run: each one's cancel scope
(`Exchange`), and the `DisconnectWatch`, which carries the client's disconnect (Hypercorn
reports it only from `receive()`), the drain of a shutdown and the deadline, and tells
afterwards which ended it (`Exchange.ending`). Watchers are given only to exchanges still
running after `WATCH_DELAY_S` (bench/README.md has the cost), so a disconnect is acted on
within twice that.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

import trio

from edgegw.answer import Ending
from edgegw.asgi import Receive
from edgegw.errors import GatewayError, shutting_down, upstream_timeout

WATCH_DELAY_S = 0.25


class Exchange:
    """One exchange under watch: its cancel scope and what ended it. As a context manager
    (`Exchanges.open`'s), registered with the watch while its scope is entered (a class, not
    a generator's context manager: one of these runs every request)."""

    __slots__ = ("receive", "scope", "started", "watcher", "client_gone", "drained", "_watch")

    def __init__(
        self, receive: Receive, started: float, timeout_s: float, watch: DisconnectWatch
    ) -> None:
        self.receive = receive
        self.scope = trio.CancelScope(deadline=started + timeout_s)
        self.started = started
        self.watcher: trio.CancelScope | None = None
        self.client_gone = False
        self.drained = False
        self._watch = watch

    def __enter__(self) -> Exchange:
        self._watch.register(self)
        try:
            self.scope.__enter__()
        except BaseException:
            self._watch.release(self)
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        try:
            return self.scope.__exit__(kind, exc, tb)
        finally:
            self._watch.release(self)

    def allow(self, seconds: float) -> None:
        """From now on the exchange may take `seconds` more (math.inf: no deadline)."""
        self.scope.deadline = trio.current_time() + seconds

    @property
    def ending(self) -> Ending:
        if self.client_gone:
            return Ending.CLIENT_GONE
        if self.drained:
            return Ending.DRAINED
        if self.scope.cancelled_caught:
            return Ending.TIMED_OUT
        return Ending.COMPLETED

    def raise_unless_answerable(
        self, timeout_error: Callable[[], GatewayError] = upstream_timeout
    ) -> bool:
        """After an exchange with nothing sent yet: True when its answer can be sent, False
        when the client is gone; a drained exchange is 503 `shutting_down`, a timed-out one
        the `timeout` error."""
        ending = self.ending
        if ending is Ending.CLIENT_GONE:
            return False
        if ending is Ending.DRAINED:
            raise shutting_down()
        if ending is Ending.TIMED_OUT:
            raise timeout_error()
        return True


class DisconnectWatch:
    """Turns a client's `http.disconnect` into cancelling its exchange (see module doc)."""

    def __init__(self, delay_s: float = WATCH_DELAY_S) -> None:
        self.delay_s = delay_s
        self._active: dict[int, Exchange] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(self.delay_s)
                horizon = trio.current_time() - self.delay_s
                for ex in list(self._active.values()):
                    if ex.watcher is None and ex.started <= horizon:
                        ex.watcher = trio.CancelScope()
                        nursery.start_soon(self._watch, ex)

    @staticmethod
    async def _watch(ex: Exchange) -> None:
        assert ex.watcher is not None
        with ex.watcher:
            while True:
                message = await ex.receive()
                if message["type"] == "http.disconnect":
                    ex.client_gone = True
                    ex.scope.cancel()
                    return

    def register(self, ex: Exchange) -> None:
        if self._nursery is None:
            raise RuntimeError("DisconnectWatch.run() is not running")
        self._active[id(ex)] = ex

    def release(self, ex: Exchange) -> None:
        del self._active[id(ex)]
        if ex.watcher is not None:
            ex.watcher.cancel()

    def drain_all(self) -> int:
        """End every exchange still running (the shutdown's drain time is over)."""
        active = list(self._active.values())
        for ex in active:
            ex.drained = True
            ex.scope.cancel()
        return len(active)
