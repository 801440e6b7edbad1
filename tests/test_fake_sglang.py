"""The fake SGLang worker's wire format, read with a raw h11 client over loopback."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio

from tests.fake_sglang import (
    WORD_ID_BASE,
    WORDS,
    FakeSGLang,
    Script,
    embedding_of,
    relevance_of,
)

from .conftest import WAIT_S, wait_until
from .rawhttp import Client, Reply, exchange

EOS = Script().eos_token_id


@pytest.fixture
async def fake(nursery: trio.Nursery) -> FakeSGLang:
    server = FakeSGLang(Script(tokens=3))
    await nursery.start(server.serve)
    return server


async def call(fake: FakeSGLang, method: str, path: str, body: object = None, **kw: Any) -> Reply:
    """One request on its own connection (`rawhttp.exchange`'s options), read whole."""
    return await exchange(fake.port, method, path, body, host="sglang", **kw)


async def generate(fake: FakeSGLang, **fields: object) -> Reply:
    return await call(fake, "POST", "/generate", {"text": "hello there world", **fields})


def words(start: int, count: int) -> str:
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(count))


# ---- /generate: streams ------------------------------------------------------------------------


async def test_stream_n1_cumulative_text_and_final_meta_info(fake: FakeSGLang) -> None:
    reply = await generate(fake, sampling_params={"max_new_tokens": 10}, stream=True, rid="r1")
    assert reply.status == 200 and reply.complete
    assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert reply.headers["transfer-encoding"] == "chunked"
    *events, done = reply.events()
    assert done == "[DONE]"
    # three words, then the EOS token: no text, but one more completion token
    assert [e["text"] for e in events] == ["the", "the quick", "the quick brown", "the quick brown"]
    assert [e["meta_info"]["finish_reason"] for e in events] == [None, None, None] + [
        {"type": "stop", "matched": EOS}
    ]
    assert [e["meta_info"]["completion_tokens"] for e in events] == [1, 2, 3, 4]
    assert events[-1]["output_ids"] == [WORD_ID_BASE, WORD_ID_BASE + 1, WORD_ID_BASE + 2, EOS]
    meta = events[-1]["meta_info"]
    assert meta["id"] == "r1" and meta["prompt_tokens"] == 3 and meta["cached_tokens"] == 0
    assert all("index" not in e for e in events)
    assert fake.requests[-1].body["rid"] == "r1" and fake.active_rids == set()


async def test_length_finish_and_the_default_cap(fake: FakeSGLang) -> None:
    body = (await generate(fake, sampling_params={"max_new_tokens": 2})).json()
    assert body["text"] == "the quick"
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 2}
    assert body["meta_info"]["completion_tokens"] == 2
    fake.script.tokens = 500
    body = (await generate(fake, sampling_params={"temperature": 0})).json()
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 128}
    body = (await generate(fake, sampling_params={"max_new_tokens": 3, "ignore_eos": True})).json()
    assert body["meta_info"]["completion_tokens"] == 3


async def test_stream_n2_interleaves_candidates_with_index(fake: FakeSGLang) -> None:
    fake.script.tokens = 2
    reply = await generate(fake, sampling_params={"n": 2}, stream=True, rid="parent")
    *events, done = reply.events()
    assert done == "[DONE]"
    assert [e["index"] for e in events] == [0, 1, 0, 1, 0, 1]
    for index in (0, 1):
        mine = [e for e in events if e["index"] == index]
        assert mine[-1]["text"] == words(index, 2)
        assert [e["meta_info"]["finish_reason"] is None for e in mine] == [True, True, False]
        assert len({e["meta_info"]["id"] for e in mine}) == 1
    ids = {e["meta_info"]["id"] for e in events}
    # SGLang gives every candidate of n > 1 a fresh uuid4 hex, not the request's rid
    assert len(ids) == 2 and all(re.fullmatch("[0-9a-f]{32}", i) for i in ids)


async def test_non_streaming_n2_returns_a_list(fake: FakeSGLang) -> None:
    reply = await generate(fake, sampling_params={"n": 2, "max_new_tokens": 2})
    assert reply.status == 200 and reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert isinstance(body, list) and len(body) == 2
    assert [o["text"] for o in body] == [words(0, 2), words(1, 2)]
    assert all(set(o) == {"text", "output_ids", "meta_info"} for o in body)
    assert body[0]["meta_info"]["id"] != body[1]["meta_info"]["id"]


async def test_logprobs_differ_per_candidate_and_the_last_ranks_best(fake: FakeSGLang) -> None:
    body = (
        await generate(
            fake,
            sampling_params={"n": 3},
            return_logprob=True,
            top_logprobs_num=2,
            return_text_in_logprobs=True,
        )
    ).json()
    sums = [sum(entry[0] for entry in o["meta_info"]["output_token_logprobs"]) for o in body]
    assert len(set(sums)) == 3 and sums == sorted(sums)  # candidate 2 ranks best
    first = body[1]["meta_info"]["output_token_logprobs"]
    assert first[0][1:] == [WORD_ID_BASE + 1, "quick"] and first[-1][1:] == [EOS, "<|im_end|>"]
    top = body[1]["meta_info"]["output_top_logprobs"]
    assert len(top) == len(first) and all(len(position) == 2 for position in top)
    assert top[0][0] == first[0] and top[0][1][0] < first[0][0]
    # without return_text_in_logprobs the text slot is null; streams carry them cumulatively
    reply = await generate(fake, stream=True, return_logprob=True)
    events = reply.events()[:-1]
    assert [len(e["meta_info"]["output_token_logprobs"]) for e in events] == [1, 2, 3, 4]
    assert events[0]["meta_info"]["output_token_logprobs"][0][2] is None
    assert "output_top_logprobs" not in events[0]["meta_info"]


async def test_stop_strings_and_stop_token_ids(fake: FakeSGLang) -> None:
    fake.script.tokens = 8
    body = (await generate(fake, sampling_params={"stop": ["zzz", "brown"]})).json()
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": "brown"}
    assert body["text"] == "the quick " and body["meta_info"]["completion_tokens"] == 3
    body = (await generate(fake, sampling_params={"stop": "brown", "no_stop_trim": True})).json()
    assert body["text"] == "the quick brown"
    body = (await generate(fake, sampling_params={"stop_token_ids": [WORD_ID_BASE + 3]})).json()
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": WORD_ID_BASE + 3}
    assert body["text"] == "the quick brown"
    body = (await generate(fake, sampling_params={"stop": "the", "min_new_tokens": 2})).json()
    assert body["meta_info"]["finish_reason"]["matched"] == "the"  # only checked from token 2


# ---- abort and disconnect ----------------------------------------------------------------------


async def open_stream(fake: FakeSGLang, stack: list[trio.SocketStream], **fields: object) -> Client:
    stream = await trio.open_tcp_stream("127.0.0.1", fake.port)
    stack.append(stream)
    client = Client(stream)
    await client.send("POST", "/generate", {"text": "hi", "stream": True, **fields}, host="sglang")
    status, _ = await client.head()
    assert status == 200
    return client


async def rest_of_stream(client: Client) -> list[object]:
    """The stream's remaining events, to its clean end. Wall time: after an abort the end is
    the fake's socket work, not a timer."""
    events = []
    with trio.fail_after(WAIT_S):
        while (event := await client.next_event()) is not None:
            events.append(event)
    return events


async def test_abort_request_ends_the_stream_with_type_abort(fake: FakeSGLang) -> None:
    fake.script.tokens, fake.script.token_delay_s = 1000, 0.02
    streams: list[trio.SocketStream] = []
    try:
        client = await open_stream(
            fake, streams, rid="victim", sampling_params={"max_new_tokens": 900}
        )
        first = await client.next_event()
        assert first["meta_info"]["finish_reason"] is None
        assert fake.active_rids == {"victim"}
        reply = await call(fake, "POST", "/abort_request", {"rid": "victim"})
        assert (reply.status, reply.body) == (200, b"")
        events = await rest_of_stream(client)
    finally:
        for stream in streams:
            await stream.aclose()
    assert events[-1] == "[DONE]"
    last = events[-2]["meta_info"]
    assert last["finish_reason"] == {
        "type": "abort",
        "message": "Aborted",
        "status_code": None,
        "err_type": None,
    }
    assert last["completion_tokens"] < 900
    assert fake.aborted_rids == ["victim"] and fake.active_rids == set()


async def test_n2_abort_needs_candidate_ids_or_abort_all(fake: FakeSGLang) -> None:
    fake.script.tokens, fake.script.token_delay_s = 1000, 0.02
    streams: list[trio.SocketStream] = []
    try:
        client = await open_stream(fake, streams, rid="parent", sampling_params={"n": 2})
        first = await client.next_event()
        await call(fake, "POST", "/abort_request", {"rid": "parent"})  # matches nothing running
        assert len(fake.active_rids) == 2 and first["meta_info"]["id"] in fake.active_rids
        await call(fake, "POST", "/abort_request", {"rid": first["meta_info"]["id"]})
        await call(fake, "POST", "/abort_request", {"abort_all": True})
        events = await rest_of_stream(client)
    finally:
        for stream in streams:
            await stream.aclose()
    finals = [e for e in events[:-1] if e["meta_info"]["finish_reason"] is not None]
    assert sorted(e["index"] for e in finals) == [0, 1]
    assert {e["meta_info"]["finish_reason"]["type"] for e in finals} == {"abort"}
    assert fake.aborted_rids == ["parent", first["meta_info"]["id"], ""]


async def test_head_comes_first_and_a_slow_first_token_is_abortable(fake: FakeSGLang) -> None:
    fake.script.first_chunk_delay_s = 60  # never reached: the abort ends the wait
    streams: list[trio.SocketStream] = []
    try:
        client = await open_stream(fake, streams, rid="slow")  # the 200 head is already here
        await call(fake, "POST", "/abort_request", {"rid": "slow"})
        with trio.fail_after(WAIT_S):  # wall time: the abort, not the 60 s timer, ends the wait
            event, done = await client.next_event(), await client.next_event()
    finally:
        for stream in streams:
            await stream.aclose()
    assert event["text"] == "" and event["meta_info"]["finish_reason"]["type"] == "abort"
    assert done == "[DONE]"


async def test_keep_alive_serves_several_requests(fake: FakeSGLang) -> None:
    async with await trio.open_tcp_stream("127.0.0.1", fake.port) as stream:
        client = Client(stream)
        for body in ({"text": "a", "stream": True}, {"text": "b"}):
            await client.send("POST", "/generate", body)
            assert (await client.reply()).status == 200
            client.conn.start_next_cycle()
        await client.send("GET", "/health")
        assert (await client.reply()).status == 200
    assert [r.path for r in fake.requests] == ["/generate", "/generate", "/health"]


async def test_client_disconnect_is_noticed(fake: FakeSGLang) -> None:
    fake.script.tokens, fake.script.token_delay_s = 1000, 0.05
    streams: list[trio.SocketStream] = []
    try:
        client = await open_stream(fake, streams, sampling_params={"max_new_tokens": 900})
        await client.next_event()
        assert len(fake.active_rids) == 1
    finally:
        for stream in streams:
            await stream.aclose()
    await wait_until(lambda: fake.disconnects == 1)
    assert fake.active_rids == set() and fake.crashes == 0


async def test_crash_mid_stream_and_before_a_response(fake: FakeSGLang) -> None:
    fake.script.crash_after_tokens = 2
    reply = await generate(fake, stream=True)
    assert reply.status == 200 and not reply.complete
    assert [e["text"] for e in reply.events()] == ["the", "the quick"]
    reply = await generate(fake)
    assert reply.status == 0 and not reply.complete  # the socket closed, no response at all
    assert fake.crashes == 2 and fake.active_rids == set()


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sampling",
    [
        {"logit_bias": {"151936": 1.0}},  # vocab_size 151936: keys must be < it
        {"min_new_tokens": 5, "max_new_tokens": 2},
        {"temperature": -1},
        {"top_p": 0},
        {"top_k": 0},
        {"repetition_penalty": 0},
        {"regex": "a+", "ebnf": "root ::= 'a'"},
    ],
)
async def test_sampling_params_verify_gives_native_400(
    fake: FakeSGLang, sampling: dict[str, object]
) -> None:
    reply = await generate(fake, sampling_params=sampling)
    assert reply.status == 400
    body = reply.json()
    assert list(body) == ["error"] and list(body["error"]) == ["message"]


async def test_logit_bias_message_and_accepted_edges(fake: FakeSGLang) -> None:
    fake.script.vocab_size = 100
    reply = await generate(fake, sampling_params={"logit_bias": {"100": 2.0}})
    assert reply.json() == {"error": {"message": "logit_bias must has keys in [0, 99], got 100."}}
    ok = {"logit_bias": {"99": -1.0}, "top_k": -1, "temperature": 0, "max_new_tokens": None}
    assert (await generate(fake, sampling_params=ok)).status == 200


async def test_a_validation_error_in_a_stream_is_an_event(fake: FakeSGLang) -> None:
    reply = await generate(
        fake, stream=True, sampling_params={"min_new_tokens": 5, "max_new_tokens": 2}
    )
    assert reply.status == 200 and reply.complete
    error, done = reply.events()
    assert list(error) == ["error"] and "min_new_tokens" in error["error"]["message"]
    assert done == "[DONE]"


async def test_unknown_sampling_param_is_an_uncaught_type_error(fake: FakeSGLang) -> None:
    reply = await generate(fake, sampling_params={"max_tokens": 5})
    assert (reply.status, reply.body) == (500, b"Internal Server Error")
    assert reply.headers["content-type"].startswith("text/plain")
    reply = await generate(fake, stream=True, sampling_params={"max_tokens": 5})
    assert reply.status == 200 and not reply.complete and reply.body == b""


async def test_pydantic_level_errors_and_unknown_paths(fake: FakeSGLang) -> None:
    reply = await call(fake, "POST", "/generate", b"{not json")
    assert reply.status == 400
    body = reply.json()
    assert {k: body[k] for k in ("object", "type", "param", "code")} == {
        "object": "error",
        "type": "Bad Request",
        "param": None,
        "code": 400,
    }
    assert (await call(fake, "POST", "/generate", {"text": "x", "stream": "yes"})).status == 400
    reply = await call(fake, "POST", "/generate", {"sampling_params": {}})
    assert reply.json() == {
        "error": {"message": "Either text, input_ids or input_embeds should be provided."}
    }
    reply = await call(fake, "GET", "/nope")
    assert (reply.status, reply.json()) == (404, {"detail": "Not Found"})
    reply = await call(fake, "GET", "/generate")
    assert (reply.status, reply.json()) == (405, {"detail": "Method Not Allowed"})
    reply = await call(fake, "POST", "/v1/chat/completions", b"{}", content_type="text/plain")
    assert reply.status == 400 and reply.json()["type"] == "Bad Request"


async def test_fail_status_shapes_native_and_flat(fake: FakeSGLang) -> None:
    fake.script.fail_status = 400
    assert list((await generate(fake)).json()) == ["error"]
    fake.script.fail_status = 503
    body = (await generate(fake)).json()
    assert (body["object"], body["type"], body["code"]) == ("error", "503", 503)
    fake.script.fail_status = 500
    assert (await generate(fake)).body == b"Internal Server Error"
    chat = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}]}
    for status, kind in ((400, "BadRequestError"), (500, "InternalServerError")):
        fake.script.fail_status = status
        reply = await call(fake, "POST", "/v1/chat/completions", chat)
        assert reply.status == status
        body = reply.json()
        assert set(body) == {"object", "message", "type", "param", "code"}
        assert (body["type"], body["code"]) == (kind, status)


async def test_overloaded_and_finish_abort(fake: FakeSGLang) -> None:
    fake.script.overloaded = True
    reply = await generate(fake)
    assert reply.status == 503 and reply.json()["message"] == "The request queue is full."
    event, done = (await generate(fake, stream=True)).events()
    assert event["meta_info"]["finish_reason"]["status_code"] == 503 and done == "[DONE]"
    fake.script.overloaded, fake.script.finish_abort = False, "bad grammar"
    assert (await generate(fake)).json() == {"error": {"message": "bad grammar"}}
    event, done = (await generate(fake, stream=True)).events()
    assert event["meta_info"]["finish_reason"] == {
        "type": "abort",
        "message": "bad grammar",
        "status_code": 400,
        "err_type": "BadRequestError",
    }


async def test_lora_adapters_and_context_length(fake: FakeSGLang) -> None:
    assert (await generate(fake, lora_path="sql-lora")).status == 400  # LoRA not enabled
    fake.script.lora_adapters = ["sql-lora"]
    assert (await generate(fake, lora_path="sql-lora")).status == 200
    reply = await generate(fake, lora_path="other")
    assert reply.status == 400 and "not loaded" in reply.json()["error"]["message"]
    fake.script.context_length = 10
    assert (await generate(fake, text=" ".join(["w"] * 10))).status == 400
    assert (await generate(fake, sampling_params={"max_new_tokens": 7})).status == 400
    assert (await generate(fake, sampling_params={"max_new_tokens": 6})).status == 200


# ---- health, info, models ----------------------------------------------------------------------


async def test_health(fake: FakeSGLang) -> None:
    for path in ("/health", "/health_generate"):
        assert (await call(fake, "GET", path)).status == 200
    fake.script.healthy = False
    for path in ("/health", "/health_generate"):
        reply = await call(fake, "GET", path)
        assert (reply.status, reply.body) == (503, b"")


async def test_model_info_server_info_and_models(fake: FakeSGLang) -> None:
    fake.script.lora_adapters = ["sql-lora"]
    assert (await call(fake, "GET", "/get_model_info")).json() == {
        "model_path": "qwen3-8b",
        "tokenizer_path": "qwen3-8b",
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
    }
    for path in ("/server_info", "/get_server_info"):
        info = (await call(fake, "GET", path)).json()
        assert info["context_length"] == 32768 and info["served_model_name"] == "qwen3-8b"
        assert [a["lora_name"] for a in info["lora_paths"]] == ["sql-lora"]
        assert isinstance(info["version"], str) and isinstance(info["internal_states"], list)
    card = (await call(fake, "GET", "/v1/models")).json()["data"][0]
    assert (card["id"], card["owned_by"], card["max_model_len"]) == ("qwen3-8b", "sglang", 32768)
    reply = await call(fake, "GET", "/v1/models/other")
    assert reply.status == 404 and reply.json()["error"]["code"] == "model_not_found"


async def test_api_key(fake: FakeSGLang) -> None:
    fake.script.api_key = "k"
    reply = await generate(fake)
    assert (reply.status, reply.json()) == (401, {"error": "Unauthorized"})
    assert (await call(fake, "GET", "/health")).status == 200
    reply = await call(fake, "GET", "/v1/models", headers=(("authorization", "Bearer k"),))
    assert reply.status == 200


# ---- OpenAI-compatible -------------------------------------------------------------------------


async def test_openai_chat_basic_and_recorded(fake: FakeSGLang) -> None:
    request = {
        "model": "qwen3-8b",
        "messages": [{"role": "user", "content": "say three words"}],
        "max_completion_tokens": 2,
        "top_k": 20,
        "min_tokens": 1,
        "repetition_penalty": 1.1,
        "chat_template_kwargs": {"enable_thinking": False},
        "separate_reasoning": True,
    }
    body = (await call(fake, "POST", "/v1/chat/completions", request)).json()
    assert body["object"] == "chat.completion" and body["model"] == "qwen3-8b"
    (choice,) = body["choices"]
    assert choice["message"]["content"] == "the quick" and choice["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 2
    assert fake.requests[-1].body == request
    reply = await call(
        fake,
        "POST",
        "/v1/chat/completions",
        {**request, "stream": True, "n": 2, "stream_options": {"include_usage": True}},
    )
    *chunks, done = reply.events()
    assert done == "[DONE]"
    for index in (0, 1):
        mine = [
            c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == index
        ]
        assert mine[0]["delta"]["role"] == "assistant"
        assert "".join(c["delta"]["content"] or "" for c in mine) == words(index, 2)
        assert mine[-1]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    reply = await call(fake, "POST", "/v1/chat/completions", {**request, "top_p": 2})
    assert reply.status == 400 and reply.json()["type"] == "BadRequestError"


async def test_openai_completions_basic(fake: FakeSGLang) -> None:
    body = (await call(fake, "POST", "/v1/completions", {"model": "m", "prompt": "a b"})).json()
    assert body["object"] == "text_completion" and body["choices"][0]["text"] == "the quick brown"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 4  # three words and EOS


# ---- /v1/embeddings and /v1/rerank (--is-embedding) --------------------------------------------


async def test_embeddings_and_rerank_as_an_embedding_server_answers(fake: FakeSGLang) -> None:
    # A generation model has no embeddings: the tokenizer manager's ValueError, flat 400.
    reply = await call(fake, "POST", "/v1/embeddings", {"model": "m", "input": "hi"})
    assert reply.status == 400 and "--is-embedding" in reply.json()["message"]  # type: ignore[index]
    fake.script.is_embedding = True
    fake.script.embedding_dim = 6
    reply = await call(fake, "POST", "/v1/embeddings", {"model": "m", "input": ["a b", "c"]})
    doc: Any = reply.json()
    assert reply.status == 200 and doc["object"] == "list" and doc["model"] == "m"
    assert [d["index"] for d in doc["data"]] == [0, 1]
    assert [d["embedding"] for d in doc["data"]] == [embedding_of("a b", 6), embedding_of("c", 6)]
    assert all(-1 <= x < 1 for d in doc["data"] for x in d["embedding"])
    assert doc["usage"]["prompt_tokens"] == doc["usage"]["total_tokens"] == 3
    # Floats whatever encoding_format says; `dimensions` cuts the vector; token ids.
    reply = await call(
        fake,
        "POST",
        "/v1/embeddings",
        {"input": [[1, 2]], "encoding_format": "base64", "dimensions": 2},
    )
    doc = reply.json()
    assert doc["data"][0]["embedding"] == embedding_of([1, 2], 6)[:2] and doc["model"] == "default"
    for bad in ({"input": []}, {"input": [1, "a"]}, {"input": "a", "dimensions": 0}):
        reply = await call(fake, "POST", "/v1/embeddings", bad)
        assert reply.status == 400 and reply.json()["type"] == "Bad Request"  # type: ignore[index]
    # Generation is refused the other way round.
    assert (await generate(fake)).status == 400
    docs = ["a lazy dog", "the quick fox", "stream tokens"]
    reply = await call(fake, "POST", "/v1/rerank", {"query": "quick fox", "documents": docs})
    ranked: Any = reply.json()
    assert reply.status == 200 and isinstance(ranked, list)
    assert [r["index"] for r in ranked] == sorted(
        range(3), key=lambda i: -relevance_of("quick fox", docs[i])
    )
    assert ranked[0]["index"] == 1 and ranked[0]["document"] == docs[1]
    assert all(r["meta_info"]["prompt_tokens"] > 0 for r in ranked)
    body = {"query": "q", "documents": docs, "top_n": 1, "return_documents": False}
    ranked = (await call(fake, "POST", "/v1/rerank", body)).json()
    assert len(ranked) == 1 and "document" not in ranked[0]
    reply = await call(fake, "POST", "/v1/rerank", {**body, "top_n": 0})
    assert reply.status == 400
