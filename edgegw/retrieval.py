"""The embeddings and rerank requests and answers, pure: bytes in, a checked request out (or
the 400 that refuses it), and the answers in the one shape each route gives its clients.

The JSON itself is read strictly by the Rust core (`parse_passthrough`: one object, no
duplicate key, bounded depth); the members are then
checked here against one table per route (`EMBEDDINGS_FIELDS`, `RERANK_FIELDS`), as the
Rust tables do for chat: JSON `null` counts as absent, a member outside the table is
refused as `unsupported_field` (the alphabetically first), a value of the wrong shape as
`invalid_request` naming it.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from edgegw._core import parse_passthrough
from edgegw.errors import GatewayError, fail
from edgegw.providers import Provider

Input = str | list[int]
Check = Callable[[str, Any], None]


def _invalid(name: str, message: str) -> GatewayError:
    return fail("invalid_request", message, param=name)


def _string(name: str, v: Any) -> None:
    if not isinstance(v, str):
        raise _invalid(name, f"'{name}' must be a string")


def _non_empty_string(name: str, v: Any) -> None:
    if not isinstance(v, str) or not v:
        raise _invalid(name, f"'{name}' must be a non-empty string")


def _bool(name: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise _invalid(name, f"'{name}' must be a boolean")


def _positive_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**31 - 1:
        raise _invalid(name, f"'{name}' must be a positive integer")


def _encoding(name: str, v: Any) -> None:
    if v not in ("float", "base64"):
        raise _invalid(name, f"'{name}' must be one of float, base64")


def _any(name: str, v: Any) -> None:
    """Checked by the route's own reading (`input`, `documents`)."""


# field -> (required, rule), in check order.
EMBEDDINGS_FIELDS: dict[str, tuple[bool, Check]] = {
    "model": (True, _non_empty_string),
    "input": (True, _any),
    "encoding_format": (False, _encoding),
    "dimensions": (False, _positive_int),
    "user": (False, _string),
}
RERANK_FIELDS: dict[str, tuple[bool, Check]] = {
    "model": (True, _non_empty_string),
    "query": (True, _non_empty_string),
    "documents": (True, _any),
    "top_n": (False, _positive_int),
    "return_documents": (False, _bool),
}


def _members(body: bytes, table: dict[str, tuple[bool, Check]]) -> dict[str, Any]:
    """The body's non-null members, checked against `table`."""
    # The Rust core's strict reading first (one object, no duplicate key, bounded depth:
    # 400 `invalid_request`), which orjson does not do; orjson then gives the values, which
    # the route uses (token counts, the upstream body, base64, a rerank's documents).
    parse_passthrough(body)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:  # the two parsers disagreeing is a 400, never a 500
        raise fail("invalid_request", "invalid JSON") from None
    for name, (required, check) in table.items():
        v = doc.get(name)
        if v is None:
            if required:
                raise _invalid(name, f"field '{name}' is required")
            continue
        check(name, v)
    unknown = sorted(k for k in doc if k not in table)
    if unknown:
        raise fail(
            "unsupported_field",
            f"'{unknown[0]}' is not supported by this endpoint",
            param=unknown[0],
        )
    return {k: v for k, v in doc.items() if v is not None}


def _token_ids(name: str, v: Any) -> list[int]:
    if not v or not all(type(t) is int and 0 <= t < 2**31 for t in v):
        raise _invalid(name, f"'{name}' token arrays must be non-empty lists of token ids")
    return v  # type: ignore[no-any-return]


def _texts(name: str, v: list[Any], max_bytes: int) -> list[str]:
    for i, text in enumerate(v):
        if not isinstance(text, str) or not text:
            raise _invalid(name, f"'{name}[{i}]' must be a non-empty string")
        _check_bytes(name, i, text, max_bytes)
    return v


def _check_bytes(name: str, i: int | None, text: str, max_bytes: int) -> None:
    # UTF-8 is at most 4 bytes a character: only a long text is encoded to be measured.
    if len(text) * 4 > max_bytes and len(text.encode()) > max_bytes:
        where = name if i is None else f"{name}[{i}]"
        raise fail(
            "input_too_long",
            f"'{where}' is longer than {max_bytes} bytes (EDGEGW_RETRIEVAL_MAX_INPUT_BYTES)",
            param=name,
        )


def _count(name: str, n: int, bound: int, setting: str) -> None:
    if n > bound:
        raise fail(
            "too_many_inputs",
            f"'{name}' has {n} items; at most {bound} are accepted ({setting})",
            param=name,
        )


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
    doc = _members(body, EMBEDDINGS_FIELDS)
    raw = doc["input"]
    inputs: list[Input]
    if isinstance(raw, str):
        if not raw:
            raise _invalid("input", "'input' must not be an empty string")
        _check_bytes("input", None, raw, max_input_bytes)
        inputs, single, tokens = [raw], True, False
    elif isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        _count("input", len(raw), max_inputs, "EDGEGW_EMBEDDINGS_MAX_INPUTS")
        inputs, single, tokens = list(_texts("input", raw, max_input_bytes)), False, False
    elif isinstance(raw, list) and raw and all(type(x) is int for x in raw):
        inputs, single, tokens = [_token_ids("input", raw)], True, True
    elif isinstance(raw, list) and raw and all(isinstance(x, list) for x in raw):
        _count("input", len(raw), max_inputs, "EDGEGW_EMBEDDINGS_MAX_INPUTS")
        inputs, single, tokens = [_token_ids("input", x) for x in raw], False, True
    else:
        raise _invalid(
            "input",
            "'input' must be a non-empty string, array of strings, array of token ids, "
            "or array of token-id arrays",
        )
    return EmbeddingsRequest(
        model=doc["model"],
        inputs=inputs,
        single=single,
        tokens=tokens,
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
    doc = _members(body, RERANK_FIELDS)
    _check_bytes("query", None, doc["query"], max_input_bytes)
    documents = doc["documents"]
    if not isinstance(documents, list) or not documents:
        raise _invalid("documents", "'documents' must be a non-empty array of strings")
    _count("documents", len(documents), max_documents, "EDGEGW_RERANK_MAX_DOCUMENTS")
    return RerankRequest(
        model=doc["model"],
        query=doc["query"],
        documents=_texts("documents", documents, max_input_bytes),
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
