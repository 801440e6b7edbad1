"""GET /v1/models: every configured provider's models, queried concurrently, each under
its own timeout; a slow or failing provider is left out rather than failing the list."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
import trio

from edgegw.asgi import Receive, Send, respond_json
from edgegw.errors import GatewayError
from edgegw.settings import Settings
from edgegw.upstream import UpstreamPool

if TYPE_CHECKING:
    from edgegw.app import App, Target

log = logging.getLogger("edgegw.models")


class ModelCatalog:
    """The model lists of the configured providers."""

    def __init__(
        self, settings: Settings, pool: UpstreamPool, targets: Mapping[str, Target]
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.targets = targets

    async def list_all(self) -> list[dict[str, Any]]:
        results: dict[str, list[dict[str, Any]]] = {}

        async def one(pid: str, target: Target) -> None:
            with trio.move_on_after(self.settings.models_timeout_s):
                try:
                    results[pid] = await self.provider_models(target)
                except GatewayError as e:
                    log.warning("listing models of %s failed: %s", pid, e.code)

        async with trio.open_nursery() as nursery:
            for pid, target in self.targets.items():
                nursery.start_soon(one, pid, target)
        return [m for pid in self.targets if pid in results for m in results[pid]]

    async def provider_models(self, target: Target) -> list[dict[str, Any]]:
        provider = target.config.provider
        resp = await self.pool.send(
            target.origin,
            b"GET",
            (target.origin.base_path + provider.models_path).encode(),
            [(b"accept", b"application/json"), *target.auth],
        )
        try:
            payload = await resp.read(16 * 1024 * 1024)
        finally:
            await resp.aclose()
        if resp.status != 200:
            raise GatewayError(502, "upstream_error", "model listing failed")
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise GatewayError(502, "bad_upstream_response", "model listing is not JSON") from None
        items = (
            (doc.get("data") or doc.get("models") or doc.get("result") or [])
            if isinstance(doc, dict)
            else []
        )
        out = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            mid = item.get("id") or item.get("name")
            if not isinstance(mid, str):
                continue
            out.append(
                {
                    "id": f"{provider.id}/{mid}",
                    "object": "model",
                    "created": item.get("created") if isinstance(item.get("created"), int) else 0,
                    "owned_by": item.get("owned_by")
                    if isinstance(item.get("owned_by"), str)
                    else provider.id,
                    "served_by": provider.id,
                }
            )
        return out


async def list_models(app: App, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    data = await app.catalog.list_all()
    await respond_json(send, 200, orjson.dumps({"object": "list", "data": data}))
