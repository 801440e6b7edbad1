"""The embeddings and rerank requests and answers, pure: bytes in, a checked request out (or
the 400 that refuses it), and the answers in the one shape each route gives its clients.

The body is checked by the Rust core (rust/src/request/retrieval.rs: strict JSON, one
allow-list table per route, the operator's bounds on inputs and bytes: 400 `invalid_request`,
`unsupported_field`, `too_many_inputs`, `input_too_long`); orjson then reads the values the
route uses (token counts, the upstream body, base64, a rerank's documents).

/v1/embeddings is OpenAI's `CreateEmbeddingRequest`: `input` a string, an array of strings,
an array of token ids or an array of such arrays; `encoding_format` `float` or `base64`
(little-endian float32, as OpenAI sends it); `dimensions`; `user`. /v1/rerank is the shape
SGLang, Cohere, Jina and Voyage share: `query`, `documents` (strings), `top_n`,
`return_documents`; its answer is Jina's and Cohere's, `results` of `index`,
`relevance_score` and (asked for) `document: {"text"}`, best first.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from edgegw._core import parse_embeddings_request, parse_rerank_request
from edgegw.errors import GatewayError, fail
from edgegw.providers import Provider

Input = str | list[int]


def _values(body: bytes) -> dict[str, Any]:
    """The members of a body the Rust core checked, as values (`null` ones left out)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:  # the two parsers disagreeing is a 400, never a 500
        raise fail("invalid_request", "invalid JSON") from None
    return {k: v for k, v in doc.items() if v is not None}


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    model: str
    inputs: list[Input]
    # The client sent one input (a string or one token array), not a list of them.
    single: bool
    tokens: bool  # token-id input
    encoding_format: str  # what the client gets
    dimensions: int | None
    user: str | None

    def upstream_body(self, model: str, provider: Provider) -> tuple[bytes, bool]:
        """The body for `provider`, and whether edgegw encodes the answer to base64 (the
        provider does not): the client's members as sent but `model`, renamed members."""
        encode = self.encoding_format == "base64" and not provider.embeddings_base64
        doc: dict[str, Any] = {"model": model, "input": self.wire_input()}
        if self.encoding_format == "base64" and not encode:
            doc["encoding_format"] = "base64"
        if self.dimensions is not None:
            doc["dimensions"] = self.dimensions
        if self.user is not None:
            doc["user"] = self.user
        for old, new in provider.embeddings_renamed:
            if old in doc:
                doc[new] = doc.pop(old)
        return orjson.dumps(doc), encode

    def local_body(self, served_name: str) -> bytes:
        """The body for an SGLang worker: floats always (edgegw encodes base64 itself)."""
        doc: dict[str, Any] = {"model": served_name, "input": self.wire_input()}
        if self.dimensions is not None:
            doc["dimensions"] = self.dimensions
        return orjson.dumps(doc)

    def wire_input(self) -> Any:
        return self.inputs[0] if self.single else self.inputs


def parse_embeddings(body: bytes, *, max_inputs: int, max_input_bytes: int) -> EmbeddingsRequest:
    checked = parse_embeddings_request(body, max_inputs, max_input_bytes)
    doc = _values(body)
    raw = doc["input"]
    return EmbeddingsRequest(
        model=checked.model,
        inputs=[raw] if checked.single else raw,
        single=checked.single,
        tokens=checked.tokens,
        encoding_format=doc.get("encoding_format", "float"),
        dimensions=doc.get("dimensions"),
        user=doc.get("user"),
    )


@dataclass(frozen=True, slots=True)
class RerankRequest:
    model: str
    query: str
    documents: list[str]
    top_n: int | None
    return_documents: bool

    def upstream_body(self, model: str) -> bytes:
        """The body for a remote provider: what the shared shape carries but
        `return_documents` (Cohere's v2 has none: edgegw adds the documents itself)."""
        doc: dict[str, Any] = {"model": model, "query": self.query, "documents": self.documents}
        if self.top_n is not None:
            doc["top_n"] = self.top_n
        return orjson.dumps(doc)

    def local_body(self, served_name: str) -> bytes:
        """The body for an SGLang worker (its `/v1/rerank`; edgegw ranks and cuts itself,
        so an older SGLang that ignores top_n answers alike)."""
        doc: dict[str, Any] = {
            "model": served_name,
            "query": self.query,
            "documents": self.documents,
            "return_documents": False,
        }
        if self.top_n is not None:
            doc["top_n"] = self.top_n
        return orjson.dumps(doc)


def parse_rerank(body: bytes, *, max_documents: int, max_input_bytes: int) -> RerankRequest:
    checked = parse_rerank_request(body, max_documents, max_input_bytes)
    doc = _values(body)
    return RerankRequest(
        model=checked.model,
        query=doc["query"],
        documents=doc["documents"],
        top_n=doc.get("top_n"),
        return_documents=doc.get("return_documents", False),
    )


# -- answers ------------------------------------------------------------------------------


def _bad_answer(what: str) -> GatewayError:
    return fail("upstream_error", f"the upstream's {what} answer could not be read", status=502)


def encode_base64(vector: Sequence[float]) -> str:
    """OpenAI's base64 embedding: the vector as little-endian float32."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def embeddings_answer(payload: bytes, *, encode: bool, model: str | None) -> tuple[bytes, Any]:
    """An OpenAI-shaped embeddings answer as the client gets it (its vectors encoded to
    base64 with `encode`, its `model` set when given), and its usage."""
    try:
        doc = orjson.loads(payload)
        data = doc["data"]
        if not isinstance(data, list):
            raise TypeError
        if encode:
            for item in data:
                item["embedding"] = encode_base64(item["embedding"])
    except (orjson.JSONDecodeError, KeyError, TypeError, struct.error):
        raise _bad_answer("embeddings") from None
    if model is not None:
        doc["model"] = model
    doc.setdefault("object", "list")
    usage = doc.get("usage")
    return orjson.dumps(doc), usage if isinstance(usage, dict) else None


def rerank_answer(
    payload: bytes, req: RerankRequest, *, model: str, answer_id: str
) -> tuple[bytes, dict[str, int] | None]:
    """A rerank answer in the shared shape, from SGLang's (a list of `score` and `index`)
    or a provider's (`results` of `index` and `relevance_score`): best first, cut at
    `top_n`, documents added when asked; and its usage in tokens, when the answer says."""
    try:
        doc = orjson.loads(payload)
        if isinstance(doc, list):  # SGLang
            scored = [(int(r["index"]), float(r["score"])) for r in doc]
            tokens = [r.get("meta_info", {}).get("prompt_tokens") for r in doc]
            counted = [t for t in tokens if isinstance(t, int)]
            total = sum(counted) if counted else None
            extra: dict[str, Any] = {}
        else:
            scored = [(int(r["index"]), float(r["relevance_score"])) for r in doc["results"]]
            usage = doc.get("usage") or {}
            total = usage.get("total_tokens") if isinstance(usage, dict) else None
            extra = {"meta": doc["meta"]} if isinstance(doc.get("meta"), dict) else {}
        if any(not 0 <= i < len(req.documents) for i, _ in scored):
            raise ValueError
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise _bad_answer("rerank") from None
    scored.sort(key=lambda r: -r[1])
    if req.top_n is not None:
        scored = scored[: req.top_n]
    results = []
    for index, score in scored:
        item: dict[str, Any] = {"index": index, "relevance_score": score}
        if req.return_documents:
            item["document"] = {"text": req.documents[index]}
        results.append(item)
    usage_out = {"prompt_tokens": total, "total_tokens": total} if isinstance(total, int) else None
    out: dict[str, Any] = {"id": answer_id, "model": model, "results": results, **extra}
    if usage_out is not None:
        out["usage"] = usage_out
    return orjson.dumps(out), usage_out
