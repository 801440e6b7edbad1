"""The bound on spans waiting for export and the counts of what became of them, shared by
the tracing hooks (edgegw.telemetry.tracing) and the export pipeline (edgegw.telemetry.otelsdk),
both on the event loop's thread: no lock."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("edgegw.tracing")

# Ended spans waiting for export, at most: ~2 KB each, so a few MiB while a collector is
# down (the SDK's default, OTEL_BSP_MAX_QUEUE_SIZE, is the same).
MAX_QUEUED_SPANS = 2048
# A drop is logged at most this often, with the count since the last line.
DROP_LOG_INTERVAL_S = 60.0


class SpanQueue:
    """The bound on spans waiting for export, and the counts of what became of them."""

    def __init__(self, limit: int = MAX_QUEUED_SPANS) -> None:
        self.limit = limit
        self.pending = 0
        self.exported = 0
        self.dropped = {"queue_full": 0, "export_failed": 0}
        self._logged_at = -DROP_LOG_INTERVAL_S
        self._unlogged = 0

    def admit(self) -> bool:
        """Whether one more ended span may wait for export (else it is counted dropped)."""
        if self.pending < self.limit:
            self.pending += 1
            return True
        self.drop("queue_full", 1)
        return False

    def taken(self, n: int) -> None:
        """The exporter took a batch of `n`."""
        self.pending = max(0, self.pending - n)

    def done(self, n: int, ok: bool) -> None:
        if not ok:
            self.drop("export_failed", n)
            return
        self.exported += n

    def drop(self, reason: str, n: int) -> None:
        self.dropped[reason] += n
        self._unlogged += n
        now = time.monotonic()
        if now - self._logged_at < DROP_LOG_INTERVAL_S:
            return
        self._logged_at, n, self._unlogged = now, self._unlogged, 0
        log.warning("tracing: %d span(s) dropped (%s); is the collector reachable?", n, reason)
