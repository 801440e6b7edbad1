"""The SIE request contract for a local model, before any worker is asked: the `X-SIE-*`
headers and the profile's rules. Pure checks over the parsed request; nothing here does I/O.

In order:
  1. `X-SIE-Remote` (only one field, exactly `forbid`; read by the route for every target,
     a remote one refused under `forbid`), `X-SIE-Pool`,
     `X-SIE-MACHINE-PROFILE`, `X-SIE-SDK-Version`;
  2. fields SGLang cannot honour (`reasoning_effort`, `store`, ...: the OpenAI fields outside
     the SIE contract), then the first SIE-only value fault the parser noted;
  3. the profile's rules: LoRA adapter names, the output cap (default
     SIE_GATEWAY_DEFAULT_MAX_TOKENS, at most the profile's max_output_tokens), min_tokens,
     image inputs (base64 `data:` URIs only, and only for `inputs.image` profiles),
     logit_bias token ids below the vocabulary size, the context window (with a tokenizer).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from edgegw._core import ParsedRequest
from edgegw.asgi import Call
from edgegw.errors import GatewayError, fail
from edgegw.local.fleet import LocalRuntime
from edgegw.local.sglang import gateway_version

log = logging.getLogger("edgegw.local")

MAX_IMAGES = 16
# SIE: the skew warnings remember at most this many minor versions.
SDK_LOG_LIMIT = 1024
# The optional message members a worker is sent: the request members SGLang's chat template
# reads (earlier reasoning, a refusal); the response members the SDKs send back are not.
LOCAL_MESSAGE_MEMBERS = ("refusal", "reasoning_content", "reasoning")
# SIE's pool and profile names: refused, never mangled.
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


@dataclass(frozen=True, slots=True)
class LocalRequest:
    """A request for a local model that passed the contract."""

    doc: dict[str, Any]
    # Output cap sent to the worker.
    cap: int
    # `X-SIE-Remote: forbid`: no remote fallback for this request.
    forbid_remote: bool
    pool: str | None
    machine_profile: str | None
    # Affinity key (`routing_key`, else `prompt_cache_key`).
    key: str | None
    # The prompt's tokens as the profile's tokenizer counts them (None without one).
    prompt_tokens: int | None = None


def check_request(
    call: Call,
    req: ParsedRequest,
    rt: LocalRuntime,
    *,
    default_max_tokens: int,
    sdk_versions: SdkVersionLog,
    forbid_remote: bool,
    gpu_aliases: Mapping[str, str] = MappingProxyType({}),
) -> LocalRequest:
    """`forbid_remote` is what `remote_forbidden(call)` said (the route reads the header
    first, for every target)."""
    chat = req.endpoint == "chat"
    check_kind(rt, "generation", "/v1/chat/completions" if chat else "/v1/completions")
    pool, machine = placement(call, gpu_aliases)
    sdk_versions.note(_one_header(call, b"x-sie-sdk-version", "X-SIE-SDK-Version"))
    # Fields of the SIE contract SGLang does not take (the Rust tables say which).
    for name in req.local_unsupported:
        raise fail("unsupported_field", f"'{name}' is not supported by this endpoint", param=name)
    # Values OpenAI's schema accepts and the SIE contract does not (65 tools, custom tools, ...).
    if (rejection := req.local_rejection) is not None:
        # As a GatewayError, like every refusal here: the router handles it as one.
        raise fail(rejection.code, str(rejection), param=rejection.param, type=rejection.type)
    # Messages as SGLang takes them: no response members the SDKs send back, no null members.
    doc = orjson.loads(req.upstream_body(req.model, keep=LOCAL_MESSAGE_MEMBERS))
    _check_capabilities(req, doc, rt)
    if (lora := doc.get("lora_adapter")) is not None and lora not in rt.profile.lora_adapters:
        raise fail(
            "unknown_lora_adapter", "unknown LoRA adapter for this model", param="lora_adapter"
        )
    cap = _output_cap(default_max_tokens, req, rt, doc, chat)
    if chat:
        _check_images(doc, rt)
    _check_logit_bias(doc, rt)
    prompt_tokens = _check_context(doc, rt, cap, chat)
    key = doc.get("routing_key") or doc.get("prompt_cache_key")
    return LocalRequest(
        doc=doc,
        cap=cap,
        forbid_remote=forbid_remote,
        pool=pool,
        machine_profile=machine,
        key=key if isinstance(key, str) else None,
        prompt_tokens=prompt_tokens,
    )


def remote_forbidden(call: Call) -> bool:
    """`X-SIE-Remote`: absent, or exactly one field whose value is exactly `forbid`."""
    if call.header(b"x-sie-remote") is None:  # a look-up, not a scan: nearly every request
        return False
    values = call.header_values(b"x-sie-remote")
    if len(values) != 1 or values[0] != b"forbid":
        # The offending value is never echoed.
        raise fail(
            "INVALID_INPUT",
            "X-SIE-Remote accepts only one value: 'forbid'",
            param="X-SIE-Remote",
        )
    return True


def named_profile(
    models: Mapping[str, LocalRuntime], model: str
) -> tuple[LocalRuntime, bool] | None:
    """`model:profile` naming a local model's local profile (runtime, False) or its remote
    one (runtime, True); None when `model` is not of that form (a model named exactly,
    colon or not, is itself). An unknown profile of a local model is 404."""
    base, sep, name = model.rpartition(":")
    rt = models.get(base) if sep and model not in models else None
    if rt is None:
        return None
    if name == rt.profile.local_profile:
        return rt, False
    if name == rt.profile.remote_profile and rt.profile.remote_fallback is not None:
        return rt, True
    raise fail("model_not_found", f"model '{base}' has no profile named so", param="model")


def remote_target_forbidden() -> GatewayError:
    """`X-SIE-Remote: forbid` on a request whose target is a remote provider (an explicit
    `provider/model`, or `?provider=`): SIE refuses it, 400, rather than serve it remotely."""
    return fail(
        "INVALID_INPUT",
        "X-SIE-Remote: forbid was sent for a model served by a remote provider",
        param="X-SIE-Remote",
    )


def check_kind(rt: LocalRuntime, kind: str, route: str) -> None:
    """A local model whose profile's `kind` is not `kind` does not serve `route`."""
    if rt.profile.kind != kind:
        raise fail(
            "unsupported_model",
            f"local model '{rt.profile.name}' (kind: {rt.profile.kind}) does not serve {route}",
            param="model",
        )


def placement(call: Call, gpu_aliases: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(pool, machine profile) from `X-SIE-Pool` and `X-SIE-MACHINE-PROFILE`."""
    pool = _one_header(call, b"x-sie-pool", "X-SIE-Pool")
    return machine_profile(
        _one_header(call, b"x-sie-machine-profile", "X-SIE-MACHINE-PROFILE"), pool, gpu_aliases
    )


def machine_profile(
    value: str | None, pool: str | None, aliases: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """(pool, machine profile) from `X-SIE-MACHINE-PROFILE`: a profile (`l4`) or
    `pool/profile` (`eval-bench/l4`), the profile through SIE_GATEWAY_GPU_ALIASES."""
    if value is None:
        return pool, None
    header_pool, sep, profile = value.rpartition("/")
    if sep:
        if not _NAME.match(header_pool) or (pool is not None and pool != header_pool):
            raise fail(
                "invalid_request",
                "X-SIE-MACHINE-PROFILE names a pool that is not valid here",
                param="X-SIE-MACHINE-PROFILE",
            )
        pool = header_pool
    if not _NAME.match(profile):
        raise fail(
            "invalid_request", "invalid X-SIE-MACHINE-PROFILE", param="X-SIE-MACHINE-PROFILE"
        )
    return pool, aliases.get(profile, profile)


def _one_header(call: Call, name: bytes, label: str) -> str | None:
    values = call.header_values(name)
    if not values:
        return None
    if len(values) > 1:
        raise fail("invalid_request", f"{label} may be sent once", param=label)
    try:
        text = values[0].decode("ascii").strip()
    except UnicodeDecodeError:
        raise fail("invalid_request", f"invalid {label}", param=label) from None
    return text or None


class SdkVersionLog:
    """X-SIE-SDK-Version, for skew warnings only (as SIE): an SDK whose major.minor differs
    from the gateway's is logged once per minor version; at most SDK_LOG_LIMIT remembered."""

    def __init__(self, gateway: str | None = None) -> None:
        self._gateway = gateway  # None: edgegw's own, read at the first SDK version seen
        self.seen: set[tuple[int, int]] = set()

    @functools.cached_property
    def gateway(self) -> tuple[int, int] | None:
        return _minor(self._gateway or gateway_version())

    def note(self, version: str | None) -> None:
        if version is None or self.gateway is None:
            return
        minor = _minor(version)
        if minor is None or minor == self.gateway or minor in self.seen:
            return
        if len(self.seen) >= SDK_LOG_LIMIT:
            return
        self.seen.add(minor)
        log.warning(
            "client SDK version %s differs from the gateway's %d.%d (version skew)",
            version[:32],
            *self.gateway,
        )


def _minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of `1.2.3`, `v1.2`, `1.2.0rc1`; None when it is not a version."""
    m = re.match(r"^v?(\d{1,6})\.(\d{1,6})", version.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


# response_format type -> the profile's capabilities.grammar entry it needs.
_GRAMMAR_OF = {"json_schema": "json_schema", "json_object": "json_schema", "regex": "regex"}
_GRAMMAR_OF["grammar"] = "ebnf"


def _check_capabilities(req: ParsedRequest, doc: dict[str, Any], rt: LocalRuntime) -> None:
    """The profile's `capabilities`: tools, and the constrained decodings (SIE: 400
    unsupported_field)."""
    name = rt.profile.name
    if "tools" in req.fields and not rt.profile.tools:
        raise fail("unsupported_field", f"model '{name}' does not support tools", param="tools")
    rf = doc.get("response_format")
    kind = rf.get("type") if isinstance(rf, dict) else None
    grammar = _GRAMMAR_OF.get(kind) if isinstance(kind, str) else None
    if grammar is not None and grammar not in rt.profile.grammars:
        raise fail(
            "unsupported_field",
            f"model '{name}' does not support {grammar} constrained decoding",
            param="response_format.type",
        )


def _check_images(doc: dict[str, Any], rt: LocalRuntime) -> list[str]:
    images = []
    for i, message in enumerate(doc.get("messages") or ()):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if part.get("type") not in ("image_url", "input_image"):
                continue
            if not rt.profile.image_inputs:
                raise fail(
                    "unsupported_field",
                    f"model '{rt.profile.name}' does not take image inputs",
                    param="messages",
                )
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if (
                not isinstance(url, str)
                or not url.startswith("data:image/")
                or ";base64," not in url[:64]
            ):
                raise fail(
                    "invalid_request",
                    "only base64 data:image/... URIs are accepted; remote image URLs are not fetched",
                    param=f"messages[{i}].content[{j}].image_url",
                )
            images.append(url)
    if len(images) > MAX_IMAGES:
        raise fail("invalid_request", f"at most {MAX_IMAGES} images per request", param="messages")
    return images


def _output_cap(
    default_max_tokens: int, req: ParsedRequest, rt: LocalRuntime, doc: dict[str, Any], chat: bool
) -> int:
    cap = rt.profile.max_output_tokens
    if req.max_tokens is not None:
        if cap is not None and req.max_tokens > cap:
            raise fail(
                "invalid_request",
                f"the output cap is above this model's max_output_tokens ({cap})",
                param="max_completion_tokens" if chat else "max_tokens",
            )
        effective = req.max_tokens
    else:
        effective = default_max_tokens if chat else 16
        if cap is not None:
            effective = min(effective, cap)
    min_tokens = doc.get("min_tokens")
    if isinstance(min_tokens, int) and min_tokens > effective:
        raise fail("invalid_request", "'min_tokens' is above the output cap", param="min_tokens")
    return effective


def _check_logit_bias(doc: dict[str, Any], rt: LocalRuntime) -> None:
    vocab = rt.vocab_size or _tokenizer_vocab(rt)
    bias = doc.get("logit_bias")
    if not vocab or not isinstance(bias, dict):
        return
    for key in bias:
        if int(key) >= vocab:
            raise fail(
                "invalid_request",
                f"'logit_bias' token ids must be below the vocabulary size ({vocab})",
                param="logit_bias",
            )


def _tokenizer_vocab(rt: LocalRuntime) -> int | None:
    tok = rt.tokenizer
    return tok.get_vocab_size() if tok is not None else None


def _check_context(doc: dict[str, Any], rt: LocalRuntime, cap: int, chat: bool) -> int | None:
    """The prompt's tokens, counted with the profile's tokenizer (None without one), within
    the context window with the output cap."""
    window = rt.context_window
    tok = rt.tokenizer
    if tok is None:
        return None
    if chat:
        texts = []
        for message in doc.get("messages") or ():
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts += [p.get("text", "") for p in content if isinstance(p.get("text"), str)]
        # Content tokens plus a few per message for the chat template's role markers: a
        # lower bound of what the worker will see, so nothing that fits is refused.
        prompt_tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
        prompt_tokens += 3 * len(doc.get("messages") or ())
    else:
        prompt = doc["prompt"]  # required by the core's completions rules
        text = prompt if isinstance(prompt, str) else prompt[0]
        prompt_tokens = len(tok.encode(text, add_special_tokens=False).ids)
    if window and prompt_tokens + cap > window:
        raise fail(
            "context_length_exceeded",
            f"the prompt ({prompt_tokens} tokens) and the output cap ({cap}) exceed the context window ({window})",
            param="messages" if chat else "prompt",
        )
    return prompt_tokens
