"""The APIs whose requests and answers pass the guardrails, as data: one record each (its
name in the input document's `api`, how edgegw writes its errors, how its stream events
carry text), and the table that finds the API a /proxy request speaks from its path.

A native route names its API (/v1/chat/completions is CHAT). Through /proxy/<provider>/,
a POST whose path under the provider's base ends as one of PROXIED_ENDINGS (matched on
the percent-decoded, lower-cased segments, so that no spelling of the path the provider
accepts escapes) or is Workers AI's `run/<model>` is that API; every other proxied request
(GETs, embeddings, audio, files, batches, count_tokens) is relayed unjudged.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from edgegw.errors import ANTHROPIC_SHAPE, OPENAI_SHAPE, RESPONSES_SHAPE, ErrorShape
from edgegw.tap import (
    TextPiece,
    TextTap,
    text_anthropic,
    text_cohere,
    text_openai,
    text_responses,
    text_workers_ai,
)


def _no_text(data: bytes) -> list[TextPiece]:
    """An Images stream's events are pictures: no text for a policy."""
    return []


@dataclass(frozen=True, slots=True)
class GuardedApi:
    name: str  # the input document's `api`
    # How a block is answered, and how it ends a stream already started.
    shape: ErrorShape
    # The text of one of its stream events (edgegw.tap).
    text: TextTap


CHAT = GuardedApi("chat.completions", OPENAI_SHAPE, text_openai)
COMPLETIONS = GuardedApi("completions", OPENAI_SHAPE, text_openai)
RESPONSES = GuardedApi("responses", RESPONSES_SHAPE, text_responses)
MESSAGES = GuardedApi("messages", ANTHROPIC_SHAPE, text_anthropic)
IMAGES_GENERATIONS = GuardedApi("images.generations", OPENAI_SHAPE, _no_text)
IMAGES_EDITS = GuardedApi("images.edits", OPENAI_SHAPE, _no_text)
IMAGES_VARIATIONS = GuardedApi("images.variations", OPENAI_SHAPE, _no_text)
# Judged on the way in only (edgegw.routes.retrieval): their answers are vectors and scores.
EMBEDDINGS = GuardedApi("embeddings", OPENAI_SHAPE, _no_text)
RERANK = GuardedApi("rerank", OPENAI_SHAPE, _no_text)
# Provider-native generation APIs reachable only through /proxy; edgegw has no error shape
# of theirs, so a block is written in OpenAI's envelope.
COHERE_CHAT = GuardedApi("cohere.chat", OPENAI_SHAPE, text_cohere)
WORKERS_AI_RUN = GuardedApi("workers_ai.run", OPENAI_SHAPE, text_workers_ai)

# The last segments of a proxied path -> its API, the longer ending first. Every provider's
# OpenAI-compatible base (Cohere's /compatibility/v1, Cloudflare's /v1, ...) ends the same.
PROXIED_ENDINGS: tuple[tuple[tuple[str, ...], GuardedApi], ...] = (
    (("chat", "completions"), CHAT),
    (("completions",), COMPLETIONS),
    (("responses",), RESPONSES),
    (("messages",), MESSAGES),
    (("images", "generations"), IMAGES_GENERATIONS),
    (("images", "edits"), IMAGES_EDITS),
    (("images", "variations"), IMAGES_VARIATIONS),
    # Cohere's own v1/chat and v2/chat.
    (("chat",), COHERE_CHAT),
)


def proxied_api(method: str, path: str) -> GuardedApi | None:
    """The API a /proxy request speaks, or None when it is not a generation: `path` is the
    upstream path under the provider's base, as sent (percent-encoded)."""
    if method != "POST":
        return None
    segments = tuple(s for s in unquote(path, errors="replace").lower().split("/") if s)
    if len(segments) > 1 and segments[0] == "run":  # Workers AI: run/@cf/<model>
        return WORKERS_AI_RUN
    for ending, api in PROXIED_ENDINGS:
        if segments[-len(ending) :] == ending:
            return api
    return None
