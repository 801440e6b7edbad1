"""Local SGLang workers: health, what they report about their model, and which one serves
a request.

Each worker is probed with `GET /health` every `HEALTH_INTERVAL_S`, and a healthy one with
`GET /v1/models`: only a worker that is healthy and lists the model is routed to. When none
can take a request, `unavailable()` names the state, as SIE's fallback reason:
  provisioning   no worker of the model has passed a health check since the start (or the
                 profile lists none);
  model_loading  a worker passes its health check but lists other models, not the profile's
                 `served_name` (loading it, or serving another: SGLang lists its
                 --served-model-name from the start, so a worker launched without it lists
                 its model path; logged as a WARNING naming both, once per state change);
  unhealthy      a worker that was healthy fails its checks (or its connection) now;
  saturated      every routable worker is at MAX_IN_FLIGHT (serve.py adds: or answered
                 429/503). Within the chosen pool (the profile's workers, narrowed by `X-SIE-Pool` and
`X-SIE-MACHINE-PROFILE`), a request with a `routing_key` or `prompt_cache_key` goes to the
same worker by rendezvous hashing (highest hash of key + worker URL wins) while that worker
is healthy and below `MAX_IN_FLIGHT`; any number of gateway replicas agree on it without
sharing state. Other requests go to the least loaded worker (fewest requests in flight from
this process).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import trio

from edgegw.errors import GatewayError
from edgegw.local.profiles import LocalModel, Worker
from edgegw.upstream import Origin, UpstreamPool

log = logging.getLogger("edgegw.workers")

HEALTH_INTERVAL_S = 5.0
HEALTH_TIMEOUT_S = 2.0
# Requests one worker may have in flight from this gateway before it counts as saturated
# and affinity gives way to the least loaded worker.
MAX_IN_FLIGHT = 256
# The other models a worker lists that are kept (and named in its warning).
MAX_LISTED = 8


@dataclass(eq=False)
class WorkerState:
    worker: Worker
    origin: Origin
    # The model's name as the worker lists it in /v1/models (the profile's served_name).
    model: str = ""
    # The last /health answered 200.
    healthy: bool = False
    # A /health answered 200 since the gateway started.
    ever_healthy: bool = False
    # What its /v1/models lists instead of the model (empty: it lists the model, or says
    # nothing usable).
    listed: tuple[str, ...] = ()
    checked: bool = False
    in_flight: int = 0
    max_model_len: int | None = None
    vocab_size: int | None = None

    @property
    def saturated(self) -> bool:
        return self.in_flight >= MAX_IN_FLIGHT

    @property
    def loaded(self) -> bool:
        return not self.listed

    @property
    def routable(self) -> bool:
        return self.healthy and self.loaded


@dataclass(eq=False)
class LocalRuntime:
    """A local model profile and the live state of its workers."""

    profile: LocalModel
    workers: list[WorkerState] = field(default_factory=list)
    # tokenizers.Tokenizer from the profile's tokenizer.json, loaded once by Fleet.run().
    tokenizer: Any = None

    @property
    def context_window(self) -> int | None:
        """The smallest window among what the workers report and what the profile says
        (a profile may deliberately allow less than the worker was launched with)."""
        known = [w.max_model_len for w in self.workers if w.max_model_len]
        if self.profile.context_window:
            known.append(self.profile.context_window)
        return min(known) if known else None

    @property
    def vocab_size(self) -> int | None:
        reported = [w.vocab_size for w in self.workers if w.vocab_size]
        return min(reported) if reported else None


class Fleet:
    """Every local model's workers. Created by the app; `run()` is started by serve()."""

    def __init__(self, models: Iterable[LocalModel], pool: UpstreamPool) -> None:
        self.pool = pool
        self.models: dict[str, LocalRuntime] = {}
        for m in models:
            runtime = LocalRuntime(m)
            for w in m.workers:
                runtime.workers.append(WorkerState(w, Origin.from_url(w.url), m.served_name))
            self.models[m.name] = runtime

    def all_workers(self) -> list[WorkerState]:
        return [w for rt in self.models.values() for w in rt.workers]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the tokenizers (in a worker thread), probe every worker, then probe again
        every HEALTH_INTERVAL_S, forever."""
        for rt in self.models.values():
            if rt.profile.tokenizer is not None and rt.tokenizer is None:
                rt.tokenizer = await trio.to_thread.run_sync(_load_tokenizer, rt.profile.tokenizer)
        await self.check_all()
        task_status.started()
        while True:
            await trio.sleep(HEALTH_INTERVAL_S)
            await self.check_all()

    async def check_all(self) -> None:
        async with trio.open_nursery() as nursery:
            for w in self.all_workers():
                nursery.start_soon(self.check, w)

    async def check(self, w: WorkerState) -> None:
        ok, listed = False, w.listed
        with trio.move_on_after(HEALTH_TIMEOUT_S):
            try:
                status, _ = await self._get(w, b"/health")
                ok = status == 200
                if ok:
                    listed = await self._other_models(w)
                if ok and w.vocab_size is None:
                    await self._learn(w)
            except GatewayError:
                ok = False
        if ok != w.healthy or listed != w.listed or not w.checked:
            if ok and listed:
                log.warning(
                    "worker %s lists %s, not %r: it is not routed to (the profile's "
                    "served_model_name must be what the worker serves: SGLang's "
                    "--served-model-name, by default its model path)",
                    w.worker.url,
                    ", ".join(repr(name[:200]) for name in listed),
                    w.model,
                )
            else:
                log.info("worker %s is %s", w.worker.url, "healthy" if ok else "unhealthy")
        w.healthy, w.listed, w.checked = ok, listed, True
        w.ever_healthy = w.ever_healthy or ok

    async def _other_models(self, w: WorkerState) -> tuple[str, ...]:
        """What the worker's /v1/models lists when it does not list the model; empty when
        it does (or its answer says nothing usable). Learns its context length from the
        model's card."""
        status, body = await self._get(w, b"/v1/models")
        if status != 200:
            return ()
        try:
            cards = [c for c in orjson.loads(body).get("data") or () if isinstance(c, dict)]
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return ()
        if not cards:
            return ()
        mine = [c for c in cards if c.get("id") == w.model]
        for card in mine or cards[:1]:
            if isinstance(card.get("max_model_len"), int) and w.max_model_len is None:
                w.max_model_len = card["max_model_len"]
        if mine:
            return ()
        return tuple(c["id"] if isinstance(c.get("id"), str) else "?" for c in cards[:MAX_LISTED])

    async def _learn(self, w: WorkerState) -> None:
        """The worker's vocabulary size, when it says it."""
        for path in (b"/server_info", b"/get_server_info"):
            status, body = await self._get(w, path)
            if status != 200:
                continue
            try:
                info = orjson.loads(body)
            except orjson.JSONDecodeError:
                break
            vocab = _find_int(info, "vocab_size")
            if vocab:
                w.vocab_size = vocab
            break

    async def _get(self, w: WorkerState, path: bytes) -> tuple[int, bytes]:
        resp = await self.pool.send(
            w.origin, b"GET", w.origin.base_path.encode() + path, [(b"accept", b"application/json")]
        )
        try:
            body = await resp.read(4 * 1024 * 1024)
        finally:
            await resp.aclose()
        return resp.status, body

    def candidates(
        self, rt: LocalRuntime, pool: str | None, machine_profile: str | None
    ) -> list[WorkerState]:
        """The model's workers in the requested pool and machine profile (healthy or not)."""
        if not rt.workers:
            return []
        pool = pool or rt.profile.workers[0].pool
        out = [w for w in rt.workers if w.worker.pool == pool]
        if machine_profile is not None:
            out = [w for w in out if w.worker.machine_profile == machine_profile]
        return out

    @staticmethod
    def pick(
        candidates: list[WorkerState], key: str | None, exclude: set[int]
    ) -> WorkerState | None:
        usable = [w for w in candidates if w.routable and id(w) not in exclude]
        if not usable:
            return None
        if key:
            ranked = sorted(usable, key=lambda w: _rendezvous(key, w.worker.url), reverse=True)
            for w in ranked:
                if not w.saturated:
                    return w
        free = [w for w in usable if not w.saturated]
        if not free:
            return None
        return min(free, key=lambda w: (w.in_flight, w.worker.url))


def unavailable(candidates: list[WorkerState]) -> str:
    """Why no worker of `candidates` can take a request now (after `pick` found none):
    SIE's fallback reason for the state (module doc)."""
    if any(w.routable for w in candidates):
        return "saturated"
    if any(w.healthy and not w.loaded for w in candidates):
        return "model_loading"
    if any(w.ever_healthy for w in candidates):
        return "unhealthy"
    return "provisioning"


def _load_tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def _rendezvous(key: str, url: str) -> int:
    digest = hashlib.blake2b(f"{key}\0{url}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _find_int(doc: object, name: str, depth: int = 0) -> int | None:
    """A positive integer field anywhere in a (small) JSON document."""
    if depth > 6:
        return None
    if isinstance(doc, dict):
        v = doc.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
        for item in doc.values():
            found = _find_int(item, name, depth + 1)
            if found:
                return found
    elif isinstance(doc, list):
        for item in doc[:64]:
            found = _find_int(item, name, depth + 1)
            if found:
                return found
    return None
