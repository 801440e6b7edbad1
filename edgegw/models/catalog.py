"""GET /v1/models: the configured providers' models, optionally with metadata.

One request, in order:
  1. `?provider=ID` (400 unknown, 400 not configured) and `include=` (comma lists, also
     repeated; trimmed, de-duplicated, 400 for an unknown key, empty means none);
  2. each provider's list, from the cache (MODELS_CACHE_TTL) or one upstream fetch shared
     by every request that wants it meanwhile, under MODELS_TIMEOUT; all providers at once.
     The aggregate leaves out (and logs) a provider that fails or times out; with
     `?provider=` that failure is the answer: 504 for a timeout, 502 otherwise;
  3. ALLOWED_MODELS / DISALLOWED_MODELS;
  4. with include=context_window, the serving runtime's window: llama.cpp `GET /props`
     (one per server) and Ollama `POST /api/show` (one per model), at most
     RUNTIME_CONCURRENCY at once, all within MODELS_TIMEOUT; a failure falls through.
     Found windows are kept with the cached list;
  5. PROVIDERS order, then the upstream's order.

Each model: {id: "<provider>/<upstream id>", object, created, owned_by, served_by} (how
each provider's native list becomes that: edgegw.models.lists) and the requested keys,
resolved as the reference document orders them, first hit wins:
  context_window  runtime -> the provider's list entry -> community table -> null
  pricing         the entry's `pricing` object -> community table -> null; a provider that
                  publishes an input or output rate wins outright (no gap filling)
  modalities      community table -> null
Requested keys that resolve to nothing are explicit nulls; keys not asked for are absent,
so a plain answer keeps OpenAI's shape. Money is USD per token as decimal strings. The
community table is edgegw.models.community's, loaded once when the catalog is made.

Failed fetches are not cached: the next request tries again (each within the timeout).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from edgegw.errors import GatewayError, fail
from edgegw.models.community import CommunityTable, open_table
from edgegw.models.lists import (
    PRICE_KEYS,
    ListedModel,
    llamacpp_window,
    normalise_entry,
    ollama_window,
    read_page,
)
from edgegw.providers import PROVIDERS, Target, model_allowed
from edgegw.settings import Settings
from edgegw.upstream import UpstreamPool

log = logging.getLogger("edgegw.models")

INCLUDE_KEYS = ("context_window", "pricing", "modalities")
# Pages followed per provider listing: Anthropic and Cohere send up to 1000 models a page,
# so this is far beyond any real catalogue and only stops a server that pages forever.
MAX_PAGES = 20
# Largest model list (or runtime answer) read from an upstream.
MAX_LIST_BYTES = 16 * 1024 * 1024
# Runtime context-window lookups in flight at once, across requests (as inference-gateway).
RUNTIME_CONCURRENCY = 4


@dataclass(slots=True)
class _Listing:
    models: tuple[ListedModel, ...]
    expires_at: float
    # Runtime context windows found so far (upstream id -> tokens); a failed lookup leaves
    # no entry, so the next request asks again.
    runtime: dict[str, int] = field(default_factory=dict)


class _Flight:
    """A fetch in progress that other requests for the same provider wait on."""

    __slots__ = ("done", "listing", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.listing: _Listing | None = None
        self.error: GatewayError | None = None


class ModelCatalog:
    """The providers' model lists: fetched, normalised, cached, resolved."""

    def __init__(
        self,
        settings: Settings,
        pool: UpstreamPool,
        targets: Mapping[str, Target],
        *,
        clock: Callable[[], float] = trio.current_time,
        community: CommunityTable | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.targets = targets
        self.community = (
            community if community is not None else open_table(settings.community_models_file)
        )
        self._clock = clock
        self._cache: dict[str, _Listing] = {}
        self._flights: dict[str, _Flight] = {}
        self._runtime_limit = trio.CapacityLimiter(RUNTIME_CONCURRENCY)

    async def answer(self, provider: str | None, include: Collection[str]) -> dict[str, Any]:
        """The ListModelsResponse for every configured provider, or only `provider`."""
        if provider is not None:
            listings = {provider: await self.listing(provider)}
        else:
            listings = await self._all_listings()
        allowed, disallowed = self.settings.allowed_models, self.settings.disallowed_models
        rows = [
            (pid, listing, m)
            for pid, listing in listings.items()
            for m in listing.models
            if model_allowed(allowed, disallowed, f"{pid}/{m.id}")
        ]
        if include:
            await self.community.ready()
        if "context_window" in include:
            await self._runtime_windows(rows)
        data = [self._render(pid, listing, m, include) for pid, listing, m in rows]
        if provider is not None:
            return {"provider": provider, "object": "list", "data": data}
        return {"object": "list", "data": data}

    async def _all_listings(self) -> dict[str, _Listing]:
        found: dict[str, _Listing] = {}

        async def one(pid: str) -> None:
            try:
                found[pid] = await self.listing(pid)
            except GatewayError as e:
                log.warning("models of %s left out: %s (%d)", pid, e.code, e.status)

        async with trio.open_nursery() as nursery:
            for pid in self.targets:
                nursery.start_soon(one, pid)
        return {pid: found[pid] for pid in PROVIDERS if pid in found}

    async def listing(self, pid: str) -> _Listing:
        """`pid`'s list: cached, or fetched once for every request that asks meanwhile."""
        while True:
            cached = self._cache.get(pid)
            if cached is not None and self._clock() < cached.expires_at:
                return cached
            flight = self._flights.get(pid)
            if flight is None:
                return await self._fly(pid)
            await flight.done.wait()
            if flight.listing is not None:
                return flight.listing
            if flight.error is not None:
                e = flight.error
                raise e.replace()
            # The request that fetched was cancelled before it ended: fetch again.

    async def _fly(self, pid: str) -> _Listing:
        flight = self._flights[pid] = _Flight()
        try:
            models = await self._fetch_bounded(pid)
            flight.listing = _Listing(models, self._clock() + self.settings.models_cache_ttl_s)
            self._cache[pid] = flight.listing
            return flight.listing
        except GatewayError as e:
            flight.error = e
            raise
        finally:
            del self._flights[pid]
            flight.done.set()

    async def _fetch_bounded(self, pid: str) -> tuple[ListedModel, ...]:
        timeout = self.settings.models_timeout_s
        try:
            with trio.fail_after(timeout):
                return await self._fetch(self.targets[pid])
        except trio.TooSlowError:
            raise fail(
                "upstream_timeout", f"'{pid}' did not list its models within {timeout:g}s"
            ) from None
        except GatewayError as e:
            raise e.replace(
                status=504 if e.status == 504 else 502,
                message=f"listing the models of '{pid}' failed: {e.message}",
            ) from None

    async def _fetch(self, target: Target) -> tuple[ListedModel, ...]:
        provider = target.config.provider
        base = target.origin.base_path + provider.models_path
        path, seen, out = base, set(), []
        for _ in range(MAX_PAGES):
            entries, next_query = read_page(
                provider.models_shape, await self._get_json(target, path)
            )
            for entry in entries:
                model = normalise_entry(provider.id, provider.models_shape, entry)
                if model is not None and model.id not in seen:
                    seen.add(model.id)
                    out.append(model)
            if next_query is None:
                break
            path = base + ("&" if "?" in base else "?") + next_query
        else:
            log.warning("models of %s: stopped after %d pages", provider.id, MAX_PAGES)
        return tuple(out)

    async def _get_json(
        self, target: Target, path: str, method: bytes = b"GET", body: bytes = b""
    ) -> Any:
        headers = [(b"accept", b"application/json"), *target.auth]
        if body:
            headers.append((b"content-type", b"application/json"))
        resp = await self.pool.send(target.origin, method, path.encode(), headers, body)
        try:
            payload = await resp.read(MAX_LIST_BYTES)
        finally:
            await resp.aclose()
        if resp.status != 200:
            raise fail("upstream_error", f"the upstream answered {resp.status}")
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise fail("bad_upstream_response", "the answer is not JSON") from None

    # -- runtime context windows ---------------------------------------------------------

    async def _runtime_windows(self, rows: Sequence[tuple[str, _Listing, ListedModel]]) -> None:
        """Ask llama.cpp and Ollama servers for the window they serve, into the listings."""
        jobs: list[tuple[Target, _Listing, ListedModel | None]] = []
        props_asked: set[str] = set()  # one llama.cpp /props answers for its whole server
        for pid, listing, m in rows:
            kind = self.targets[pid].config.provider.runtime_window
            if kind is None or m.id in listing.runtime:
                continue
            if kind == "ollama":
                jobs.append((self.targets[pid], listing, m))
            elif pid not in props_asked:
                props_asked.add(pid)
                jobs.append((self.targets[pid], listing, None))
        if not jobs:
            return
        with trio.move_on_after(self.settings.models_timeout_s):
            async with trio.open_nursery() as nursery:
                for target, job_listing, job_model in jobs:
                    nursery.start_soon(self._runtime_window, target, job_listing, job_model)

    async def _runtime_window(
        self, target: Target, listing: _Listing, m: ListedModel | None
    ) -> None:
        root = target.origin.base_path.removesuffix("/v1")
        async with self._runtime_limit:
            try:
                if m is None:
                    props = await self._get_json(target, root + "/props")
                    tokens = llamacpp_window(props)
                    if tokens is not None:
                        listing.runtime.update(
                            dict.fromkeys((x.id for x in listing.models), tokens)
                        )
                else:
                    body = orjson.dumps({"model": m.id})
                    shown = await self._get_json(target, root + "/api/show", b"POST", body)
                    tokens = ollama_window(shown)
                    if tokens is not None:
                        listing.runtime[m.id] = tokens
            except GatewayError as e:
                log.info("runtime window of %s: %s", target.config.id, e.code)

    # -- rendering -----------------------------------------------------------------------

    def _render(
        self, pid: str, listing: _Listing, m: ListedModel, include: Collection[str]
    ) -> dict[str, Any]:
        model_id = f"{pid}/{m.id}"
        out: dict[str, Any] = {
            "id": model_id,
            "object": "model",
            "created": m.created,
            "owned_by": m.owned_by,
            "served_by": pid,
        }
        if "context_window" in include:
            out["context_window"] = self._context_window(model_id, listing, m)
        if "pricing" in include:
            out["pricing"] = self._pricing(model_id, m)
        if "modalities" in include:
            out["modalities"] = self.community.find(model_id, "modalities")
        return out

    def _context_window(self, model_id: str, listing: _Listing, m: ListedModel) -> Any:
        if (tokens := listing.runtime.get(m.id)) is not None:
            return {"tokens": tokens, "source": "runtime"}
        if m.context_tokens is not None:
            return {"tokens": m.context_tokens, "source": "provider"}
        if (tokens := self.community.find(model_id, "context")) is not None:
            return {"tokens": tokens, "source": "community"}
        return None

    def _pricing(self, model_id: str, m: ListedModel) -> Any:
        if m.pricing is not None:
            return m.pricing
        found = self.community.find(model_id, "pricing")
        if found is None:
            return None
        out: dict[str, Any] = {"currency": "USD"}
        out.update((name, found[name]) for name, _ in PRICE_KEYS if name in found)
        if found.get("subscription") is True:
            out["subscription"] = True
        out["source"] = "community"
        return out
