"""/v1/messages and /v1/responses for any model (ENABLE_API_TRANSLATION=true): a request
whose target has no such API of its own (a local model, a routing alias, a provider other
than the API's owner) is translated into a chat request and served by the chat path
(edgegw.routes.generation: decide, then do, with the guardrails, the MCP loop, local
fallback and routing as on /v1/chat/completions), its answer translated back as it is
sent (edgegw.translate.answer). The translations themselves are edgegw.translate's pure
functions; a request naming the API's own provider is forwarded as before
(edgegw.routes.native).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import trio

from edgegw._core import parse_chat_request
from edgegw.asgi import Call
from edgegw.errors import OPENAI_SHAPE, fail
from edgegw.gateway import Gateway
from edgegw.local.contract import named_profile
from edgegw.mcp import agent as mcp_agent
from edgegw.resolve import NativeApi
from edgegw.routes.generation import generate, parse_traced
from edgegw.routes.record import Recording
from edgegw.translate import messages
from edgegw.translate.answer import TranslatedSend, Translation

# Tokens a chat template adds per message for its role markers (edgegw.local.contract's
# lower bound of a prompt, counted the same way).
TEMPLATE_TOKENS_PER_MESSAGE = 3

# A translated API: its request as a chat request, and its answers for the model as named.
ChatRequest = Callable[[Any], dict[str, Any]]
# (the request, the names of the tools whose calls the gateway runs itself: MCP's)
Answers = Callable[[Any, frozenset[str]], Translation]


def translates(gw: Gateway, call: Call, model: str, api: NativeApi) -> bool:
    """Whether a request for `model` on `api` is translated: translation is on, and the
    model does not name a provider that has the API (the generation route's order:
    `?provider=`, a routing alias, a local model, the `provider/` prefix)."""
    if not gw.settings.enable_api_translation:
        return False
    provider = call.provider_param()
    if provider is not None:
        return provider not in api.providers
    if gw.router is not None and gw.router.pool(model) is not None:
        return True
    if model in gw.fleet.models or named_profile(gw.fleet.models, model) is not None:
        return True
    return model.partition("/")[0].lower() not in api.providers


async def serve(
    gw: Gateway, call: Call, body: bytes, chat_request: ChatRequest, answers: Answers
) -> None:
    """`body`: the API's request, already read and checked as JSON by the Rust core."""
    doc = orjson.loads(body)
    chat = chat_request(doc)
    chat_body = orjson.dumps(chat)
    req = parse_traced(call, parse_chat_request, chat_body)
    # MCP tools run inside the chat path (edgegw.mcp): their calls, which a chat stream
    # shows round by round, are not the client's to see.
    offered = mcp_agent.offer(gw.mcp, call, req)
    hidden = frozenset() if offered is None else offered.names
    # The chat path answers in chat's shapes (its errors too: they are written again in the
    # API's); the client's call keeps the API's shape for what is raised past it.
    inner = call.answered_into(TranslatedSend(call.send, answers(doc, hidden)))
    inner.errors = OPENAI_SHAPE
    with Recording(gw, call, req.model, "chat", req.stream) as rec:
        rec.outcome = await generate(gw, inner, req, chat_body, parse_chat_request, rec)


async def count_tokens(gw: Gateway, call: Call, body: bytes, model: str) -> None:
    """/v1/messages/count_tokens for a local model, from its profile's tokenizer: the
    prompt's texts as the translation sends them, plus the template's per-message tokens.
    Any other target is refused: a count edgegw cannot make would be a guess."""
    rt = gw.fleet.models.get(model) if call.provider_param() is None else None
    if rt is None and call.provider_param() is None:
        named = named_profile(gw.fleet.models, model)
        rt = named[0] if named is not None and not named[1] else None
    if rt is None or rt.tokenizer is None:
        raise fail(
            "unsupported_provider",
            "Token counting is available for anthropic models and for local models whose "
            "profile names a tokenizer.",
            param="model",
        )
    gw.resolver.check_allowed("local", rt.profile.name)
    chat = messages.chat_request({**orjson.loads(body), "max_tokens": 1})
    texts = messages.prompt_texts(chat)
    tokenizer = rt.tokenizer
    # A coding agent's prompt (its tools, files) runs to many thousand tokens: off the loop.
    encoded = await trio.to_thread.run_sync(
        lambda: tokenizer.encode_batch(texts, add_special_tokens=False)
    )
    count = sum(len(e.ids) for e in encoded)
    count += TEMPLATE_TOKENS_PER_MESSAGE * len(chat["messages"])
    await call.respond_json(200, orjson.dumps({"input_tokens": count}))
