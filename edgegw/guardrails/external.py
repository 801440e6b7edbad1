"""The external checker (GUARDRAILS_EXTERNAL_URL): the input document POSTed as JSON, a
decision `{"action": "allow|block|redact|warn", "message": "..."}` answered with a 2xx, as
the reference's ExternalClient. Sent through the gateway's upstream pool (keep-alive, the
CLIENT_TLS_* settings), the whole exchange bounded by GUARDRAILS_EXTERNAL_TIMEOUT.

Anything else (no connection, the timeout, a non-2xx status, an answer that is not such a
decision, one over MAX_ANSWER_BYTES) is an `ExternalCheckError`: the caller applies
GUARDRAILS_FAIL_MODE. An answer without an action allows, as in the reference.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import orjson
import trio

from edgegw.errors import GatewayError
from edgegw.upstream import Origin, UpstreamPool

# The reference reads at most 1 MiB of the checker's answer.
MAX_ANSWER_BYTES = 1024 * 1024
ACTIONS = frozenset({"allow", "block", "redact", "warn"})


class ExternalCheckError(Exception):
    """The external checker did not decide; the message says why (never the input)."""


class ExternalChecker:
    def __init__(self, pool: UpstreamPool, url: str, timeout_s: float) -> None:
        self.pool = pool
        self.url = url
        self.origin = Origin.from_url(url)
        parts = urlsplit(url)
        self.target = ((parts.path or "/") + (f"?{parts.query}" if parts.query else "")).encode()
        self.timeout_s = timeout_s
        self.headers = [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
            (b"accept-encoding", b"identity"),
        ]

    async def check(self, document: bytes) -> tuple[str, str]:
        """(action, message) for the input `document` (JSON)."""
        try:
            with trio.fail_after(self.timeout_s):
                resp = await self.pool.send(
                    self.origin, b"POST", self.target, self.headers, document
                )
                try:
                    body = await resp.read(MAX_ANSWER_BYTES)
                finally:
                    await resp.aclose()
        except trio.TooSlowError:
            raise ExternalCheckError(f"no answer within {self.timeout_s:g}s") from None
        except GatewayError as e:
            raise ExternalCheckError(e.code) from None
        if not 200 <= resp.status < 300:
            raise ExternalCheckError(f"answered HTTP {resp.status}")
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ExternalCheckError("the answer is not JSON") from None
        if not isinstance(doc, dict):
            raise ExternalCheckError("the answer is not a JSON object")
        action = doc.get("action") or "allow"
        message = doc.get("message") or ""
        if action not in ACTIONS or not isinstance(message, str):
            raise ExternalCheckError("the answer is not a decision")
        return action, message
