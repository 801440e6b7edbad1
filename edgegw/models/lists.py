"""The providers' native model lists, and the runtimes' answers, read into `ListedModel`s.
Pure functions over parsed JSON: no I/O, nothing raised but `GatewayError` (502).

Shapes (`Provider.models_shape`):
  "openai"      `data` (or a bare `models` list: Gemini native, Ollama's /api/tags);
  "anthropic"   `data`, paged by `has_more` / `last_id` -> `after_id=`;
  "cohere"      `models`, named by `name`, paged by `next_page_token` -> `page_token=`;
  "cloudflare"  `result` (or `result.data`) of OpenRouter-shaped entries, paged by
                `result_info.page` / `total_pages` -> `page=`.

Upstream ids are kept verbatim, so that `<provider>/<id>` always routes back to the same
upstream model: Google's OpenAI-compatible listing names models `models/gemini-…`, which
gives `google/models/gemini-…` (as inference-gateway lists them; the community lookup
strips the `models/`); NVIDIA's `meta/llama-…` gives `nvidia/meta/llama-…`. Cloudflare's
entries may say `workers-ai/@cf/…`, or carry a UUID id next to an `@cf/…` name; chat
wants the `@cf/…` form, so that one is taken.

What a listing publishes about a model: its context window (`CONTEXT_KEYS`, then
llama.cpp's `meta.n_ctx`) and a `pricing` object (`PRICE_KEYS`; positive rates only, as
decimal text; it counts only with an input or an output rate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeGuard
from urllib.parse import quote

from edgegw.errors import fail
from edgegw.models.community import rate_text

# Fields of a list entry that publish the context window, in order: Groq, Cohere/OpenRouter,
# Mistral, vLLM/SGLang, Anthropic, Gemini (native). llama.cpp's `meta.n_ctx` comes last.
CONTEXT_KEYS = (
    "context_window",
    "context_length",
    "max_context_length",
    "max_model_len",
    "max_input_tokens",
    "inputTokenLimit",
)
# Largest count or timestamp taken from a listing: what every JSON reader holds exactly.
MAX_INT = 2**53 - 1
# Keys of a published `pricing` object (edgegw's own, then OpenRouter's, then others).
PRICE_KEYS = (
    ("input_per_token", ("input_per_token", "prompt", "input")),
    ("output_per_token", ("output_per_token", "completion", "output")),
    ("cache_read_per_token", ("cache_read_per_token", "input_cache_read", "cached")),
    ("cache_write_per_token", ("cache_write_per_token", "input_cache_write", "cache_creation")),
)


@dataclass(frozen=True, slots=True)
class ListedModel:
    """One upstream model, normalised, with what its listing published about it."""

    id: str  # the upstream's id, without the provider prefix
    created: int
    owned_by: str
    context_tokens: int | None
    pricing: Mapping[str, Any] | None  # rendered form, source "provider"


def read_page(shape: str, doc: Any) -> tuple[list[Any], str | None]:
    """(entries, query for the next page or None) of one page of a provider's list."""
    if not isinstance(doc, dict):
        raise fail("bad_upstream_response", "the model list is not an object")
    next_query = None
    if shape == "cohere":
        entries = doc.get("models")
        token = doc.get("next_page_token")
        if isinstance(token, str) and token:
            next_query = "page_token=" + quote(token, safe="")
    elif shape == "cloudflare":
        entries = doc.get("result")
        if isinstance(entries, dict):  # {"result": {"data": [...]}} is seen too
            entries = entries.get("data")
        info = doc.get("result_info")
        if isinstance(info, dict):
            page, pages = info.get("page"), info.get("total_pages")
            if _is_int(page) and _is_int(pages) and page < pages:
                next_query = f"page={page + 1}"
    else:
        entries = doc.get("data")
        if entries is None and shape == "openai":
            entries = doc.get("models")  # Gemini native, Ollama /api/tags
        if shape == "anthropic" and doc.get("has_more") is True:
            last = doc.get("last_id")
            if isinstance(last, str) and last:
                next_query = "after_id=" + quote(last, safe="")
    if not isinstance(entries, list):
        raise fail("bad_upstream_response", "no model list in the answer")
    return entries, next_query


def normalise_entry(pid: str, shape: str, entry: Any) -> ListedModel | None:
    if not isinstance(entry, dict):
        return None
    model_id = _entry_id(shape, entry)
    if model_id is None:
        return None
    owned_by = entry.get("owned_by")
    return ListedModel(
        id=model_id,
        created=_created(entry),
        owned_by=owned_by if isinstance(owned_by, str) and owned_by else pid,
        context_tokens=_provider_window(entry),
        pricing=_provider_pricing(entry),
    )


def _entry_id(shape: str, entry: dict[str, Any]) -> str | None:
    keys = {"cohere": ("name",), "anthropic": ("id",)}.get(shape, ("id", "name", "model"))
    ids = [v for k in keys if isinstance(v := entry.get(k), str) and v.strip()]
    if shape == "cloudflare":
        # OpenRouter format: id "@cf/…" (sometimes "workers-ai/@cf/…"), name for display;
        # the plain search format: id a UUID, name "@cf/…". Chat wants the "@cf/…" one.
        ids = [v.removeprefix("workers-ai/") for v in ids]
        ids = [v for v in ids if v.startswith("@")] + ids
    return ids[0] if ids else None


def _created(entry: dict[str, Any]) -> int:
    created = entry.get("created")
    if _is_int(created) or (isinstance(created, float) and math.isfinite(created)):
        assert isinstance(created, (int, float))
        return int(created) if 0 <= created <= MAX_INT else 0
    stamp = entry.get("created_at")  # Anthropic RFC 3339, Cloudflare "2024-04-18 20:31:47.273"
    if isinstance(stamp, str):
        try:
            when = datetime.fromisoformat(stamp.strip().replace(" ", "T", 1))
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return max(int(when.timestamp()), 0)
        except (ValueError, OverflowError):
            return 0
    return 0


def _provider_window(entry: dict[str, Any]) -> int | None:
    for key in CONTEXT_KEYS:
        if (tokens := _positive_int(entry.get(key))) is not None:
            return tokens
    meta = entry.get("meta")  # llama.cpp
    return _positive_int(meta.get("n_ctx")) if isinstance(meta, dict) else None


def _provider_pricing(entry: dict[str, Any]) -> dict[str, Any] | None:
    raw = entry.get("pricing")
    if not isinstance(raw, dict):
        return None
    out: dict[str, Any] = {"currency": "USD"}
    for name, keys in PRICE_KEYS:
        for key in keys:
            if (rate := _rate(raw.get(key))) is not None:
                out[name] = rate
                break
    if "input_per_token" not in out and "output_per_token" not in out:
        return None
    out["source"] = "provider"
    if isinstance(updated := raw.get("updated_at"), str) and updated:
        out["updated_at"] = updated
    return out


def _rate(value: Any) -> str | None:
    """A published per-token rate as decimal text; zero, negative or junk is unpublished."""
    try:
        if isinstance(value, str):
            rate = Decimal(value.strip())
        elif _is_int(value):
            rate = Decimal(value)
        elif isinstance(value, float):
            rate = Decimal(repr(value))  # the shortest text that reads back as this float
        else:
            return None
    except InvalidOperation:
        return None
    return rate_text(rate) if rate.is_finite() and rate > 0 else None


def llamacpp_window(props: Any) -> int | None:
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    return _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None


def ollama_window(shown: Any) -> int | None:
    """The configured `num_ctx` parameter, else the model's `<arch>.context_length`."""
    if not isinstance(shown, dict):
        return None
    params = shown.get("parameters")
    if isinstance(params, str):
        for line in params.splitlines():
            name, _, value = line.strip().partition(" ")
            value = value.strip()
            if name == "num_ctx" and value.isascii() and value.isdigit() and len(value) < 10:
                return _positive_int(int(value))
    info = shown.get("model_info")
    if not isinstance(info, dict):
        return None
    arch = info.get("general.architecture")
    if isinstance(arch, str) and (tokens := _positive_int(info.get(f"{arch}.context_length"))):
        return tokens
    for key, value in info.items():
        if key.endswith(".context_length") and (tokens := _positive_int(value)):
            return tokens
    return None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(value: Any) -> int | None:
    """A count from JSON: a positive integer (an integral float too) up to MAX_INT."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if _is_int(value) and 0 < value <= MAX_INT else None
