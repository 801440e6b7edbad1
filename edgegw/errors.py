"""The gateway's error type and the one envelope every error response uses.

`{"error": {"message", "type", "param", "code"}}`, as OpenAI and the SIE gateway write it.
Codes are stable snake_case strings; nothing ever parses a message.
"""

from __future__ import annotations

import orjson

from edgegw._core import RequestError


class GatewayError(Exception):
    """An error answered to the client with `status` and the envelope."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.type = type or default_type(status)
        self.param = param
        self.headers = headers


def default_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status < 500:
        return "invalid_request_error"
    return "server_error"


def envelope(message: str, type: str, param: str | None, code: str | None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def render_error(
    exc: GatewayError | RequestError,
) -> tuple[int, tuple[tuple[bytes, bytes], ...], bytes]:
    """(status, extra headers, body) for an error raised anywhere in the pipeline."""
    if isinstance(exc, GatewayError):
        return exc.status, exc.headers, envelope(exc.message, exc.type, exc.param, exc.code)
    return exc.status, (), envelope(str(exc), exc.type, exc.param, exc.code)


INTERNAL_ERROR_BODY = envelope("internal error", "server_error", None, "internal_error")
