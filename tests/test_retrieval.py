"""/v1/embeddings and /v1/rerank: the official SDK's `embeddings.create` (its default base64
and explicit floats) against fake providers and the fake SGLang, compared to what the fakes
produced; rerank against fakes shaped like SGLang, Cohere v2 and llama.cpp; local serving's
worker choice, fallback and disclosure headers; every refusal in the envelope; guardrails
and telemetry as chat has them."""

from __future__ import annotations

import base64
import hashlib
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from edgegw._core import RequestError
from edgegw.errors import GatewayError
from edgegw.retrieval import parse_embeddings, parse_rerank

from .conftest import (
    Gateway,
    in_thread,
    openai_client,
    sample,
    scrape,
    start_gateway,
    wait_until,
)
from .fake_providers import EMBEDDING_DIM, EMBEDDINGS, FakeProviders
from .fake_sglang import FakeSGLang, Script, embedding_of, relevance_of
from .rawhttp import RawResponse, request
from .test_guardrails import POLICY, SECRET, policy_dir

TEXTS = ["the quick brown fox", "jumps over the lazy dog", "edge gateways stream tokens"]
DOCS = ["a lazy dog sleeps", "the quick fox jumps over", "tokens stream to clients"]
QUERY = "quick fox"
TEXT_TOKENS = sum(len(t.split()) for t in TEXTS)  # the fakes count words


def float32(values: list[float]) -> list[float]:
    """What a vector becomes as little-endian float32 (OpenAI's base64 encoding)."""
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def decoded(value: Any) -> list[float]:
    """A fake's embedding as floats, whether it sent floats or base64."""
    if isinstance(value, str):
        raw = base64.b64decode(value)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return value


async def post(gw: Gateway, path: str, body: Any, headers: Any = ()) -> RawResponse:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return await request(gw.port, "POST", path, data, list(headers))


def error_of(resp: RawResponse) -> tuple[int, str, str | None]:
    err = orjson.loads(resp.body)["error"]
    assert isinstance(err["message"], str) and err["message"]
    return resp.status, err["code"], err["param"]


@pytest.fixture
async def fake(nursery: trio.Nursery) -> FakeProviders:
    providers = FakeProviders()
    await nursery.start(providers.serve)
    return providers


@pytest.fixture
async def gw(nursery: trio.Nursery, fake: FakeProviders) -> Gateway:
    return await start_gateway(nursery, {**fake.env(), "TELEMETRY_ENABLED": "true"})


@pytest.fixture
def sdk(gw: Gateway) -> Iterator[openai.OpenAI]:
    with openai_client(gw.base, api_key="x", timeout=20) as client:
        yield client


# --- the request tables ---------------------------------------------------------------

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)  # fmt: skip
TOKENS = st.lists(st.integers(-2, 2**31), min_size=0, max_size=4)
INPUTS = (
    st.text(max_size=20) | st.lists(st.text(max_size=12), max_size=5) | TOKENS
    | st.lists(TOKENS, max_size=4) | VALUES
)  # fmt: skip
EMBEDDINGS_BODIES = st.fixed_dictionaries(
    {"model": st.text(max_size=6) | VALUES, "input": INPUTS},
    optional={
        "encoding_format": st.sampled_from(["float", "base64", "int8"]) | VALUES,
        "dimensions": st.integers(-2, 2**32) | VALUES,
        "user": VALUES,
        "input_type": VALUES,
    },
)
RERANK_BODIES = st.fixed_dictionaries(
    {"model": st.text(max_size=6), "query": st.text(max_size=20) | VALUES,
     "documents": st.lists(st.text(max_size=12), max_size=5) | VALUES},
    optional={"top_n": st.integers(-1, 9) | VALUES, "return_documents": VALUES},
)  # fmt: skip
REFUSALS = ("invalid_request", "unsupported_field", "too_many_inputs", "input_too_long")


@given(body=EMBEDDINGS_BODIES)
def test_embeddings_bodies_are_read_or_refused(body: dict[str, Any]) -> None:
    """Any body shaped like the request is read or refused with a 400, never anything else;
    a read one holds the values the body sent."""
    try:
        req = parse_embeddings(orjson.dumps(body), max_inputs=4, max_input_bytes=16)
    except (RequestError, GatewayError) as e:
        assert (e.status, e.code) in {(400, code) for code in REFUSALS}
        return
    raw = body["input"]
    assert req.model == body["model"] and req.wire_input() == raw
    assert len(req.inputs) == (1 if req.single else len(raw)) <= 4
    assert req.encoding_format == (body.get("encoding_format") or "float")


@given(body=RERANK_BODIES)
def test_rerank_bodies_are_read_or_refused(body: dict[str, Any]) -> None:
    try:
        req = parse_rerank(orjson.dumps(body), max_documents=3, max_input_bytes=16)
    except (RequestError, GatewayError) as e:
        assert (e.status, e.code) in {(400, code) for code in REFUSALS}
        return
    assert (req.query, req.documents) == (body["query"], body["documents"])
    assert 1 <= len(req.documents) <= 3 and all(req.documents)


# --- remote providers ------------------------------------------------------------------


@pytest.mark.parametrize("pid", sorted(EMBEDDINGS))
async def test_sdk_embeddings_default_base64_and_float(
    sdk: openai.OpenAI, fake: FakeProviders, pid: str
) -> None:
    # The SDK asks for base64 unless told otherwise, and decodes it into floats itself.
    got = await in_thread(sdk.embeddings.create, model=f"{pid}/embed-1", input=TEXTS)
    sent = orjson.loads(fake.requests[-1].body)
    answered = fake.answers[-1][1]
    assert fake.answers[-1][0] == pid
    assert sent["model"] == "embed-1" and sent["input"] == TEXTS
    # Providers that encode base64 are asked to; for the others edgegw asks floats and
    # encodes them (the fake refuses base64 where the provider does not document it).
    assert sent.get("encoding_format") == (
        "base64" if pid in ("openai", "cohere", "mistral") else None
    )
    assert [d.index for d in got.data] == [0, 1, 2]
    for item, fake_item, text in zip(got.data, answered["data"], TEXTS, strict=True):
        assert item.embedding == float32(decoded(fake_item["embedding"]))
        assert item.embedding == float32(embedding_of(text, EMBEDDING_DIM))
    assert got.usage.prompt_tokens == answered["usage"]["prompt_tokens"] == TEXT_TOKENS

    floats = await in_thread(
        sdk.embeddings.create, model=f"{pid}/embed-1", input="one text", encoding_format="float"
    )
    # Floats are every provider's default: nothing to ask.
    assert "encoding_format" not in orjson.loads(fake.requests[-1].body)
    assert floats.data[0].embedding == fake.answers[-1][1]["data"][0]["embedding"]
    assert floats.data[0].embedding == embedding_of("one text", EMBEDDING_DIM)


async def test_dimensions_tokens_and_user_reach_the_provider(
    sdk: openai.OpenAI, fake: FakeProviders
) -> None:
    got = await in_thread(
        sdk.embeddings.create,
        model="mistral/mistral-embed",
        input=[[1, 2, 3], [4, 5]],
        dimensions=4,
        encoding_format="float",
    )
    sent = orjson.loads(fake.requests[-1].body)
    # Mistral names it output_dimension.
    assert sent == {"model": "mistral-embed", "input": [[1, 2, 3], [4, 5]], "output_dimension": 4}
    assert [d.embedding for d in got.data] == [
        embedding_of([1, 2, 3], EMBEDDING_DIM)[:4],
        embedding_of([4, 5], EMBEDDING_DIM)[:4],
    ]
    await in_thread(
        sdk.embeddings.create, model="openai/text-embedding-3-small", input=[7, 8], user="u-1"
    )
    sent = orjson.loads(fake.requests[-1].body)
    assert (sent["input"], sent["user"]) == ([7, 8], "u-1")


async def test_rerank_on_cohere_and_llamacpp(gw: Gateway, fake: FakeProviders) -> None:
    expected = sorted(range(3), key=lambda i: -relevance_of(QUERY, DOCS[i]))
    for pid in ("cohere", "llamacpp"):
        body = {"model": f"{pid}/rerank-v3.5", "query": QUERY, "documents": DOCS, "top_n": 2}
        resp = await post(gw, "/v1/rerank", {**body, "return_documents": True})
        assert resp.status == 200, resp.body
        sent = orjson.loads(fake.requests[-1].body)
        # Cohere's v2 has no return_documents: edgegw never forwards it, and adds them itself.
        assert sent == {"model": "rerank-v3.5", "query": QUERY, "documents": DOCS, "top_n": 2}
        doc = orjson.loads(resp.body)
        answered = fake.answers[-1][1]["results"]
        assert [r["index"] for r in doc["results"]] == [r["index"] for r in answered]
        assert [r["index"] for r in doc["results"]] == expected[:2]
        assert [r["relevance_score"] for r in doc["results"]] == [
            r["relevance_score"] for r in answered
        ]
        assert [r["document"]["text"] for r in doc["results"]] == [DOCS[i] for i in expected[:2]]
        assert doc["model"] == f"{pid}/rerank-v3.5"
        if pid == "cohere":
            assert doc["meta"]["billed_units"] == {"search_units": 1} and "usage" not in doc
        else:
            assert doc["usage"]["total_tokens"] == fake.answers[-1][1]["usage"]["total_tokens"]
    resp = await post(gw, "/v1/rerank", {"model": "cohere/r", "query": QUERY, "documents": DOCS})
    assert all("document" not in r for r in orjson.loads(resp.body)["results"])


async def test_refusals_are_in_the_envelope(gw: Gateway, fake: FakeProviders) -> None:
    before = len(fake.requests)
    cases: list[tuple[str, Any, tuple[int, str, str | None]]] = [
        # Providers without the API.
        ("/v1/embeddings", {"model": "groq/x", "input": "hi"}, (400, "unsupported_provider", "model")),
        ("/v1/embeddings", {"model": "anthropic/x", "input": "hi"}, (400, "unsupported_provider", "model")),
        ("/v1/rerank", {"model": "openai/x", "query": "q", "documents": ["d"]}, (400, "unsupported_provider", "model")),
        # Where it goes.
        ("/v1/embeddings", {"model": "nowhere", "input": "hi"}, (400, "unknown_provider", "model")),
        # Bad JSON and fields.
        ("/v1/embeddings", b'{"model": "openai/x", "input": "hi"', (400, "invalid_request", None)),
        ("/v1/embeddings", b'{"model":"openai/x","input":"a","input":"b"}', (400, "invalid_request", None)),
        ("/v1/rerank", b"[1]", (400, "invalid_request", None)),
        ("/v1/embeddings", b'{"model":"openai/x","input":[123456789012345678901234567890]}', (400, "invalid_request", "input")),
        ("/v1/embeddings", b'{"model":"openai/x","input":"\\ud800"}', (400, "invalid_request", None)),
        ("/v1/embeddings", {"input": "hi"}, (400, "invalid_request", "model")),
        ("/v1/embeddings", {"model": "openai/x"}, (400, "invalid_request", "input")),
        ("/v1/embeddings", {"model": "openai/x", "input": ""}, (400, "invalid_request", "input")),
        ("/v1/embeddings", {"model": "openai/x", "input": []}, (400, "invalid_request", "input")),
        ("/v1/embeddings", {"model": "openai/x", "input": ["a", 1]}, (400, "invalid_request", "input")),
        ("/v1/embeddings", {"model": "openai/x", "input": [[1], [-1]]}, (400, "invalid_request", "input")),
        ("/v1/embeddings", {"model": "openai/x", "input": "a", "encoding_format": "int8"}, (400, "invalid_request", "encoding_format")),
        ("/v1/embeddings", {"model": "openai/x", "input": "a", "dimensions": 0}, (400, "invalid_request", "dimensions")),
        ("/v1/embeddings", {"model": "openai/x", "input": "a", "input_type": "query"}, (400, "unsupported_field", "input_type")),
        ("/v1/rerank", {"model": "cohere/r", "documents": ["d"]}, (400, "invalid_request", "query")),
        ("/v1/rerank", {"model": "cohere/r", "query": "q", "documents": [{"text": "d"}]}, (400, "invalid_request", "documents")),
        ("/v1/rerank", {"model": "cohere/r", "query": "q", "documents": ["d"], "top_n": 0}, (400, "invalid_request", "top_n")),
        ("/v1/rerank", {"model": "cohere/r", "query": "q", "documents": ["d"], "return_documents": "yes"}, (400, "invalid_request", "return_documents")),
        ("/v1/rerank", {"model": "cohere/r", "query": "q", "documents": ["d"], "rank_fields": ["a"]}, (400, "unsupported_field", "rank_fields")),
    ]  # fmt: skip
    for path, body, want in cases:
        resp = await post(gw, path, body)
        assert error_of(resp) == want, (path, body)
    assert len(fake.requests) == before
    # The SDK reads the envelope.
    with openai_client(gw.base, api_key="x") as sdk:
        with pytest.raises(openai.BadRequestError) as caught:
            await in_thread(sdk.embeddings.create, model="deepseek/x", input="hi")
    assert caught.value.code == "unsupported_provider"


async def test_input_bounds(nursery: trio.Nursery, fake: FakeProviders) -> None:
    env = {
        **fake.env("openai", "cohere"),
        "EDGEGW_EMBEDDINGS_MAX_INPUTS": "3",
        "EDGEGW_RERANK_MAX_DOCUMENTS": "2",
        "EDGEGW_RETRIEVAL_MAX_INPUT_BYTES": "16",
    }
    gw = await start_gateway(nursery, env)
    assert (
        await post(gw, "/v1/embeddings", {"model": "openai/x", "input": ["a"] * 3})
    ).status == 200
    before = len(fake.requests)
    for path, body, want in [
        ("/v1/embeddings", {"model": "openai/x", "input": ["a"] * 4}, (400, "too_many_inputs", "input")),
        ("/v1/embeddings", {"model": "openai/x", "input": [[1]] * 4}, (400, "too_many_inputs", "input")),
        ("/v1/embeddings", {"model": "openai/x", "input": "x" * 17}, (400, "input_too_long", "input")),
        ("/v1/embeddings", {"model": "openai/x", "input": ["ok", "é" * 9]}, (400, "input_too_long", "input")),
        ("/v1/rerank", {"model": "cohere/r", "query": "q", "documents": ["a", "b", "c"]}, (400, "too_many_inputs", "documents")),
        ("/v1/rerank", {"model": "cohere/r", "query": "q" * 17, "documents": ["a"]}, (400, "input_too_long", "query")),
    ]:  # fmt: skip
        assert error_of(await post(gw, path, body)) == want, body
    assert len(fake.requests) == before


async def test_usage_is_recorded_as_chat_records_it(
    gw: Gateway, sdk: openai.OpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "edgegw.access")
    await in_thread(sdk.embeddings.create, model="openai/embed-1", input=TEXTS)
    access = [r.getMessage() for r in caplog.records if r.name == "edgegw.access"]
    assert access and access[-1].startswith("POST /v1/embeddings 200 ")
    assert "provider=openai" in access[-1] and "model='openai/embed-1'" in access[-1]
    text = await scrape(gw.metrics_port)
    labels = {"gen_ai_provider_name": "openai", "gen_ai_operation_name": "embeddings"}
    assert (
        sample(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="input", **labels)
        == TEXT_TOKENS
    )
    assert sample(text, "gen_ai_server_request_duration_seconds_count", **labels) == 1
    resp = await post(gw, "/v1/rerank", {"model": "llamacpp/r", "query": QUERY, "documents": DOCS})
    assert resp.status == 200
    text = await scrape(gw.metrics_port)
    labels = {"gen_ai_provider_name": "llamacpp", "gen_ai_operation_name": "rerank"}
    tokens = sum(len(QUERY.split()) + len(d.split()) for d in DOCS)
    assert (
        sample(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="input", **labels) == tokens
    )


async def test_guardrails_judge_the_input_texts(
    nursery: trio.Nursery, fake: FakeProviders, tmp_path: Path
) -> None:
    env = {
        **fake.env("openai", "cohere"),
        "GUARDRAILS_ENABLED": "true",
        "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path, POLICY)),
    }
    gw = await start_gateway(nursery, env)
    before = len(fake.requests)
    resp = await post(gw, "/v1/embeddings", {"model": "openai/x", "input": ["ok", "forbidden"]})
    assert error_of(resp) == (403, "guardrails_blocked", None)
    body = {"model": "cohere/r", "query": "forbidden", "documents": ["a"]}
    assert error_of(await post(gw, "/v1/rerank", body))[:2] == (403, "guardrails_blocked")
    assert len(fake.requests) == before
    resp = await post(gw, "/v1/embeddings", {"model": "openai/x", "input": [f"key {SECRET}"]})
    assert resp.status == 200
    assert orjson.loads(fake.requests[-1].body)["input"] == ["key [REDACTED]"]
    body = {"model": "cohere/r", "query": "q", "documents": [SECRET], "return_documents": True}
    resp = await post(gw, "/v1/rerank", body)
    assert orjson.loads(fake.requests[-1].body)["documents"] == ["[REDACTED]"]
    assert orjson.loads(resp.body)["results"][0]["document"]["text"] == "[REDACTED]"


# --- local SGLang workers --------------------------------------------------------------


def profiles(embed_port: int, rerank_port: int, **extra: str) -> str:
    more = "".join(f"    {k}: {v}\n" for k, v in extra.items())
    return (
        "local_models:\n"
        "  - name: bge-m3\n"
        "    served_model_name: BAAI/bge-m3\n"
        "    kind: embedding\n"
        f'    workers: [{{url: "http://127.0.0.1:{embed_port}"}}]\n'
        f"{more}"
        "  - name: bge-reranker\n"
        "    kind: rerank\n"
        f'    workers: [{{url: "http://127.0.0.1:{rerank_port}"}}]\n'
        "  - name: qwen3-8b\n"
        f'    workers: [{{url: "http://127.0.0.1:{embed_port}"}}]\n'
    )


async def start_worker(nursery: trio.Nursery, **script: Any) -> FakeSGLang:
    worker = FakeSGLang(Script(is_embedding=True, **script))
    await nursery.start(worker.serve)
    return worker


async def local_gateway(
    nursery: trio.Nursery, tmp_path: Path, text: str, env: dict[str, str] | None = None
) -> Gateway:
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text(text)
    return await start_gateway(nursery, {"TELEMETRY_ENABLED": "true", **(env or {})}, cfg)


async def test_local_embeddings_with_the_sdk(nursery: trio.Nursery, tmp_path: Path) -> None:
    worker = await start_worker(nursery, model_path="BAAI/bge-m3")
    reranker = await start_worker(nursery, model_path="bge-reranker")
    gw = await local_gateway(nursery, tmp_path, profiles(worker.port, reranker.port))
    dim = worker.script.embedding_dim
    with openai_client(gw.base, api_key="x") as sdk:
        got = await in_thread(sdk.embeddings.create, model="bge-m3", input=TEXTS)
        sent = worker.requests[-1]
        # The worker is asked for floats (SGLang writes floats); edgegw encodes base64.
        assert sent.path == "/v1/embeddings"
        assert sent.body == {"model": "BAAI/bge-m3", "input": TEXTS}
        assert [d.embedding for d in got.data] == [float32(embedding_of(t, dim)) for t in TEXTS]
        assert got.model == "bge-m3" and got.usage.prompt_tokens == TEXT_TOKENS
        raw = await in_thread(
            sdk.embeddings.with_raw_response.create,
            model="bge-m3",
            input=[[5, 6, 7]],
            encoding_format="float",
            dimensions=4,
        )
    assert raw.headers["x-sie-served-by"] == "local"
    assert raw.headers["x-sie-request-id"] == worker.requests[-1].headers["x-request-id"]
    floats = raw.parse()
    assert floats.data[0].embedding == embedding_of([5, 6, 7], dim)[:4]
    assert worker.requests[-1].body == {
        "model": "BAAI/bge-m3",
        "input": [[5, 6, 7]],
        "dimensions": 4,
    }
    text = await scrape(gw.metrics_port)
    labels = {"gen_ai_provider_name": "local", "gen_ai_operation_name": "embeddings"}
    assert sample(text, "gen_ai_server_request_duration_seconds_count", **labels) == 2


async def test_local_rerank(nursery: trio.Nursery, tmp_path: Path) -> None:
    worker = await start_worker(nursery, model_path="BAAI/bge-m3")
    reranker = await start_worker(nursery, model_path="bge-reranker")
    gw = await local_gateway(nursery, tmp_path, profiles(worker.port, reranker.port))
    body = {"model": "bge-reranker", "query": QUERY, "documents": DOCS, "top_n": 2}
    resp = await post(gw, "/v1/rerank", {**body, "return_documents": True})
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-sie-served-by"] == b"local"
    assert reranker.requests[-1].body == {
        "model": "bge-reranker",
        "query": QUERY,
        "documents": DOCS,
        "return_documents": False,
        "top_n": 2,
    }
    doc = orjson.loads(resp.body)
    expected = sorted(range(3), key=lambda i: -relevance_of(QUERY, DOCS[i]))[:2]
    assert [r["index"] for r in doc["results"]] == expected
    assert [r["relevance_score"] for r in doc["results"]] == [
        relevance_of(QUERY, DOCS[i]) for i in expected
    ]
    assert [r["document"] for r in doc["results"]] == [{"text": DOCS[i]} for i in expected]
    # The worker's per-item prompt tokens, summed (it ranks only what top_n keeps).
    assert doc["usage"]["total_tokens"] == sum(
        len(QUERY.split()) + len(DOCS[i].split()) for i in expected
    )
    assert doc["model"] == "bge-reranker"


async def test_model_kinds_are_refused_on_the_other_routes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    worker = await start_worker(nursery, model_path="BAAI/bge-m3")
    reranker = await start_worker(nursery, model_path="bge-reranker")
    gw = await local_gateway(nursery, tmp_path, profiles(worker.port, reranker.port))
    before = len(worker.requests) + len(reranker.requests)
    chat = {"model": "bge-m3", "messages": [{"role": "user", "content": "hi"}]}
    for path, body in [
        ("/v1/embeddings", {"model": "qwen3-8b", "input": "hi"}),
        ("/v1/embeddings", {"model": "bge-reranker", "input": "hi"}),
        ("/v1/rerank", {"model": "bge-m3", "query": "q", "documents": ["d"]}),
        ("/v1/chat/completions", chat),
        ("/v1/completions", {"model": "bge-reranker", "prompt": "hi"}),
    ]:
        assert error_of(await post(gw, path, body)) == (400, "unsupported_model", "model"), body
    # The refusals are the gateway's: the workers' /v1 endpoints saw nothing.
    seen = [
        r
        for r in worker.requests + reranker.requests
        if r.path.startswith("/v1/") and r.method == "POST"
    ]
    assert seen == [] and len(worker.requests) + len(reranker.requests) >= before


async def test_local_token_limits_with_a_tokenizer(nursery: trio.Nursery, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(TEXTS)], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    worker = await start_worker(nursery, model_path="BAAI/bge-m3")
    reranker = await start_worker(nursery, model_path="bge-reranker")
    text = profiles(worker.port, reranker.port, tokenizer="tokenizer.json", context_window="8")
    gw = await local_gateway(nursery, tmp_path, text)
    ok = await post(gw, "/v1/embeddings", {"model": "bge-m3", "input": ["the quick brown fox"] * 2})
    assert ok.status == 200, ok.body
    calls = len(worker.requests)
    for body in [
        {"model": "bge-m3", "input": ["ok", "the quick brown fox jumps over the lazy dog"]},
        {"model": "bge-m3", "input": list(range(9))},
    ]:
        assert error_of(await post(gw, "/v1/embeddings", body)) == (400, "input_too_long", "input")
    # Token ids past the vocabulary the worker reports.
    resp = await post(
        gw, "/v1/embeddings", {"model": "bge-m3", "input": [worker.script.vocab_size]}
    )
    assert error_of(resp) == (400, "invalid_request", "input")
    assert len(worker.requests) == calls


async def test_a_failed_worker_is_passed_over_and_none_falls_back(
    nursery: trio.Nursery, tmp_path: Path, fake: FakeProviders
) -> None:
    bad = await start_worker(nursery, model_path="BAAI/bge-m3", fail_status=503)
    good = await start_worker(nursery, model_path="BAAI/bge-m3")
    text = (
        "local_models:\n"
        "  - name: bge-m3\n"
        "    served_model_name: BAAI/bge-m3\n"
        "    kind: embedding\n"
        f'    workers: [{{url: "http://127.0.0.1:{bad.port}"}}, {{url: "http://127.0.0.1:{good.port}"}}]\n'
        "    remote_fallback: openai/text-embedding-3-small\n"
        "    triggers: [saturated, unhealthy, provisioning]\n"
    )
    gw = await local_gateway(nursery, tmp_path, text, fake.env("openai"))
    for _ in range(3):
        resp = await post(gw, "/v1/embeddings", {"model": "bge-m3", "input": "hi"})
        assert resp.status == 200, resp.body
        assert resp.headers[b"x-sie-served-by"] == b"local"
    assert any(r.path == "/v1/embeddings" for r in good.requests)
    # No worker answers: the profile's remote fallback, disclosed.
    good.script.fail_status = 503
    resp = await post(gw, "/v1/embeddings", {"model": "bge-m3", "input": "hi"})
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-sie-served-by"] == b"remote"
    assert resp.headers[b"x-sie-fallback-reason"] == b"saturated"
    assert orjson.loads(fake.requests[-1].body)["model"] == "text-embedding-3-small"
    # Under X-SIE-Remote: forbid, the local refusal.
    resp = await post(
        gw, "/v1/embeddings", {"model": "bge-m3", "input": "hi"}, [("x-sie-remote", "forbid")]
    )
    assert error_of(resp)[:2] == (503, "QUEUE_FULL")
    assert resp.headers[b"x-sie-error-code"] == b"QUEUE_FULL"


async def test_tracing_spans_as_chat_has_them(nursery: trio.Nursery, fake: FakeProviders) -> None:
    from .otlp_receiver import OtlpReceiver
    from .test_tracing import CLIENT, SERVER, exported, server_span, tracing_env

    collector = OtlpReceiver()
    collector.port = await nursery.start(collector.serve)
    env = tracing_env(f"http://127.0.0.1:{collector.port}", **fake.env("openai", "cohere"))
    gw = await start_gateway(nursery, env)
    resp = await post(gw, "/v1/embeddings", {"model": "openai/embed-1", "input": TEXTS})
    assert resp.status == 200
    resp = await post(gw, "/v1/rerank", {"model": "cohere/r", "query": QUERY, "documents": DOCS})
    assert resp.status == 200
    await exported(gw, lambda: server_span(collector, "/v1/rerank") is not None)
    for path, provider, operation in [
        ("/v1/embeddings", "openai", "embeddings"),
        ("/v1/rerank", "cohere", "rerank"),
    ]:
        server = server_span(collector, path)
        assert server is not None
        names = {s.name: s for s in collector.spans if s.trace_id == server.trace_id}
        assert {"parse", "route"} <= names.keys()
        assert names["route"].attributes["edgegw.route.target"] == provider
        (attempt,) = [
            s for s in collector.spans if s.trace_id == server.trace_id and s.kind == CLIENT
        ]
        assert attempt.parent_id == server.span_id and server.kind == SERVER
        attrs = server.attributes
        assert attrs["gen_ai.operation.name"] == operation
        assert attrs["gen_ai.provider.name"] == provider
        assert attrs["http.response.status_code"] == 200
    server = server_span(collector, "/v1/embeddings")
    assert server is not None and server.attributes["gen_ai.usage.input_tokens"] == TEXT_TOKENS


async def test_local_timeout_and_disconnect(nursery: trio.Nursery, tmp_path: Path) -> None:
    worker = await start_worker(nursery, model_path="BAAI/bge-m3", first_chunk_delay_s=5)
    reranker = await start_worker(nursery, model_path="bge-reranker")
    # Longer than the disconnect watch takes to start (edgegw.watch.WATCH_DELAY_S).
    text = profiles(worker.port, reranker.port, timeouts="{overall_s: 1}")
    gw = await local_gateway(nursery, tmp_path, text)
    # The profile's overall timeout bounds the worker's answer.
    resp = await post(gw, "/v1/embeddings", {"model": "bge-m3", "input": "hi"})
    assert error_of(resp)[:2] == (504, "overall_timeout")
    await wait_until(lambda: worker.disconnects == 1)
    # A client that goes away: the worker's request is closed with it.
    with trio.move_on_after(0.1):
        await post(gw, "/v1/embeddings", {"model": "bge-m3", "input": "hi"})
    await wait_until(lambda: worker.disconnects == 2)
    # Recorded as chat's are: the timeout's 504, the client gone as 499.
    duration = "gen_ai_server_request_duration_seconds_count"
    labels = {"gen_ai_provider_name": "local", "gen_ai_operation_name": "embeddings"}
    for status in ("504", "499"):
        with trio.fail_after(2):  # recorded as the handler ends, beside the worker's close
            while sample(await scrape(gw.metrics_port), duration, error_type=status, **labels) != 1:  # noqa: ASYNC110
                await trio.sleep(0.01)


def test_profile_kinds_and_their_fallbacks(tmp_path: Path) -> None:
    from edgegw.local.profiles import ProfileError, parse_profile

    def profile(**extra: Any) -> Any:
        data = {"name": "m", "workers": [{"url": "http://127.0.0.1:1"}], **extra}
        return parse_profile(data, tmp_path, "edgegw.yaml", 0)

    assert profile().kind == "generation"
    assert profile(kind="rerank", remote_fallback="cohere/rerank-v3.5").kind == "rerank"
    assert (
        profile(kind="embedding", remote_fallback="openai/text-embedding-3-small").kind
        == "embedding"
    )
    for extra, key in [
        ({"kind": "classify"}, "kind"),
        ({"kind": "embedding", "remote_fallback": "anthropic/claude"}, "remote_fallback"),
        ({"kind": "rerank", "remote_fallback": "openai/gpt-4o"}, "remote_fallback"),
    ]:
        with pytest.raises(ProfileError, match=f"model 'm': {key}: "):
            profile(**extra)


async def test_pool_headers_choose_the_worker(nursery: trio.Nursery, tmp_path: Path) -> None:
    a = await start_worker(nursery, model_path="BAAI/bge-m3")
    b = await start_worker(nursery, model_path="BAAI/bge-m3")
    text = (
        "local_models:\n"
        "  - name: bge-m3\n"
        "    served_model_name: BAAI/bge-m3\n"
        "    kind: embedding\n"
        f'    workers: [{{url: "http://127.0.0.1:{a.port}", pool: a}}, '
        f'{{url: "http://127.0.0.1:{b.port}", pool: b, machine_profile: l4}}]\n'
    )
    gw = await local_gateway(nursery, tmp_path, text)
    body = {"model": "bge-m3", "input": "hi"}
    for headers, worker in [
        ([], a),
        ([("x-sie-pool", "b")], b),
        ([("x-sie-machine-profile", "b/l4")], b),
    ]:
        before = len([r for r in worker.requests if r.path == "/v1/embeddings"])
        resp = await post(gw, "/v1/embeddings", body, headers)
        assert resp.status == 200, (headers, resp.body)
        assert len([r for r in worker.requests if r.path == "/v1/embeddings"]) == before + 1
    resp = await post(gw, "/v1/embeddings", body, [("x-sie-pool", "c")])
    assert error_of(resp) == (400, "invalid_request", "X-SIE-Pool")
    resp = await post(gw, "/v1/embeddings", body, [("x-sie-pool", "a"), ("x-sie-pool", "b")])
    assert error_of(resp) == (400, "invalid_request", "X-SIE-Pool")


async def test_a_tenants_scope_and_limits_hold_on_both_routes(
    nursery: trio.Nursery, fake: FakeProviders, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    sha = hashlib.sha256(b"sk-team").hexdigest()
    keys.write_text(
        f"tenant team models=openai/*,cohere/rerank-v3.5 rpm=2\nkey k tenant=team sha256={sha}\n"
    )
    env = {**fake.env(), "EDGEGW_API_KEYS_FILE": str(keys)}
    env["TENANTS_STORE_PATH"] = str(tmp_path / "usage.sqlite3")
    gw = await start_gateway(nursery, env)
    auth = [("authorization", "Bearer sk-team")]
    resp = await post(gw, "/v1/embeddings", {"model": "mistral/mistral-embed", "input": "x"}, auth)
    assert error_of(resp) == (403, "model_not_in_scope", "model")
    first = await post(gw, "/v1/embeddings", {"model": "openai/e", "input": TEXTS}, auth)
    assert first.status == 200 and first.headers[b"x-ratelimit-remaining-requests"] == b"1"
    rerank = {"model": "cohere/rerank-v3.5", "query": QUERY, "documents": DOCS}
    assert (await post(gw, "/v1/rerank", rerank, auth)).status == 200
    refused = await post(gw, "/v1/rerank", rerank, auth)
    assert error_of(refused)[:2] == (429, "rate_limit_exceeded")
    assert refused.headers[b"retry-after"] == b"30"
    # Two answered, the out-of-scope and the over-limit requests never sent.
    assert [a[0] for a in fake.answers] == ["openai", "cohere"]
