"""Local models on fake SGLang workers: the SIE contract, routing, failure and fallback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import trio
from openai import OpenAI

from edgegw.mock import MockUpstream

from .conftest import Gateway, openai_client, start_gateway, upstream_env, wait_until
from .fake_sglang import FakeSGLang, Script
from .rawhttp import Client, request, sse_data

CHAT = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hello there"}]}


def profile_yaml(workers: list[tuple[int, str, str | None]], **extra: str) -> str:
    lines = ["local_models:", "  - name: qwen3-8b", "    workers:"]
    for port, pool, machine in workers:
        entry = f'      - {{url: "http://127.0.0.1:{port}", pool: {pool}'
        entry += f", machine_profile: {machine}}}" if machine else "}"
        lines.append(entry)
    defaults = {
        "max_output_tokens": "4096",
        "context_window": "32768",
        "chat_template_kwargs": "{enable_thinking: false}",
        "lora_adapters": "[sql-lora]",
        "default_sampling": "{temperature: 0.7, top_k: 20}",
        "timeouts": "{first_chunk_s: 5, inter_chunk_s: 2, overall_s: 20}",
    }
    defaults.update(extra)
    lines += [f"    {k}: {v}" for k, v in defaults.items() if v]
    return "\n".join(lines) + "\n"


async def local_gateway(
    nursery: trio.Nursery, tmp_path: Path, text: str, env: dict[str, str] | None = None
) -> Gateway:
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text(text)
    return await start_gateway(nursery, env or {}, config_file=cfg)


@pytest.fixture
async def worker(nursery: trio.Nursery) -> FakeSGLang:
    fake = FakeSGLang(Script(lora_adapters=["sql-lora"], tokens=6))
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def gw(nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang) -> Gateway:
    return await local_gateway(nursery, tmp_path, profile_yaml([(worker.port, "default", "h100")]))


@pytest.fixture
def sdk(gw: Gateway) -> Iterator[OpenAI]:
    with openai_client(gw.base, api_key="x", timeout=20) as client:
        yield client


def generations(fake: FakeSGLang) -> list[dict]:
    return [r.body for r in fake.requests if r.path.startswith("/v1/chat/completions")]


async def post(
    gw: Gateway,
    body: dict,
    headers: list[tuple[str, str]] | None = None,
    path: str = "/v1/chat/completions",
):
    return await request(gw.port, "POST", path, orjson.dumps(body), headers)


async def test_chat_maps_every_field_to_sglang(gw: Gateway, worker: FakeSGLang) -> None:
    body = {
        "model": "qwen3-8b",
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": "hello there"},
        ],
        "lora_adapter": "sql-lora",
        "chat_template_kwargs": {"enable_thinking": True, "extra": 1},
        "temperature": 0.2,
        "seed": -5,
        "min_tokens": 2,
        "repetition_penalty": 1.1,
        "logit_bias": {"42": 5},
        "user": "u-1",
        "safety_identifier": "s-1",
        "routing_key": "tenant-a",
        "stop": ["\n\n", "END"],
        "logprobs": True,
        "top_logprobs": 2,
        "presence_penalty": 0.5,
        "top_p": 0.9,
    }
    resp = await post(gw, body)
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-sie-served-by"] == b"local"
    answer = orjson.loads(resp.body)
    assert answer["id"] == "chatcmpl-" + resp.headers[b"x-sie-request-id"].decode()
    assert answer["object"] == "chat.completion" and answer["model"] == "qwen3-8b"
    assert answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] > 0
    sent = generations(worker)[-1]
    assert sent["lora_path"] == "sql-lora" and "lora_adapter" not in sent
    # The profile wins on a conflict; request keys only add new ones.
    assert sent["chat_template_kwargs"] == {"enable_thinking": False, "extra": 1}
    assert sent["temperature"] == 0.2 and sent["top_k"] == 20  # request value, profile default
    assert sent["messages"][0]["role"] == "system"
    assert sent["max_completion_tokens"] == 1024  # SIE_GATEWAY_DEFAULT_MAX_TOKENS
    assert (sent["seed"], sent["min_tokens"], sent["repetition_penalty"]) == (-5, 2, 1.1)
    assert sent["logit_bias"] == {"42": 5}
    assert sent["stop"] == ["\n\n", "END"]
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    assert (sent["presence_penalty"], sent["top_p"]) == (0.5, 0.9)
    # Asked for, the logprobs come back.
    assert answer["choices"][0]["logprobs"]["content"]
    for dropped in ("user", "safety_identifier", "routing_key", "max_tokens"):
        assert dropped not in sent
    assert sent["rid"] == resp.headers[b"x-sie-request-id"].decode()


USAGE_KEYS = {"prompt_tokens", "completion_tokens", "total_tokens"}


async def test_answer_shapes_fingerprint_usage_logprobs(gw: Gateway) -> None:
    from importlib.metadata import version

    import xxhash

    fingerprint = "fp_" + xxhash.xxh3_64_hexdigest(f"qwen3-8b\0{version('edgegw')}".encode())
    resp = await post(gw, {**CHAT, "logprobs": True})
    answer = orjson.loads(resp.body)
    assert answer["system_fingerprint"] == fingerprint
    # The worker's usage has prompt_tokens_details and reasoning_tokens: not relayed.
    assert set(answer["usage"]) == USAGE_KEYS
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    lp = answer["choices"][0]["logprobs"]
    assert set(lp) == {"content", "refusal"} and lp["refusal"] is None and lp["content"]
    resp = await post(
        gw, {**CHAT, "stream": True, "n": 2, "stream_options": {"include_usage": True}}
    )
    chunks = [orjson.loads(e) for e in sse_data(resp.body) if e != b"[DONE]"]
    assert chunks and all(c["system_fingerprint"] == fingerprint for c in chunks)
    assert set(chunks[-1]["usage"]) == USAGE_KEYS
    resp = await post(gw, {"model": "qwen3-8b", "prompt": "Once"}, path="/v1/completions")
    answer = orjson.loads(resp.body)
    assert answer["system_fingerprint"] == fingerprint and set(answer["usage"]) == USAGE_KEYS


async def test_streaming_n3_with_the_sdk(sdk: OpenAI, gw: Gateway, worker: FakeSGLang) -> None:
    def run() -> list:
        return list(
            sdk.chat.completions.create(
                model="qwen3-8b",
                messages=CHAT["messages"],
                n=3,
                stream=True,
                stream_options={"include_usage": True},
            )
        )

    chunks = await trio.to_thread.run_sync(run)
    roles: dict[int, int] = {}
    finishes: dict[int, list[str]] = {}
    texts: dict[int, str] = {}
    for chunk in chunks:
        for ch in chunk.choices:
            if ch.delta.role:
                roles[ch.index] = roles.get(ch.index, 0) + 1
            texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                finishes.setdefault(ch.index, []).append(ch.finish_reason)
    assert roles == {0: 1, 1: 1, 2: 1}
    assert set(finishes) == {0, 1, 2} and all(len(v) == 1 for v in finishes.values())
    assert len({texts[0], texts[1], texts[2]}) == 3
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    raw = await post(gw, {**CHAT, "n": 2, "stream": True})
    events = sse_data(raw.body)
    assert events.count(b"[DONE]") == 1 and events[-1] == b"[DONE]"


async def test_best_of_returns_the_top_candidates_without_logprobs(
    gw: Gateway, worker: FakeSGLang
) -> None:
    resp = await post(gw, {**CHAT, "best_of": 3, "n": 1})
    assert resp.status == 200, resp.body
    answer = orjson.loads(resp.body)
    assert len(answer["choices"]) == 1 and answer["choices"][0]["logprobs"] is None
    sent = generations(worker)[-1]
    assert sent["n"] == 3 and sent["logprobs"] is True
    # The fake's candidate 2 has the highest cumulative logprob: its text starts with word 2.
    all_three = orjson.loads((await post(gw, {**CHAT, "n": 3})).body)["choices"]
    assert answer["choices"][0]["message"]["content"] == all_three[2]["message"]["content"]


@pytest.mark.parametrize(
    ("extra", "status", "code", "param"),
    [
        ({"lora_adapter": "nope"}, 400, "unknown_lora_adapter", "lora_adapter"),
        ({"max_completion_tokens": 5000}, 400, "invalid_request", "max_completion_tokens"),
        ({"min_tokens": 50, "max_tokens": 10}, 400, "invalid_request", "min_tokens"),
        ({"reasoning_effort": "low"}, 400, "unsupported_field", "reasoning_effort"),
        ({"best_of": 2, "stream": True}, 400, "unsupported_field", "best_of"),
        ({"best_of": 1, "n": 2}, 400, "invalid_request", "best_of"),
    ],
)
async def test_profile_rules(
    gw: Gateway, worker: FakeSGLang, extra: dict, status: int, code: str, param: str
) -> None:
    before = len(generations(worker))
    resp = await post(gw, {**CHAT, **extra})
    assert resp.status == status, resp.body
    err = orjson.loads(resp.body)["error"]
    assert (err["code"], err["param"]) == (code, param)
    assert len(generations(worker)) == before


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
REMOTE_IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


async def test_images_only_for_image_profiles(
    nursery: trio.Nursery, tmp_path: Path, gw: Gateway, worker: FakeSGLang
) -> None:
    msg = [{"role": "user", "content": [{"type": "text", "text": "what"}, IMAGE]}]
    resp = await post(gw, {**CHAT, "messages": msg})
    err = orjson.loads(resp.body)["error"]
    assert (resp.status, err["code"], err["param"]) == (400, "unsupported_field", "messages")
    vision = await local_gateway(
        nursery, tmp_path, profile_yaml([(worker.port, "default", None)], inputs="{image: true}")
    )
    assert (await post(vision, {**CHAT, "messages": msg})).status == 200
    remote = [{"role": "user", "content": [REMOTE_IMAGE]}]
    resp = await post(vision, {**CHAT, "messages": remote})
    err = orjson.loads(resp.body)["error"]
    assert (resp.status, err["code"], err["param"]) == (
        400,
        "invalid_request",
        "messages[0].content[0].image_url",
    )


async def test_context_window_with_a_trained_tokenizer(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang
) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["hello there general kenobi " * 4], trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    text = profile_yaml(
        [(worker.port, "default", None)],
        tokenizer="tokenizer.json",
        context_window="64",
        max_output_tokens="32",
    )
    gw = await local_gateway(nursery, tmp_path, text)
    ok = await post(gw, {**CHAT, "max_tokens": 16})
    assert ok.status == 200, ok.body
    before = len(generations(worker))
    long = {
        **CHAT,
        "messages": [{"role": "user", "content": "hello there " * 30}],
        "max_tokens": 16,
    }
    resp = await post(gw, long)
    err = orjson.loads(resp.body)["error"]
    assert (resp.status, err["code"]) == (400, "context_length_exceeded")
    # The vocabulary size comes from the tokenizer: token ids at or past it are refused.
    vocab = tok.get_vocab_size()
    resp = await post(gw, {**CHAT, "max_tokens": 16, "logit_bias": {str(vocab): 1}})
    err = orjson.loads(resp.body)["error"]
    assert (resp.status, err["code"], err["param"]) == (400, "invalid_request", "logit_bias")
    assert len(generations(worker)) == before
    ok = await post(gw, {**CHAT, "max_tokens": 16, "logit_bias": {str(vocab - 1): 1}})
    assert ok.status == 200


@pytest.mark.parametrize(
    "values",
    [
        ["Forbid"],
        ["FORBID"],
        ["allow"],
        [""],
        ["forbid,forbid"],
        ["forbid, forbid"],
        ["forbid", "forbid"],
    ],
)
async def test_remote_header_refusals_do_not_echo(gw: Gateway, values: list[str]) -> None:
    resp = await post(gw, CHAT, [("x-sie-remote", v) for v in values])
    assert resp.status == 400
    err = orjson.loads(resp.body)["error"]
    assert err["code"] == "INVALID_INPUT"
    for v in values:
        if v and v != "forbid":
            assert v not in resp.body.decode()


async def test_forbid_without_a_worker_is_503_and_fallback_serves_remotely(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream, worker: FakeSGLang
) -> None:
    worker.script.healthy = False
    text = profile_yaml([(worker.port, "default", None)], remote_fallback="openai/gpt-4o-mini")
    gw = await local_gateway(nursery, tmp_path, text, upstream_env(mock))
    # Never healthy since the start: provisioning (SIE's scale-from-zero answer).
    resp = await post(gw, CHAT, [("x-sie-remote", "forbid")])
    assert resp.status == 503 and resp.headers[b"retry-after"] == b"60"
    assert resp.headers[b"x-sie-error-code"] == b"PROVISIONING"
    assert mock.requests == []
    resp = await post(gw, CHAT)
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-sie-served-by"] == b"remote"
    assert resp.headers[b"x-sie-fallback-reason"] == b"provisioning"
    assert resp.headers[b"x-sie-upstream"] == b"openai"
    assert orjson.loads(mock.requests[-1].body)["model"] == "gpt-4o-mini"
    assert generations(worker) == []


async def test_a_model_with_no_workers_yet_is_provisioning(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream
) -> None:
    text = (
        "local_models:\n  - name: qwen3-8b\n    workers: []\n"
        "    remote_fallback: openai/gpt-4o-mini\n"
    )
    gw = await local_gateway(nursery, tmp_path, text, upstream_env(mock))
    resp = await post(gw, CHAT)
    assert resp.status == 200, resp.body
    assert resp.headers[b"x-sie-fallback-reason"] == b"provisioning"
    resp = await post(gw, CHAT, [("x-sie-remote", "forbid")])
    assert (resp.status, resp.headers[b"x-sie-error-code"]) == (503, b"PROVISIONING")


async def test_fallback_drops_sampling_hints_and_keeps_model_bound_requests_local(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream, worker: FakeSGLang
) -> None:
    worker.script.healthy = False
    text = profile_yaml([(worker.port, "default", None)], remote_fallback="openai/gpt-4o-mini")
    gw = await local_gateway(nursery, tmp_path, text, upstream_env(mock))
    hints = {"top_k": 5, "min_tokens": 1, "repetition_penalty": 1.1, "best_of": 1}
    resp = await post(gw, {**CHAT, **hints, "chat_template_kwargs": {"enable_thinking": True}})
    assert resp.status == 200, resp.body
    dropped = resp.headers[b"x-edgegw-dropped-fields"].decode().split(",")
    assert sorted(dropped) == sorted([*hints, "chat_template_kwargs"])
    sent = orjson.loads(mock.requests[-1].body)
    assert not set(sent) & {*hints, "chat_template_kwargs"}
    # What only the local model can answer is not sent remotely: the local refusal answers.
    for extra in (
        {"lora_adapter": "sql-lora"},
        {"best_of": 3},
        {"response_format": {"type": "regex", "regex": "[a-z]+"}},
    ):
        before = len(mock.requests)
        resp = await post(gw, {**CHAT, **extra})
        assert resp.status == 503, (extra, resp.body)
        assert b"x-sie-fallback-reason" not in resp.headers
        assert len(mock.requests) == before


async def test_failure_before_first_byte_is_retried_elsewhere(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    bad, good = FakeSGLang(Script(fail_status=503)), FakeSGLang(Script())
    await nursery.start(bad.serve)
    await nursery.start(good.serve)
    gw = await local_gateway(
        nursery,
        tmp_path,
        profile_yaml([(bad.port, "default", None), (good.port, "default", None)], lora_adapters=""),
    )
    for _ in range(3):
        resp = await post(gw, {**CHAT, "routing_key": "k"})
        assert resp.status == 200, resp.body
    assert len(generations(good)) == 3


async def test_worker_dying_mid_stream_ends_with_an_error_event(
    gw: Gateway, worker: FakeSGLang
) -> None:
    worker.script.crash_after_tokens = 2
    resp = await post(gw, {**CHAT, "stream": True, "n": 2})
    assert resp.status == 200
    events = sse_data(resp.body)
    # SIE's shape (sie-rules A7): a final chunk with the error and request_id, then [DONE].
    assert events[-1] == b"[DONE]" and events.count(b"[DONE]") == 1
    last = orjson.loads(events[-2])
    assert last["object"] == "chat.completion.chunk" and last["id"] == events_id(events)
    assert last["request_id"] == resp.headers[b"x-sie-request-id"].decode()
    assert set(last["error"]) >= {"message", "type", "param", "code"}
    assert last["error"]["code"] in ("upstream_connection_lost", "transport_failure")
    assert [c["index"] for c in last["choices"]] == [0, 1]
    assert all(c["finish_reason"] is None for c in last["choices"])


async def test_a_worker_connection_is_kept_after_a_whole_stream(
    gw: Gateway, worker: FakeSGLang
) -> None:
    # SGLang ends a stream with [DONE], then the body's chunked terminator: read to it, the
    # connection serves the next request rather than a new one being opened for each stream.
    await post(gw, CHAT)  # the worker's connection, opened and back in the pool
    opened = gw.pool.connections_opened
    for body in ({**CHAT, "stream": True}, {**CHAT, "stream": True, "n": 2}, CHAT):
        resp = await post(gw, body)
        assert resp.status == 200, resp.body
        if body.get("stream"):
            assert sse_data(resp.body)[-1] == b"[DONE]"
    assert gw.pool.connections_opened == opened


async def test_a_worker_slow_to_end_its_stream_has_its_connection_closed(
    gw: Gateway,
    worker: FakeSGLang,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The client's stream ends at the worker's [DONE]; the worker's terminator is waited for
    # TERMINATOR_WAIT_S (1 s), not as long as it takes (virtual time). The client stays
    # connected, as a keep-alive client does: its hang-up would end the wait anyway.
    caplog.set_level(logging.INFO, "edgegw.access")
    worker.script.end_delay_s = 30.0
    start = trio.current_time()
    client = Client(await trio.open_tcp_stream("127.0.0.1", gw.port))
    await client.send("POST", "/v1/chat/completions", {**CHAT, "stream": True})
    reply = await client.reply()
    assert reply.complete and sse_data(reply.body)[-1] == b"[DONE]"
    assert trio.current_time() - start < 1  # the client's stream did not wait for the worker
    await trio.sleep(2)
    [line] = [r.getMessage() for r in caplog.records if r.name == "edgegw.access"]
    assert line.split()[2] == "200", line
    assert gw.pool.open_connections == 0  # not kept: the worker did not end its body in time
    await client.stream.aclose()


def events_id(events: list[bytes]) -> str:
    return str(orjson.loads(events[0])["id"])


async def test_keep_alive_comments_while_the_worker_is_silent(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgegw.local import serve

    monkeypatch.setattr(serve, "KEEPALIVE_S", 0.05)
    text = profile_yaml(
        [(worker.port, "default", None)],
        timeouts="{first_chunk_s: 5, inter_chunk_s: 2, overall_s: 20}",
    )
    gw = await local_gateway(nursery, tmp_path, text)
    worker.script.tokens, worker.script.token_delay_s = 3, 0.3
    resp = await post(gw, {**CHAT, "stream": True})
    assert resp.body.count(b": keep-alive\n\n") >= 3
    assert sse_data(resp.body)[-1] == b"[DONE]"


async def test_disconnect_aborts_the_generation_on_the_worker(
    gw: Gateway, worker: FakeSGLang
) -> None:
    worker.script.tokens = 500
    worker.script.token_delay_s = 0.02
    resp = await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({**CHAT, "stream": True}),
        max_chunks=2,
    )
    rid = resp.headers[b"x-sie-request-id"].decode()
    await wait_until(lambda: rid in worker.aborted_rids)
    await wait_until(lambda: not worker.active_rids)


async def test_disconnect_aborts_every_candidate_of_n(gw: Gateway, worker: FakeSGLang) -> None:
    # SGLang re-ids each candidate of n > 1 and matches an abort's id exactly.
    worker.script.tokens = 500
    worker.script.token_delay_s = 0.02
    resp = await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({**CHAT, "stream": True, "n": 3}),
        max_chunks=3,
    )
    candidates = set(worker.active_rids)
    assert len(candidates) == 3
    assert resp.headers[b"x-sie-request-id"].decode() not in candidates
    with trio.fail_after(2):
        while not candidates <= set(worker.aborted_rids):  # noqa: ASYNC110 (a fake's record)
            await trio.sleep(0.01)


async def test_affinity_across_two_gateway_instances(nursery: trio.Nursery, tmp_path: Path) -> None:
    fakes = [FakeSGLang(Script()) for _ in range(3)]
    for fake in fakes:
        await nursery.start(fake.serve)
    text = profile_yaml([(f.port, "default", None) for f in fakes], lora_adapters="")
    a = await local_gateway(nursery, tmp_path, text)
    b = await local_gateway(nursery, tmp_path, text)

    async def served_by(gw: Gateway, key: str) -> int:
        before = [len(generations(f)) for f in fakes]
        assert (await post(gw, {**CHAT, "prompt_cache_key": key})).status == 200
        (index,) = [i for i, f in enumerate(fakes) if len(generations(f)) > before[i]]
        return index

    chosen = {}
    for n in range(12):
        key = f"tenant-{n}"
        # Both replicas, several times each: always the same worker for one key.
        picks = {await served_by(gw, key) for gw in (a, b, a, b)}
        assert len(picks) == 1
        chosen[key] = picks.pop()
    # And the keys spread over the workers (rendezvous hashing, not a fixed favourite).
    assert len(set(chosen.values())) >= 2


async def test_pool_and_machine_profile_headers(nursery: trio.Nursery, tmp_path: Path) -> None:
    h100, l4 = FakeSGLang(Script()), FakeSGLang(Script())
    await nursery.start(h100.serve)
    await nursery.start(l4.serve)
    gw = await local_gateway(
        nursery,
        tmp_path,
        profile_yaml([(h100.port, "default", "h100"), (l4.port, "batch", "l4")], lora_adapters=""),
    )
    assert (await post(gw, CHAT, [("x-sie-pool", "batch")])).status == 200
    assert len(generations(l4)) == 1
    assert (await post(gw, CHAT, [("x-sie-machine-profile", "h100")])).status == 200
    assert len(generations(h100)) == 1
    resp = await post(gw, CHAT, [("x-sie-machine-profile", "a100")])
    assert (
        resp.status == 503 and orjson.loads(resp.body)["error"]["param"] == "X-SIE-MACHINE-PROFILE"
    )
    resp = await post(gw, CHAT, [("x-sie-pool", "nope")])
    assert resp.status == 400 and orjson.loads(resp.body)["error"]["param"] == "X-SIE-Pool"


async def test_machine_profile_pool_and_gpu_aliases(nursery: trio.Nursery, tmp_path: Path) -> None:
    spot, other = FakeSGLang(Script()), FakeSGLang(Script())
    await nursery.start(spot.serve)
    await nursery.start(other.serve)
    text = profile_yaml(
        [(other.port, "default", "h100"), (spot.port, "eval-bench", "l4-spot")], lora_adapters=""
    )
    gw = await local_gateway(
        nursery, tmp_path, text, {"SIE_GATEWAY_GPU_ALIASES": "l4=l4-spot, a100=a100-80gb"}
    )
    for value in ("eval-bench/l4", "eval-bench/l4-spot"):
        resp = await post(gw, CHAT, [("x-sie-machine-profile", value)])
        assert resp.status == 200, resp.body
    assert len(generations(spot)) == 2 and generations(other) == []
    # The default pool has no l4-spot worker: the header's profile is not configured there.
    resp = await post(gw, CHAT, [("x-sie-machine-profile", "l4")])
    assert resp.status == 503
    assert orjson.loads(resp.body)["error"]["param"] == "X-SIE-MACHINE-PROFILE"
    # A pool in the header that contradicts X-SIE-Pool is refused.
    resp = await post(
        gw, CHAT, [("x-sie-machine-profile", "eval-bench/l4"), ("x-sie-pool", "default")]
    )
    assert resp.status == 400
    assert orjson.loads(resp.body)["error"]["param"] == "X-SIE-MACHINE-PROFILE"


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


async def test_capabilities_gate_tools_and_grammars_and_stop_tokens_are_added(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang
) -> None:
    text = profile_yaml(
        [(worker.port, "default", None)],
        capabilities="{tools: false, grammar: [json_schema]}",
        stop_tokens='["<|im_end|>", "END"]',
    )
    gw = await local_gateway(nursery, tmp_path, text)
    before = len(generations(worker))
    for extra, param in (
        ({"tools": [TOOL]}, "tools"),
        ({"response_format": {"type": "regex", "regex": "[a-z]+"}}, "response_format.type"),
        ({"response_format": {"type": "grammar", "grammar": "root ::= x"}}, "response_format.type"),
    ):
        resp = await post(gw, {**CHAT, **extra})
        err = orjson.loads(resp.body)["error"]
        assert (resp.status, err["code"], err["param"]) == (400, "unsupported_field", param)
    assert len(generations(worker)) == before
    resp = await post(gw, {**CHAT, "response_format": {"type": "json_object"}, "stop": "END"})
    assert resp.status == 200, resp.body
    assert generations(worker)[-1]["stop"] == ["END", "<|im_end|>"]
    resp = await post(gw, {"model": "qwen3-8b", "prompt": "x"}, path="/v1/completions")
    sent = [r.body for r in worker.requests if r.path == "/v1/completions"][-1]
    assert sent["stop"] == ["<|im_end|>", "END"]


async def test_named_profiles(
    nursery: trio.Nursery, tmp_path: Path, mock: MockUpstream, worker: FakeSGLang
) -> None:
    text = profile_yaml(
        [(worker.port, "default", None)],
        remote_fallback="openai/gpt-4o-mini",
        profiles="{local: h100, remote: cloud}",
    )
    gw = await local_gateway(nursery, tmp_path, text, upstream_env(mock))
    resp = await post(gw, {**CHAT, "model": "qwen3-8b:h100"})
    assert resp.status == 200 and resp.headers[b"x-sie-served-by"] == b"local"
    resp = await post(gw, {**CHAT, "model": "qwen3-8b:cloud"})
    assert resp.status == 200 and resp.headers[b"x-sie-served-by"] == b"remote"
    assert b"x-sie-fallback-reason" not in resp.headers
    assert orjson.loads(mock.requests[-1].body)["model"] == "gpt-4o-mini"
    resp = await post(gw, {**CHAT, "model": "qwen3-8b:a100"})
    err = orjson.loads(resp.body)["error"]
    assert (resp.status, err["code"], err["param"]) == (404, "model_not_found", "model")


async def test_completions_for_local_models(gw: Gateway, worker: FakeSGLang) -> None:
    resp = await post(gw, {"model": "qwen3-8b", "prompt": "Once upon"}, path="/v1/completions")
    assert resp.status == 200, resp.body
    answer = orjson.loads(resp.body)
    assert answer["object"] == "text_completion" and answer["id"].startswith("cmpl-")
    assert "logprobs" not in answer["choices"][0]
    sent = [r.body for r in worker.requests if r.path == "/v1/completions"][-1]
    assert sent["max_tokens"] == 16 and sent["prompt"] == "Once upon"
    resp = await post(
        gw, {"model": "qwen3-8b", "prompt": "x", "stream": True}, path="/v1/completions"
    )
    events = sse_data(resp.body)
    assert events[-1] == b"[DONE]" and len(events) >= 2


async def test_local_models_are_listed_with_their_context_window(gw: Gateway) -> None:
    resp = await request(gw.port, "GET", "/v1/models?include=context_window,modalities")
    data = orjson.loads(resp.body)["data"]
    local = [m for m in data if m["id"] == "qwen3-8b"]
    assert local and local[0]["served_by"] == "local"
    # The fake worker reports max_model_len 32768, and so does the profile.
    assert local[0]["context_window"] == {"tokens": 32768, "source": "runtime"}
    assert local[0]["modalities"] == {"input": ["text"], "output": ["text"]}


async def test_timeouts_from_the_profile(
    nursery: trio.Nursery, tmp_path: Path, worker: FakeSGLang
) -> None:
    text = profile_yaml(
        [(worker.port, "default", None)],
        timeouts="{first_chunk_s: 0.3, inter_chunk_s: 0.2, overall_s: 5}",
    )
    gw = await local_gateway(nursery, tmp_path, text)
    # A stream whose tokens stop coming: an error event, not a clean end.
    worker.script.token_delay_s = 0.6
    resp = await post(gw, {**CHAT, "stream": True})
    events = sse_data(resp.body)
    assert events[-1] == b"[DONE]"
    assert orjson.loads(events[-2])["error"]["code"] in (
        "inter_chunk_timeout",
        "first_chunk_timeout",
    )
    # A non-streaming answer slower than the first-chunk limit: 504.
    worker.script.token_delay_s = 0
    worker.script.first_chunk_delay_s = 0.6
    resp = await post(gw, CHAT)
    err = orjson.loads(resp.body)["error"]
    assert (resp.status, err["code"]) == (504, "first_chunk_timeout")


async def test_old_sdk_versions_are_logged_once(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    # Skew against the gateway's major.minor (edgegw 0.1), logged once per minor version.
    caplog.set_level("WARNING", logger="edgegw.local")
    for version in ("0.0.9", "0.0.9", "0.0.10", "2.1.0", "0.1.7", "v0.1", "not-a-version"):
        assert (await post(gw, CHAT, [("x-sie-sdk-version", version)])).status == 200
    lines = [r.getMessage() for r in caplog.records if "SDK version" in r.getMessage()]
    assert len(lines) == 2 and "0.0.9" in lines[0] and "2.1.0" in lines[1]


async def test_an_overloaded_stream_is_retried_before_any_byte(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    # SGLang answers a stream it cannot queue with 200 and a first event carrying a 503 error.
    busy, free = FakeSGLang(Script(overloaded=True)), FakeSGLang(Script())
    await nursery.start(busy.serve)
    await nursery.start(free.serve)
    text = profile_yaml(
        [(busy.port, "default", None), (free.port, "default", None)], lora_adapters=""
    )
    gw = await local_gateway(nursery, tmp_path, text)
    for n in range(8):
        resp = await post(gw, {**CHAT, "stream": True, "routing_key": f"k{n}"})
        events = sse_data(resp.body)
        assert events[-1] == b"[DONE]" and not any(b'"error"' in e for e in events)
    assert len(generations(free)) == 8
    assert generations(busy)  # affinity sent some keys to the busy worker first
