"""The remote fallback of a local model, as SIE's wire fixtures pin it (pure; the
generation route does the I/O):

- `refusal(rt, reason)`: the local refusal for each state no worker can serve in, answered
  when the profile's triggers do not list the reason, under `X-SIE-Remote: forbid`, or with
  no `remote_fallback`; with `X-SIE-Served-By: local` and `X-SIE-Error-Code`.
- `restored(refusal, reason, error)`: a remote attempt that failed before its first byte is
  answered with the local refusal it replaced (status, code, `Retry-After`), plus
  `X-SIE-Fallback-Reason` and `X-SIE-Fallback-Error` (the attempt's code, normalised by
  `fallback_error`).
- `remote_plan(req)`: what a fallback does with the SIE extensions a remote provider cannot
  honour: sampling and template hints are dropped (and named in `X-Edgegw-Dropped-Fields`);
  a request whose answer depends on the local model (a LoRA adapter, best_of ranking,
  regex/grammar decoding) is not sent remotely at all: the local refusal answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgegw._core import ParsedRequest
from edgegw.errors import GatewayError, Headers, fail
from edgegw.local.fleet import LocalRuntime

# reason -> (status, envelope code, X-SIE-Error-Code, Retry-After), as SIE answers each state
# (remote_routing.json restored_refusal; PROVISIONING is scale-from-zero's 503 + 60 s).
REFUSALS: dict[str, tuple[int, str, str, bytes | None]] = {
    "provisioning": (503, "provisioning", "PROVISIONING", b"60"),
    "model_loading": (503, "MODEL_LOADING", "MODEL_LOADING", b"5"),
    "saturated": (503, "QUEUE_FULL", "QUEUE_FULL", b"1"),
    "unhealthy": (502, "MODEL_LOAD_FAILED", "MODEL_LOAD_FAILED", None),
}
_MESSAGES = {
    "provisioning": "no local worker of '{}' is up yet",
    # A healthy worker that lists other models (edgegw.local.fleet); what it lists, which may
    # be a path on the worker's host, is in the gateway's log, not in the answer.
    "model_loading": "the local workers of '{}' serve a different model (the gateway's log "
    "names what they list)",
    "saturated": "the local workers of '{}' cannot queue the request now",
    "unhealthy": "the local workers of '{}' are not answering",
}
# SIE's error codes: an attempt's code among them passes through in any letter case.
SIE_CODES = frozenset(
    {
        "INVALID_INPUT",
        "MODEL_NOT_FOUND",
        "MODEL_NOT_LOADED",
        "LORA_LOADING",
        "MODEL_LOADING",
        "MODEL_LOAD_FAILED",
        "INFERENCE_ERROR",
        "QUEUE_FULL",
        "INTERNAL_ERROR",
        "RESOURCE_EXHAUSTED",
        "INPUT_TOO_LONG",
    }
)
# Exactly these spellings are renamed (remote_routing.json notes.fallback_error).
_RENAMED = {"server_overloaded": "QUEUE_FULL", "invalid_request": "INVALID_INPUT"}
# The codes edgegw's own failures carry: no SIE code of the provider's.
_GATEWAY_CODES = frozenset({"upstream_error"})
# The remote attempt did not answer before the gateway's deadline (a gateway's queue, in
# SIE's terms, could not place it in time).
_UNANSWERED = frozenset({"upstream_timeout"})

# SIE extensions a remote provider cannot honour that only tune sampling or the chat
# template: the remote answer still answers the request, so a fallback drops them.
DROPPED_ON_FALLBACK = frozenset(
    {"top_k", "min_tokens", "repetition_penalty", "chat_template_kwargs"}
)
DROPPED_HEADER = b"x-edgegw-dropped-fields"


def refusal(rt: LocalRuntime, reason: str) -> GatewayError:
    status, code, sie_code, retry_after = REFUSALS[reason]
    headers: Headers = ((b"x-sie-served-by", b"local"), (b"x-sie-error-code", sie_code.encode()))
    if retry_after is not None:
        headers = ((b"retry-after", retry_after), *headers)
    return fail(code, _MESSAGES[reason].format(rt.profile.name), status=status, headers=headers)


def served_remotely(upstream: str, reason: str | None, dropped: tuple[str, ...] = ()) -> Headers:
    """The headers of an answer served remotely for a local model: who, which upstream,
    why (None: the remote profile was named), and the fields the remote body left out."""
    headers = [(b"x-sie-served-by", b"remote"), (b"x-sie-upstream", upstream.encode())]
    if reason is not None:
        headers.append((b"x-sie-fallback-reason", reason.encode()))
    if dropped:
        headers.append((DROPPED_HEADER, ",".join(dropped).encode()))
    return tuple(headers)


def fallback_error(status: int, code: str | None) -> str:
    """X-SIE-Fallback-Error for a remote attempt answered with `status` and `code`."""
    if code is not None:
        if code.upper() in SIE_CODES:
            return code.upper()
        if code in _RENAMED:
            return _RENAMED[code]
    return "INFERENCE_ERROR" if status >= 500 else "INVALID_INPUT"


def restored(local: GatewayError, reason: str, attempt: GatewayError) -> GatewayError:
    """The local refusal `local` answering the failed remote `attempt`."""
    if attempt.code in _UNANSWERED:
        error = "QUEUE_FULL"
    else:
        code = None if attempt.code in _GATEWAY_CODES else attempt.code
        error = fallback_error(attempt.status, code)
    return local.replace(
        more_headers=(
            (b"x-sie-fallback-reason", reason.encode()),
            (b"x-sie-fallback-error", error.encode()),
        )
    )


@dataclass(frozen=True, slots=True)
class RemotePlan:
    """How a request goes to the remote fallback: `eligible` False keeps it local (the
    local refusal answers); `dropped` are the fields left out of the remote body."""

    eligible: bool
    dropped: tuple[str, ...] = ()


def remote_plan(req: ParsedRequest) -> RemotePlan:
    if req.features:  # regex / grammar response formats
        return RemotePlan(False)
    dropped = []
    for name in req.remote_unsupported:
        if name in DROPPED_ON_FALLBACK:
            dropped.append(name)
        elif name == "best_of" and (req.best_of or 1) <= req.n:
            dropped.append(name)  # best_of == n ranks nothing
        else:
            return RemotePlan(False)  # lora_adapter, a ranking best_of, anything new
    return RemotePlan(True, tuple(dropped))
