"""`Guardrails`: one decision per phase of a request, and what the gateway does with it.

The input document is the reference's (inference-gateway §10), plus `api` and `detected`:

    {"method": "POST", "path": "/v1/chat/completions", "phase": "pre_call",
     "api": "chat.completions",
     "request": {"body": "<the body, as text>", "model": "<as the client sent it>"},
     "identity": {<the verified OIDC claims>} | null,
     "detected": ["api_key", "bearer_token", "credit_card", "email"]}

`detected` names the built-in detectors that find something in `request.body` (edgegw's
addition: a policy can redact only what is there, or warn on an e-mail address, which is
detected but never redacted); `api` (edgegw's too) the API the request speaks, whatever
its URL (edgegw.guardrails.apis; `path` is the URL's, /proxy/... included). For the MCP
phases, `method` is "TOOL_CALL", `path` the tool's name, `api` null and `request.body` its
arguments (`tool_args`) or its result (`tool_output`). Which routes pass which phases, and
how a stream is judged as it passes: edgegw.guardrails.route.

The decision is the policy's (`data.guardrails.main`, evaluated in the Rust core without
the GIL); with GUARDRAILS_EXTERNAL_URL set and the policy not blocking, the external
checker is asked too and the stricter of the two answers wins (block > redact > warn >
allow; the reference lets the checker only block). What happens:
  - allow: nothing;
  - block: 403 `guardrails_blocked` in the route's error shape, the policy's message
    (a tool call: an error result the model reads, as the reference);
  - redact: the built-in detectors' secrets in every string of the body become
    `[REDACTED]` (JSON stays JSON: string values are rewritten, never the raw text);
  - warn: forwarded as it is; the response carries `X-Guardrails-Warning: <message>` and
    the log a WARNING naming the phase and the path (never the body).
A policy or checker that fails to decide (an evaluation error, the checker down or late,
a decision that is not one) blocks with 403 `guardrails_unavailable` under
GUARDRAILS_FAIL_MODE=closed (the default), and allows, logged, under `open`.
Every decision counts once in `inference_gateway_guardrails_total`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from edgegw._core import GuardPolicy, PolicyError, detect_sensitive, redact_json, redact_text
from edgegw.errors import GatewayError, Headers, fail
from edgegw.guardrails.external import ExternalChecker, ExternalCheckError
from edgegw.guardrails.settings import GuardrailsSettings
from edgegw.telemetry.recording import Telemetry

log = logging.getLogger("edgegw.guardrails")

SEVERITY = {"allow": 0, "warn": 1, "redact": 2, "block": 3}
WARNING_HEADER = b"x-guardrails-warning"
# A policy's message in a header or a log line: bounded, printable ASCII.
MAX_MESSAGE_CHARS = 200


@dataclass(frozen=True, slots=True)
class Verdict:
    action: str  # allow | block | redact | warn
    message: str
    # Nobody decided (an error; GUARDRAILS_FAIL_MODE chose the action).
    failed: bool = False

    def headers(self) -> Headers:
        if self.action != "warn":
            return ()
        return ((WARNING_HEADER, _printable(self.message or "guardrails warning").encode()),)


class Guardrails:
    def __init__(
        self,
        settings: GuardrailsSettings,
        policy: GuardPolicy,
        external: ExternalChecker | None,
        telemetry: Telemetry,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.external = external
        self.telemetry = telemetry

    async def decide(
        self,
        phase: str,
        *,
        method: str,
        path: str,
        body: str,
        model: str,
        identity: Mapping[str, Any] | None,
        api: str | None = None,
    ) -> Verdict:
        if self.policy.empty and self.external is None:
            verdict = Verdict("allow", "")  # nothing to ask
            self.telemetry.record_guardrail(phase=phase, action="allow", path=path, model=model)
            return verdict
        document = orjson.dumps(
            {
                "method": method,
                "path": path,
                "phase": phase,
                "api": api,
                "request": {"body": body, "model": model},
                "identity": identity,
                "detected": detect_sensitive(body),
            }
        )
        try:
            action, message = self.policy.evaluate(document)
            if self.external is not None and action != "block":
                ext_action, ext_message = await self.external.check(document)
                if SEVERITY[ext_action] > SEVERITY[action]:
                    action, message = ext_action, ext_message
            verdict = Verdict(action, message)
        except (PolicyError, ExternalCheckError) as e:
            closed = self.settings.fail_mode == "closed"
            # A policy's evaluation error may quote the input (a builtin's argument): its
            # text only at DEBUG; the checker's reasons are edgegw's own words.
            if isinstance(e, PolicyError):
                why = f"policy: {e.kind} error"
                log.debug("guardrails: policy error: %s", e)
            else:
                why = f"external checker: {_printable(str(e))}"
            log.warning(
                "guardrails: %s on %s did not decide (%s); %s",
                phase,
                _printable(path),
                why,
                "blocked (GUARDRAILS_FAIL_MODE=closed)" if closed else "allowed (open)",
            )
            verdict = Verdict("block" if closed else "allow", "", failed=True)
        if verdict.action == "warn":
            log.warning(
                "guardrails: warn on %s %s: %s",
                phase,
                _printable(path),
                _printable(verdict.message),
            )
        elif verdict.action == "block" and not verdict.failed:
            log.info("guardrails: %s on %s blocked", phase, _printable(path))
        self.telemetry.record_guardrail(phase=phase, action=verdict.action, path=path, model=model)
        return verdict

    # --- the phases -----------------------------------------------------------------

    async def pre_call(
        self,
        *,
        method: str,
        path: str,
        body: bytes,
        model: str,
        identity: Mapping[str, Any] | None,
        api: str | None = None,
        shown: str | None = None,
        redact: Callable[[bytes], bytes] | None = None,
    ) -> tuple[bytes, Headers]:
        """Before the upstream: the body to forward (redacted or as it came) and the
        response headers the decision adds; a block is raised (403). The policy reads
        `shown` (default: the body as text); `redact` removes the detectors' secrets
        (default: from every string of a JSON body, or from the text of another)."""
        verdict = await self.decide(
            "pre_call",
            method=method,
            path=path,
            body=body.decode("utf-8", "replace") if shown is None else shown,
            model=model,
            identity=identity,
            api=api,
        )
        raise_if_blocked(verdict, "request")
        if verdict.action == "redact":
            body = (redact or redacted_json)(body)
        return body, verdict.headers()

    async def post_call(
        self,
        *,
        method: str,
        path: str,
        payload: bytes,
        model: str,
        identity: Mapping[str, Any] | None,
        api: str | None = None,
    ) -> tuple[bytes, Headers]:
        """A whole (non-streaming) answer before it reaches the client: as `pre_call`."""
        verdict = await self.decide(
            "post_call",
            method=method,
            path=path,
            body=payload.decode("utf-8", "replace"),
            model=model,
            identity=identity,
            api=api,
        )
        raise_if_blocked(verdict, "response")
        if verdict.action == "redact":
            payload = redacted_json(payload)
        return payload, verdict.headers()

    async def tool(
        self, phase: str, tool: str, text: str, identity: Mapping[str, Any] | None
    ) -> tuple[str | None, str]:
        """`tool_args` / `tool_output`: (the text to use, or None when blocked; the
        message)."""
        verdict = await self.decide(
            phase, method="TOOL_CALL", path=tool, body=text, model="", identity=identity
        )
        if verdict.action == "block":
            return None, verdict.message or "blocked by guardrails"
        if verdict.action == "redact":
            # Arguments are a JSON object: its strings are redacted, so it stays one.
            if phase == "tool_args":
                return redacted_json(text.encode()).decode(), verdict.message
            return redact_text(text), verdict.message
        return text, verdict.message


def blocked(verdict: Verdict, what: str) -> GatewayError | None:
    """The 403 a blocking verdict answers (`what`: "request" or "response"), else None."""
    if verdict.action != "block":
        return None
    if verdict.failed:
        return fail(
            "guardrails_unavailable",
            f"The {what} was blocked: the guardrails could not evaluate it.",
        )
    return fail("guardrails_blocked", verdict.message or f"The {what} was blocked by guardrails.")


def raise_if_blocked(verdict: Verdict, what: str) -> None:
    error = blocked(verdict, what)
    if error is not None:
        raise error


def redacted_json(body: bytes) -> bytes:
    try:
        return redact_json(body)
    except PolicyError:  # not JSON (an upstream's odd answer, a text body): as text
        return redact_text(body.decode("utf-8", "replace")).encode()


def _printable(text: str) -> str:
    """For a header or a log line: printable ASCII, bounded."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text[:MAX_MESSAGE_CHARS])
    return clean + ("..." if len(text) > MAX_MESSAGE_CHARS else "")
