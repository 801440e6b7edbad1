"""GET /v1/models: `?provider=`, `include=`, every configured provider's list (from
edgegw.models.catalog), the local models and the routing aliases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from edgegw.asgi import Call
from edgegw.errors import fail, shown
from edgegw.gateway import Gateway
from edgegw.models.catalog import INCLUDE_KEYS


async def list_models(gw: Gateway, call: Call) -> None:
    include = parse_include(call.query_values("include"))
    provider = None
    if values := call.query_values("provider"):
        provider = values[0].strip().lower()
        gw.resolver.named(provider, param="provider")
    doc = await gw.catalog.answer(provider, include)
    if provider is None and gw.fleet.models:
        doc["data"] = [*_local_models(gw, include), *doc["data"]]
    if provider is None and gw.router is not None:
        doc["data"] = [*_aliases(gw, include), *doc["data"]]
    await call.respond_json(200, orjson.dumps(doc))


def _local_models(gw: Gateway, include: Sequence[str]) -> list[dict[str, Any]]:
    """Models served by local SGLang workers: bare names, `served_by: "local"`; the context
    window the workers report (runtime) or the profile's."""
    out = []
    for name, rt in gw.fleet.models.items():
        if not gw.resolver.allowed("local", name):
            continue
        entry: dict[str, Any] = {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "edgegw",
            "served_by": "local",
        }
        if "context_window" in include:
            window = rt.context_window
            reported = any(w.max_model_len for w in rt.workers)
            entry["context_window"] = (
                {"tokens": window, "source": "runtime" if reported else "provider"}
                if window
                else None
            )
        if "pricing" in include:
            entry["pricing"] = None
        if "modalities" in include:
            inputs = ["text", "image"] if rt.profile.image_inputs else ["text"]
            entry["modalities"] = {"input": inputs, "output": ["text"]}
        out.append(entry)
    return out


def _aliases(gw: Gateway, include: Sequence[str]) -> list[dict[str, Any]]:
    """The routing aliases, first, as clients name them: `owned_by: "edgegw-router"`,
    `served_by: "router"`; metadata `null` (each deployment has its own)."""
    assert gw.router is not None
    out = []
    for name in gw.router.config.aliases:
        if gw.resolver.name_allowed(name):
            entry: dict[str, Any] = {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "edgegw-router",
                "served_by": "router",
            }
            out.append(entry | dict.fromkeys(include))
    return out


def parse_include(values: Sequence[str]) -> tuple[str, ...]:
    """The requested keys, in first-mention order; 400 for an unknown one."""
    keys: list[str] = []
    for value in values:
        for part in value.split(","):
            key = part.strip()
            if not key or key in keys:
                continue
            if key not in INCLUDE_KEYS:
                raise fail(
                    "invalid_request",
                    f'unknown include value "{shown(key)}"; supported: {", ".join(INCLUDE_KEYS)}',
                    param="include",
                )
            keys.append(key)
    return tuple(keys)
