"""A scriptable fake of the fifteen providers' model-list APIs: edgegw/plainhttp.py on loopback.

One server plays every provider, each under its own path prefix: `fake.env(...)` points
`<ID>_API_URL` at `http://127.0.0.1:<port>/<id><the provider's real base path>` and sets a
key. Each provider answers at its real models path, in its real native shape, and checks
the credentials that provider takes: `Authorization: Bearer <key>`, Anthropic's `x-api-key`
plus `anthropic-version`, or nothing at all (Ollama). Anything else is a 401, so a provider
the gateway addresses wrongly drops out of the list and the test sees it.

    openai, groq, deepseek, google, mistral, minimax, moonshot, nvidia, ollama,
    ollama_cloud, llamacpp, zai
                             GET .../models      {"object": "list", "data": [...]}
    anthropic                GET /v1/models      {"data", "has_more", "first_id", "last_id"},
                                                 paged by ?limit= and ?after_id=
    cohere                   GET /v1/models      {"models": [...], "next_page_token"},
                                                 paged by ?page_size= and ?page_token=
    cloudflare               GET .../ai/models/search?format=openrouter
                                                 {"success", "result": [...], "result_info"},
                                                 paged by ?per_page= and ?page=
    llamacpp                 GET /props          {"default_generation_settings": {"n_ctx"}}
    ollama                   POST /api/show      {"parameters", "model_info"} per model

Embeddings and rerank, at each provider's real path (EMBEDDINGS, RERANK), strict about
the members each takes:

    openai, cohere (/compatibility/v1), cloudflare (/v1), ollama, google, mistral, nvidia,
    llamacpp, zai        POST .../embeddings   OpenAI's {data: [{object, index, embedding}],
                                               model, object, usage}; base64 only where the
                                               provider documents it (BASE64; elsewhere 400);
                                               Mistral names `dimensions` `output_dimension`
    cohere               POST /v2/rerank       {id, results: [{index, relevance_score}], meta}
                                               (v2 has no return_documents: 400)
    llamacpp             POST /v1/rerank       {model, object, usage, results: [...]}

The vectors and scores are fake_sglang's (`embedding_of`, `relevance_of`); `fake.answers`
keeps every such answer as sent, (provider, parsed JSON).

`fake.scripts[pid]` (a `Script`) holds a provider's models in its native entry shape and
how it misbehaves: a delay or a hang before the list, an error status, a page size, and the
same for its runtime endpoint. `fake.requests` records every request before it is answered.
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import trio

from edgegw import plainhttp

from .fake_sglang import embedding_of, relevance_of

ACCOUNT = "acct-0123"
ANTHROPIC_VERSION = "2023-06-01"

# id -> (the provider's real base path, its models path below it, how it authenticates)
LAYOUTS: dict[str, tuple[str, str, str]] = {
    "openai": ("/v1", "/models", "bearer"),
    "anthropic": ("/v1", "/models", "xheader"),
    "cohere": ("", "/v1/models", "bearer"),
    "groq": ("/openai/v1", "/models", "bearer"),
    "cloudflare": (f"/client/v4/accounts/{ACCOUNT}/ai", "/models/search", "bearer"),
    "ollama": ("/v1", "/models", "none"),
    "ollama_cloud": ("/v1", "/models", "bearer"),
    "google": ("/v1beta/openai", "/models", "bearer"),
    "deepseek": ("", "/models", "bearer"),
    "mistral": ("/v1", "/models", "bearer"),
    "minimax": ("/v1", "/models", "bearer"),
    "moonshot": ("/v1", "/models", "bearer"),
    "nvidia": ("/v1", "/models", "bearer"),
    "llamacpp": ("/v1", "/models", "bearer"),
    "zai": ("/api/paas/v4", "/models", "bearer"),
}


# id -> the embeddings path below the provider's base path (as the providers document it).
EMBEDDINGS: dict[str, str] = {
    "openai": "/embeddings",
    "cohere": "/compatibility/v1/embeddings",
    "cloudflare": "/v1/embeddings",
    "ollama": "/embeddings",
    "google": "/embeddings",
    "mistral": "/embeddings",
    "nvidia": "/embeddings",
    "llamacpp": "/embeddings",
    "zai": "/embeddings",
}
BASE64 = frozenset({"openai", "cohere", "mistral"})
EMBEDDING_DIM = 12
# id -> (rerank path below the base path, the members it takes)
RERANK: dict[str, tuple[str, frozenset[str]]] = {
    "cohere": (
        "/v2/rerank",
        frozenset({"model", "query", "documents", "top_n", "max_tokens_per_doc"}),
    ),
    "llamacpp": ("/rerank", frozenset({"model", "query", "documents", "top_n"})),
}


def _models(ids: list[str], **extra: Any) -> list[dict[str, Any]]:
    return [{"id": i, "object": "model", "created": 1_700_000_000, **extra} for i in ids]


def default_models() -> dict[str, list[dict[str, Any]]]:
    """Each provider's models as its listing shows them (fields trimmed to what matters)."""
    return {
        "openai": _models(["gpt-5", "gpt-4o-mini"], owned_by="system"),
        "anthropic": [
            {
                "type": "model",
                "id": f"claude-{name}",
                "display_name": name,
                "created_at": created,
                "max_input_tokens": 200_000,
                "max_tokens": 64_000,
            }
            for name, created in (
                ("sonnet-4-5-20250929", "2025-09-29T00:00:00Z"),
                ("opus-4-1-20250805", "2025-08-05T00:00:00Z"),
                ("3-5-haiku-20241022", "2024-10-22T00:00:00Z"),
            )
        ],
        "cohere": [
            {"name": "command-a-03-2025", "endpoints": ["chat"], "context_length": 256_000},
            {"name": "embed-v4.0", "endpoints": ["embed"], "context_length": 128_000},
            {"name": "command-r7b-12-2024", "endpoints": ["chat"], "context_length": 128_000},
        ],
        "groq": _models(
            ["llama-3.3-70b-versatile"], owned_by="Meta", active=True, context_window=131_072
        ),
        "cloudflare": [
            {
                "id": "@cf/meta/llama-3.1-8b-instruct",
                "name": "Llama 3.1 8B Instruct",
                "created": 1_721_952_000,
                "context_length": 128_000,
                "pricing": {"prompt": "0.000000282", "completion": "0.000000827"},
            },
            {
                "id": "workers-ai/@cf/qwen/qwq-32b",
                "name": "QwQ 32B",
                "created": 1_741_000_000,
                "context_length": 24_000,
                "pricing": {"prompt": "0.00000066", "completion": "0"},
            },
        ],
        "ollama": _models(["llama3.2:3b", "qwen3:8b"], owned_by="library"),
        "ollama_cloud": _models(["deepseek-v4-pro", "gpt-oss:120b"], owned_by="ollama"),
        "google": [
            {"id": "models/gemini-2.5-flash", "object": "model", "owned_by": "google"},
            {"id": "models/gemini-2.0-flash-latest", "object": "model", "owned_by": "google"},
        ],
        "deepseek": [{"id": "deepseek-chat", "object": "model", "owned_by": "deepseek"}],
        "mistral": _models(
            ["mistral-small-latest"],
            owned_by="mistralai",
            name="mistral-small-2506",
            max_context_length=131_072,
        ),
        "minimax": _models(["MiniMax-M2"], owned_by="minimax"),
        "moonshot": _models(["kimi-k2-0905-preview"], owned_by="moonshot"),
        "nvidia": _models(
            ["meta/llama-3.1-8b-instruct", "upstage/solar-10.7b-instruct"], owned_by="nvidia"
        ),
        "llamacpp": _models(
            ["gemma-3-270m-it"],
            owned_by="llamacpp",
            meta={"n_ctx_train": 32_768, "n_ctx": 8_192, "n_params": 268_098_176},
        ),
        "zai": _models(["glm-4.6"], owned_by="z-ai"),
    }


@dataclass
class Script:
    """How one provider answers. The list and the runtime endpoint misbehave separately."""

    models: list[dict[str, Any]]
    page_size: int = 1000  # the server's own cap (Anthropic, Cohere, Cloudflare pages)
    delay_s: float = 0.0
    hang: bool = False
    status: int = 200
    body: bytes | None = None  # answer these bytes instead of the list
    runtime_delay_s: float = 0.0
    runtime_status: int = 200


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes
    delay_s: float = 0.0
    hang: bool = False
    runtime: bool = False  # a /props or /api/show answer (counted for concurrency)


@dataclass(frozen=True)
class Recorded:
    provider: str
    method: str
    path: str  # below the provider prefix, with the query
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeProviders:
    scripts: dict[str, Script] = field(
        default_factory=lambda: {pid: Script(m) for pid, m in default_models().items()}
    )
    # llama.cpp's /props and Ollama's /api/show answers (None / absent: 404).
    props: dict[str, Any] | None = field(
        default_factory=lambda: {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}
    )
    ollama_show: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "llama3.2:3b": {
                "parameters": 'num_ctx                        16384\nstop "<|eot_id|>"',
                "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
            },
            "qwen3:8b": {
                "parameters": "temperature 0.6",
                "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960},
            },
        }
    )
    # Static files under /files/<name> (a models.dev api.json for `edgegw models sync`).
    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    answers: list[tuple[str, Any]] = field(default_factory=list)
    runtime_in_flight: int = 0
    runtime_max_in_flight: int = 0
    port: int = 0

    def url(self, pid: str) -> str:
        return f"http://127.0.0.1:{self.port}/{pid}{LAYOUTS[pid][0]}"

    @staticmethod
    def key(pid: str) -> str:
        return f"key-for-{pid}"

    def env(self, *pids: str) -> dict[str, str]:
        """URL and key variables pointing the given providers (default: all) here."""
        env: dict[str, str] = {}
        for pid in pids or tuple(LAYOUTS):
            env[f"{pid.upper()}_API_URL"] = self.url(pid)
            if LAYOUTS[pid][2] != "none":
                env[f"{pid.upper()}_API_KEY"] = self.key(pid)
        return env

    def hits(self, pid: str, path: str | None = None) -> int:
        """Requests `pid` got at `path` below its prefix (its models path by default),
        whatever the query string."""
        base, models, _ = LAYOUTS[pid]
        want = path if path is not None else base + models
        return sum(1 for r in self.requests if r.provider == pid and r.path.split("?")[0] == want)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        server = plainhttp.Server("fake providers", self._answer_request)
        async with trio.open_nursery() as nursery:
            self.port = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            task_status.started(self.port)

    async def _answer_request(self, request: plainhttp.Request, out: plainhttp.Responder) -> None:
        reply = self._answer(request)
        self.runtime_in_flight += reply.runtime
        self.runtime_max_in_flight = max(self.runtime_max_in_flight, self.runtime_in_flight)
        try:
            await trio.sleep(reply.delay_s)
            if reply.hang:
                await trio.sleep_forever()
        finally:
            self.runtime_in_flight -= reply.runtime
        await out.send(reply.status, [(b"content-type", b"application/json")], reply.body)

    def _answer(self, request: plainhttp.Request) -> _Reply:
        body = request.body or b""
        pid, _, rest = request.target.lstrip("/").partition("/")
        path = "/" + rest
        headers, method = request.headers, request.method
        if pid == "files" and rest in self.files:
            return _Reply(200, self.files[rest])
        if pid not in LAYOUTS:
            return _Reply(404, _error("no such provider"))
        self.requests.append(Recorded(pid, method, path, headers, body))
        base, models_path, auth = LAYOUTS[pid]
        script = self.scripts[pid]
        if not _authorised(pid, auth, headers):
            return _Reply(401, _error("wrong credentials"))
        split = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        if method == "GET" and split.path == base + models_path:
            if script.status != 200:
                return _Reply(script.status, _error("scripted"), script.delay_s, script.hang)
            payload = script.body if script.body is not None else _list(pid, script, query)
            return _Reply(200, payload, script.delay_s, script.hang)
        if method == "POST" and split.path == base + EMBEDDINGS.get(pid, "\0"):
            return self._embeddings(pid, body)
        if method == "POST" and pid in RERANK and split.path == base + RERANK[pid][0]:
            return self._rerank(pid, body)
        root = base.removesuffix("/v1")
        route = (pid, method, split.path)
        if route not in (
            ("llamacpp", "GET", root + "/props"),
            ("ollama", "POST", root + "/api/show"),
        ):
            return _Reply(404, _error(f"no route {method} {split.path}"))
        delay_s = script.runtime_delay_s
        if script.runtime_status != 200:
            return _Reply(script.runtime_status, _error("scripted"), delay_s, runtime=True)
        if pid == "llamacpp":
            answer = self.props
        else:
            answer = self.ollama_show.get(orjson.loads(body or b"{}").get("model"))
        if answer is None:
            return _Reply(404, _error("not found"), delay_s, runtime=True)
        return _Reply(200, orjson.dumps(answer), delay_s, runtime=True)

    def _embeddings(self, pid: str, body: bytes) -> _Reply:
        doc = orjson.loads(body)
        dims_field = "output_dimension" if pid == "mistral" else "dimensions"
        known = {"model", "input", "encoding_format", "user", dims_field}
        if set(doc) - known:
            return _Reply(400, _error(f"unknown members {sorted(set(doc) - known)}"))
        encoding = doc.get("encoding_format", "float")
        if encoding not in ("float", "base64") or (encoding == "base64" and pid not in BASE64):
            return _Reply(400, _error(f"encoding_format {encoding!r} is not supported"))
        raw = doc["input"]
        items = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else raw
        size = doc.get(dims_field) or EMBEDDING_DIM
        data = []
        for i, item in enumerate(items):
            vector = embedding_of(item, EMBEDDING_DIM)[:size]
            value: Any = vector
            if encoding == "base64":
                value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = sum(len(x.split()) if isinstance(x, str) else len(x) for x in items)
        answer = {
            "object": "list",
            "data": data,
            "model": doc["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        self.answers.append((pid, answer))
        return _Reply(200, orjson.dumps(answer))

    def _rerank(self, pid: str, body: bytes) -> _Reply:
        doc = orjson.loads(body)
        known = RERANK[pid][1]
        if set(doc) - known:
            return _Reply(400, _error(f"unknown members {sorted(set(doc) - known)}"))
        query, documents = doc["query"], doc["documents"]
        results = sorted(
            (
                {"index": i, "relevance_score": relevance_of(query, d)}
                for i, d in enumerate(documents)
            ),
            key=lambda r: -r["relevance_score"],
        )[: doc.get("top_n") or len(documents)]
        tokens = sum(len(query.split()) + len(d.split()) for d in documents)
        answer: dict[str, Any]
        if pid == "cohere":
            answer = {
                "id": "07734bd2-2473-4f07-94e1-0d9f0e6843cf",
                "results": results,
                "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
            }
        else:
            answer = {
                "model": doc["model"],
                "object": "list",
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                "results": results,
            }
        self.answers.append((pid, answer))
        return _Reply(200, orjson.dumps(answer))


def _authorised(pid: str, auth: str, headers: dict[str, str]) -> bool:
    key = FakeProviders.key(pid)
    if auth == "none":
        return "authorization" not in headers and "x-api-key" not in headers
    if auth == "xheader":
        return (
            headers.get("x-api-key") == key
            and headers.get("anthropic-version") == ANTHROPIC_VERSION
            and "authorization" not in headers
        )
    return headers.get("authorization") == f"Bearer {key}"


def _list(pid: str, script: Script, query: dict[str, str]) -> bytes:
    """The provider's native list (one page of it) as bytes."""
    models = script.models
    if pid == "anthropic":
        start = 0
        if "after_id" in query:
            start = next(i for i, m in enumerate(models) if m["id"] == query["after_id"]) + 1
        page = models[start : start + min(int(query.get("limit", "20")), script.page_size)]
        return orjson.dumps(
            {
                "data": page,
                "has_more": start + len(page) < len(models),
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
            }
        )
    if pid == "cohere":
        start = int(query.get("page_token", "0"))
        size = min(int(query.get("page_size", "20")), script.page_size)
        doc: dict[str, Any] = {"models": models[start : start + size]}
        if start + size < len(models):
            doc["next_page_token"] = str(start + size)
        return orjson.dumps(doc)
    if pid == "cloudflare":
        if query.get("format") != "openrouter":
            return orjson.dumps({"success": False, "errors": [{"message": "want openrouter"}]})
        page = int(query.get("page", "1"))
        size = min(int(query.get("per_page", "20")), script.page_size)
        chunk = models[(page - 1) * size : page * size]
        return orjson.dumps(
            {
                "success": True,
                "errors": [],
                "messages": [],
                "result": chunk,
                "result_info": {
                    "page": page,
                    "per_page": size,
                    "count": len(chunk),
                    "total_count": len(models),
                    "total_pages": max(math.ceil(len(models) / size), 1),
                },
            }
        )
    doc = {"object": "list", "data": models}
    if pid == "llamacpp":  # llama-server lists its model twice, Ollama-style too
        doc["models"] = [{"name": m["id"], "model": m["id"]} for m in models]
    return orjson.dumps(doc)


def _error(message: str) -> bytes:
    return orjson.dumps({"error": {"message": f"fake provider: {message}", "type": "error"}})
