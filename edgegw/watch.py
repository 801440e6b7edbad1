"""What watches the exchanges with an upstream while they run, and ends them at their
deadline, when their client is gone or when the drain of a shutdown is over: the
`DisconnectWatch`, which carries the client's disconnect (Hypercorn reports it only from
`receive()`) and tells afterwards which ended an exchange (`ending`). Watchers are given
only to exchanges still running after `WATCH_DELAY_S` (bench/README.md has the cost), so a
disconnect is acted on within twice that; a stream on the core's relay gets none, as the
core watches its client's socket for a hang-up itself (edgegw.handoff). A client that hangs
up once its stream's events up to `[DONE]` were sent (`delivered`; the official openai SDK
closes there, before the body's terminator) had a whole stream: the exchange goes on to the
upstream's end, for its connection to be kept, and is not ended as a client gone.

The exchanges of /proxy and of the local workers run in a cancel scope of their own
(`Exchange`). A whole answer and a stream do not (`WholeExchange`): the watch's one timer
keeps the deadline, and the exchange is ended by waking the wait on its upstream connection,
where a whole answer spends nearly all of its time; a stream's pump or its wait on the
core's relay runs in a scope of the exchange's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import TracebackType

import trio

from edgegw.answer import CLIENT_GONE, COMPLETED, DRAINED, TIMED_OUT, Ending
from edgegw.asgi import Receive
from edgegw.errors import GatewayError, shutting_down, upstream_timeout
from edgegw.upstream import Interrupted, Interruptible

WATCH_DELAY_S = 0.25


class Watched:
    """What the `DisconnectWatch` holds of an exchange: its client, when it began, its
    watcher, and what ended it; `cancel` ends it."""

    __slots__ = (
        "receive",
        "started",
        "watcher",
        "client_gone",
        "drained",
        "whole",
        "delivered",
        "in_core",
        "_watch",
    )

    def __init__(self, receive: Receive, started: float, watch: DisconnectWatch) -> None:
        self.receive = receive
        self.started = started
        self.watcher: trio.CancelScope | None = None
        self.client_gone = False
        self.drained = False
        self.whole = False  # the client has the whole answer (`answered`)
        # The client has its stream's events up to [DONE] (the pump says so): its hang-up
        # ends nothing then (the official openai SDK closes there, before the body's end).
        self.delivered = False
        # Its stream is on the core's relay, which watches the client for a hang-up itself
        # (edgegw.handoff): no watcher task is started for it.
        self.in_core = False
        self._watch = watch

    def cancel(self) -> None:
        raise NotImplementedError

    @property
    def timed_out(self) -> bool:
        raise NotImplementedError

    def answered(self) -> None:
        """The client has the whole answer, its end included: a disconnect or a drain seen
        after that (the core's relay writes a stream's last bytes before the gateway takes
        it back) does not change how the exchange ended."""
        self.whole = True

    @property
    def ending(self) -> Ending:
        if self.whole:
            return COMPLETED
        if self.client_gone:
            return CLIENT_GONE
        if self.drained:
            return DRAINED
        if self.timed_out:
            return TIMED_OUT
        return COMPLETED

    def raise_unless_answerable(
        self, timeout_error: Callable[[], GatewayError] = upstream_timeout
    ) -> bool:
        """After an exchange with nothing sent yet: True when its answer can be sent, False
        when the client is gone; a drained exchange is 503 `shutting_down`, a timed-out one
        the `timeout` error."""
        ending = self.ending
        if ending is CLIENT_GONE:
            return False
        if ending is DRAINED:
            raise shutting_down()
        if ending is TIMED_OUT:
            raise timeout_error()
        return True


class Exchange(Watched):
    """One exchange under watch in its cancel scope. As a context manager
    (`Exchanges.open`'s), registered with the watch while its scope is entered (a class, not
    a generator's context manager: one of these runs every stream)."""

    __slots__ = ("scope",)

    def __init__(
        self, receive: Receive, started: float, timeout_s: float, watch: DisconnectWatch
    ) -> None:
        super().__init__(receive, started, watch)
        self.scope = trio.CancelScope(deadline=started + timeout_s)

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

    def cancel(self) -> None:
        self.scope.cancel()

    @property
    def timed_out(self) -> bool:
        return self.scope.cancelled_caught


class WholeExchange(Watched):
    """An exchange for a whole answer, without a cancel scope of its own: a scope each cost
    ~10 % of a whole answer (bench/README.md). Nearly all its waits are on its upstream
    connection, which `cancel` wakes (`notify_closing`); its deadline is kept by the
    watch's one timer (`DisconnectWatch.reap`); a wait off the connection (connecting,
    queueing for one, a retry's backoff) gets a scope of its own (`scoped`). As a context
    manager it ends as a cancel scope does: the exception its ending raised stops at its
    `with`, and `ending` says why."""

    __slots__ = ("deadline", "timeout_s", "conn", "sub", "fired", "caught")

    def __init__(
        self, receive: Receive, started: float, timeout_s: float, watch: DisconnectWatch
    ) -> None:
        super().__init__(receive, started, watch)
        self.deadline = started + timeout_s
        self.timeout_s = timeout_s
        self.conn: Interruptible | None = None
        self.sub: trio.CancelScope | None = None
        self.fired = False  # cancelled, by the timer, the client's disconnect or the drain
        self.caught = False  # an exception its ending raised stopped at its `with`

    def __enter__(self) -> WholeExchange:
        self._watch.register(self)
        self._watch.time(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._watch.release(self)
        if isinstance(exc, Exception) and (
            self.fired or (self.sub is not None and self.sub.cancelled_caught)
        ):
            self.caught = True
            return True
        return False

    def allow(self, seconds: float) -> None:
        """From now on the exchange may take `seconds` more (math.inf: no deadline)."""
        self._watch.retime(self, seconds)

    def cancel(self) -> None:
        self.fired = True
        if self.sub is not None:
            self.sub.cancel()
        if self.conn is not None:
            self.conn.interrupt()

    @property
    def timed_out(self) -> bool:
        return self.caught

    def detach(self) -> None:
        """Its waits are no longer on the connection (a stream's body: the pump's and the
        core relay's waits are in `scoped()`): ending it wakes nothing there, and a body
        that came whole leaves the connection reusable."""
        self.conn = None

    def attach(self, conn: Interruptible) -> None:
        """The connection its waits are on from now on (`upstream.Watch`)."""
        self.conn = conn
        if self.fired:
            conn.interrupt()

    def scoped(self) -> trio.CancelScope:
        """A scope for a wait off the connection, with the exchange's deadline, cancelled
        when it is (`upstream.Watch`)."""
        self.sub = trio.CancelScope(deadline=self.deadline)
        if self.fired:
            self.sub.cancel()
        return self.sub

    async def nap(self, seconds: float) -> None:
        """`trio.sleep`, ended with the exchange (a retry's backoff)."""
        with self.scoped():
            await trio.sleep(seconds)
            return
        raise Interrupted()


class DisconnectWatch:
    """Turns a client's `http.disconnect` into cancelling its exchange (see module doc), and
    times the exchanges without a cancel scope (`WholeExchange`)."""

    def __init__(self, delay_s: float = WATCH_DELAY_S) -> None:
        self.delay_s = delay_s
        self._active: dict[int, Watched] = {}
        self._nursery: trio.Nursery | None = None
        # The timed exchanges by how long each was given, each in the order its deadline
        # was set, which is the order of their deadlines.
        self._timed: dict[float, dict[WholeExchange, None]] = {}
        self._nap: trio.CancelScope | None = None
        # The run's clock: its own method once `run` bound it (trio.current_time() is three
        # Python calls, a few a request: 1.3 % of a request's instructions, bench/README.md).
        self.now: Callable[[], float] = trio.current_time

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.now = trio.lowlevel.current_clock().current_time
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.reap)
            task_status.started()
            while True:
                await trio.sleep(self.delay_s)
                horizon = trio.current_time() - self.delay_s
                for ex in list(self._active.values()):
                    if ex.watcher is None and not ex.in_core and ex.started <= horizon:
                        ex.watcher = trio.CancelScope()
                        nursery.start_soon(self._watch, ex)

    async def reap(self) -> None:
        """Cancel each timed exchange at its deadline: one timer for all, as the connection
        layer's `reap_idle` is. A queue that is empty now takes no deadline before now plus
        its time, so the timer sleeps no longer than that; a new queue wakes it."""
        while True:
            now = trio.current_time()
            wake = math.inf
            for timeout_s, queue in self._timed.items():
                due = self._expire(queue, now)
                wake = min(wake, now + timeout_s if due is None else due)
            with trio.CancelScope() as self._nap:
                await trio.sleep_until(wake)

    @staticmethod
    def _expire(queue: dict[WholeExchange, None], now: float) -> float | None:
        """Cancel the exchanges of `queue` due by `now`: the next deadline, None if none is
        left. (A function of its own, so that the sleeping timer holds no exchange.)"""
        while queue:
            ex = next(iter(queue))
            if ex.deadline > now:
                return ex.deadline
            del queue[ex]
            ex.cancel()
        return None

    @staticmethod
    async def _watch(ex: Watched) -> None:
        assert ex.watcher is not None
        with ex.watcher:
            while True:
                message = await ex.receive()
                if message["type"] == "http.disconnect":
                    if ex.delivered:  # a whole stream: its upstream is read to its end
                        return
                    ex.client_gone = True
                    ex.cancel()
                    return

    def register(self, ex: Watched) -> None:
        if self._nursery is None:
            raise RuntimeError("DisconnectWatch.run() is not running")
        self._active[id(ex)] = ex

    def release(self, ex: Watched) -> None:
        del self._active[id(ex)]
        if ex.watcher is not None:
            ex.watcher.cancel()
        if isinstance(ex, WholeExchange):
            self._untime(ex)

    def time(self, ex: WholeExchange) -> None:
        """Cancel `ex` at its deadline, `ex.timeout_s` after it was set."""
        if ex.timeout_s == math.inf:
            return
        queue = self._timed.get(ex.timeout_s)
        if queue is None:  # its deadline may come before the timer wakes
            queue = self._timed[ex.timeout_s] = {}
            if self._nap is not None:
                self._nap.cancel()
        queue[ex] = None

    def retime(self, ex: WholeExchange, timeout_s: float) -> None:
        """`ex` ends `timeout_s` from now instead."""
        self._untime(ex)
        # No deadline (a stream's body) needs no clock: every stream comes this way.
        ex.deadline = math.inf if timeout_s == math.inf else self.now() + timeout_s
        ex.timeout_s = timeout_s
        self.time(ex)

    def _untime(self, ex: WholeExchange) -> None:
        if (queue := self._timed.get(ex.timeout_s)) is not None:
            queue.pop(ex, None)

    def drain_all(self) -> int:
        """End every exchange still running (the shutdown's drain time is over)."""
        active = list(self._active.values())
        for ex in active:
            ex.drained = True
            ex.cancel()
        return len(active)
