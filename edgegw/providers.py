"""The remote providers, as data: one record each, no class hierarchy.

Every provider is reached through its OpenAI-compatible endpoint; the differences are
the base URL, how the key is sent, extra headers, and fields it refuses. Defaults come
from inference-gateway so that its deployments keep their environment variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from edgegw._core import ParsedRequest
from edgegw.upstream import Origin

AuthKind = Literal["bearer", "xheader", "none"]

# Accepted from clients but meaningless upstream: never forwarded to a remote provider.
GATEWAY_ONLY_FIELDS = ("routing_key",)


@dataclass(frozen=True, slots=True)
class Provider:
    id: str
    default_url: str
    auth: AuthKind
    chat_path: str = "/chat/completions"
    completions_path: str = "/completions"
    models_path: str = "/models"
    extra_headers: tuple[tuple[str, str], ...] = ()
    # Request fields this provider rejects; dropped from what is forwarded (stream usage
    # then comes from the provider's own default behaviour).
    omit_fields: tuple[str, ...] = ()
    # A local runtime that needs no key; configured only when its URL is set explicitly,
    # so a fresh gateway never probes a host nobody named.
    keyless: bool = False
    # How the model list at `models_path` is shaped and paged (edgegw.models reads it):
    # "openai" `data`; "anthropic" `data` + `has_more`/`last_id` (?after_id=); "cohere"
    # `models` named by `name` (?page_token=); "cloudflare" `result` (?page=).
    models_shape: Literal["openai", "anthropic", "cohere", "cloudflare"] = "openai"
    # The serving runtime that reports its configured context window: llama.cpp's
    # `/props`, Ollama's `/api/show`, both at the URL without its trailing /v1.
    runtime_window: Literal["llamacpp", "ollama"] | None = None
    # Top-level request members renamed on the way upstream, (from, to), unless the
    # request already has `to`: applied by the Rust core as it writes the body.
    renamed_fields: tuple[tuple[str, str], ...] = ()
    # Whether the provider takes `stream_options.include_usage`: edgegw then asks for usage
    # on every stream (the relay reads it, and withholds it from a client that did not ask),
    # as inference-gateway forces it for every provider but cohere and mistral.
    stream_usage: bool = True
    # The message members carrying a model's earlier reasoning that the provider takes back
    # (`reasoning_content`: DeepSeek, Moonshot and Z.AI want it on tool-call turns of their
    # thinking models; llama.cpp renders it into the chat template). The reference's other
    # members (`reasoning_content`, `reasoning`) are removed from what is sent to it.
    message_reasoning: tuple[str, ...] = ()
    # The members of a response message the provider takes back on an assistant message
    # when a client reuses a returned message (`annotations`, a `refusal` string). Only
    # OpenAI's API takes them; providers with strict schemas (Groq, Mistral) refuse them.
    # The SDKs' own additions (`parsed`, `tool_calls[].index`, `parsed_arguments`) and every
    # null member but `content` go to no provider.
    message_members: tuple[str, ...] = ()
    # The OpenAI-compatible embeddings endpoint under the base URL (None: the provider has
    # none, and /v1/embeddings refuses it with 400), as each provider documents it.
    embeddings_path: str | None = None
    # Whether it answers `encoding_format: base64` itself; when not, edgegw asks it for
    # floats and encodes them for a client that asked for base64.
    embeddings_base64: bool = False
    # Embeddings request members renamed on the way upstream (Mistral's `output_dimension`).
    embeddings_renamed: tuple[tuple[str, str], ...] = ()
    # The rerank endpoint (query + documents -> results of index and relevance_score: Cohere's
    # v2, llama.cpp's Jina-shaped one); None: /v1/rerank refuses the provider with 400.
    rerank_path: str | None = None


PROVIDERS: dict[str, Provider] = {
    p.id: p
    for p in (
        Provider(
            "openai",
            "https://api.openai.com/v1",
            "bearer",
            message_members=("annotations", "refusal"),
            embeddings_path="/embeddings",
            embeddings_base64=True,
        ),
        Provider(
            "anthropic",
            "https://api.anthropic.com/v1",
            "xheader",
            extra_headers=(("anthropic-version", "2023-06-01"),),
            models_path="/models?limit=1000",
            models_shape="anthropic",
        ),
        Provider(
            "cohere",
            "https://api.cohere.ai",
            "bearer",
            chat_path="/compatibility/v1/chat/completions",
            completions_path="/compatibility/v1/completions",
            models_path="/v1/models?page_size=1000",
            models_shape="cohere",
            omit_fields=("stream_options",),
            stream_usage=False,
            # The Compatibility API's embeddings (float and base64); rerank is Cohere's own v2.
            embeddings_path="/compatibility/v1/embeddings",
            embeddings_base64=True,
            rerank_path="/v2/rerank",
        ),
        Provider("groq", "https://api.groq.com/openai/v1", "bearer"),
        Provider(
            "cloudflare",
            "https://api.cloudflare.com/client/v4/accounts/{ACCOUNT_ID}/ai",
            "bearer",
            chat_path="/v1/chat/completions",
            completions_path="/v1/completions",
            # The model catalogue in OpenRouter's shape (ids, context_length, per-token
            # pricing), as models.dev's own sync reads it; /finetunes/public lists LoRAs.
            models_path="/models/search?format=openrouter&per_page=1000",
            models_shape="cloudflare",
            embeddings_path="/v1/embeddings",
        ),
        Provider(
            "ollama",
            "http://ollama:8080/v1",
            "none",
            keyless=True,
            runtime_window="ollama",
            embeddings_path="/embeddings",
        ),
        Provider("ollama_cloud", "https://ollama.com/v1", "bearer"),
        Provider(
            "google",
            "https://generativelanguage.googleapis.com/v1beta/openai",
            "bearer",
            embeddings_path="/embeddings",
        ),
        Provider(
            "deepseek",
            "https://api.deepseek.com",
            "bearer",
            message_reasoning=("reasoning_content",),
        ),
        Provider(
            "mistral",
            "https://api.mistral.ai/v1",
            "bearer",
            omit_fields=("stream_options",),
            stream_usage=False,
            embeddings_path="/embeddings",
            embeddings_base64=True,
            embeddings_renamed=(("dimensions", "output_dimension"),),
        ),
        # MiniMax has deprecated `max_tokens` in favour of `max_completion_tokens`.
        Provider(
            "minimax",
            "https://api.minimax.io/v1",
            "bearer",
            renamed_fields=(("max_tokens", "max_completion_tokens"),),
        ),
        Provider(
            "moonshot",
            "https://api.moonshot.ai/v1",
            "bearer",
            message_reasoning=("reasoning_content",),
        ),
        Provider(
            "nvidia", "https://integrate.api.nvidia.com/v1", "bearer", embeddings_path="/embeddings"
        ),
        Provider(
            "llamacpp",
            "http://llamacpp:8080/v1",
            "bearer",
            keyless=True,
            runtime_window="llamacpp",
            message_reasoning=("reasoning_content",),
            # llama-server started with --embeddings / --reranking.
            embeddings_path="/embeddings",
            rerank_path="/rerank",
        ),
        # Z.AI (Zhipu GLM), as inference-gateway v0.48 has it.
        Provider(
            "zai",
            "https://api.z.ai/api/paas/v4",
            "bearer",
            message_reasoning=("reasoning_content",),
            embeddings_path="/embeddings",
        ),
    )
}


def provider_body(
    req: ParsedRequest, target: Target, model: str, drop: tuple[str, ...], tools: bytes | None
) -> tuple[bytes, bool]:
    """A chat or completions body as `target` takes it, and whether edgegw asked for stream
    usage the client did not (the relay then withholds it). `drop`: fields left out (a local
    model's fallback); `tools`: the MCP tools added (their loop writes its own stream, so
    usage is not asked for)."""
    provider = target.provider
    # OpenAI refuses stream_options on a request that does not stream.
    omit = (*target.omit, *drop) if req.stream else (*target.omit, *drop, "stream_options")
    # Usage is known for every stream: asked for when the client did not.
    ask = req.stream and not req.include_usage and provider.stream_usage and tools is None
    body = req.upstream_body(
        model, omit, rename=provider.renamed_fields, tools=tools, ask_usage=ask, keep=target.keep
    )
    return body, ask


def auth_headers(provider: Provider, key: str | None) -> list[tuple[bytes, bytes]]:
    """The headers that carry the provider's credentials (and its fixed extras)."""
    headers = [(k.encode(), v.encode()) for k, v in provider.extra_headers]
    if key:
        if provider.auth == "xheader":
            headers.append((b"x-api-key", key.encode()))
        elif provider.auth == "bearer" or provider.keyless:
            headers.append((b"authorization", b"Bearer " + key.encode()))
    return headers


def model_allowed(allowed: frozenset[str], disallowed: frozenset[str], name: str) -> bool:
    """inference-gateway's ALLOWED_MODELS / DISALLOWED_MODELS, case-insensitive: an entry
    matches the full `provider/model` or the bare model; an allow-list wins over the
    deny-list. `name` is `provider/model`."""
    if not allowed and not disallowed:
        return True
    full = name.lower()
    bare = full.partition("/")[2]
    if allowed:
        return full in allowed or bare in allowed
    return full not in disallowed and bare not in disallowed


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """A provider as configured: its record, URL and key (never printed)."""

    provider: Provider
    url: str
    key: str | None = field(repr=False)

    @property
    def id(self) -> str:
        return self.provider.id


class Target:
    """A configured remote provider: where to send and with which credentials (built once
    per provider at start, so a request copies no header)."""

    __slots__ = (
        "config",
        "provider",
        "origin",
        "auth",
        "json_headers",
        "sse_headers",
        "omit",
        "keep",
        "secret",
    )

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.provider = config.provider
        self.origin = Origin.from_url(config.url)
        self.auth = auth_headers(config.provider, config.key)
        ctype = (b"content-type", b"application/json")
        # Bodies come back unencoded: edgegw relays them byte for byte (edgegw.bodies
        # decodes a provider that compresses anyway).
        identity = (b"accept-encoding", b"identity")
        self.json_headers = (ctype, (b"accept", b"application/json"), identity, *self.auth)
        self.sse_headers = (ctype, (b"accept", b"text/event-stream"), identity, *self.auth)
        # Scrubbed from any upstream text relayed to a client.
        self.secret = config.key.encode() if config.key else None
        # Request members never forwarded to this provider.
        self.omit = GATEWAY_ONLY_FIELDS + config.provider.omit_fields
        # Optional message members sent to this provider (earlier turns' reasoning, response
        # members); the Rust core leaves out the others as it writes the body.
        self.keep = config.provider.message_reasoning + config.provider.message_members

    def path(self, path: str) -> bytes:
        """An endpoint path under the provider's base URL, as a request target."""
        return (self.origin.base_path + path).encode()
