"""Tenants, keys and their limits, through a real gateway on loopback: keys stored as
hashes in EDGEGW_API_KEYS_FILE, model scopes, expiry, OIDC claim mapping, requests and
tokens per minute with OpenAI's x-ratelimit-* headers (on MockClock), requests at once,
the key file re-read under load, and the official SDK meeting a 429."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import subprocess
from pathlib import Path

import openai
import orjson
import pytest
import trio
import trio.testing

from edgegw._core import duration_text
from edgegw.keyfile import KeyFileError, Limits, Scope, parse_key_file, plain_key_name
from edgegw.mock import MockConfig, MockUpstream
from edgegw.settings import Settings, SettingsError

from .conftest import (
    UPSTREAM_KEY,
    Gateway,
    in_thread,
    openai_client,
    start_gateway,
    upstream_env,
    wait_until,
)
from .oidc_issuer import Issuer
from .processes import gateway_process
from .rawhttp import RawResponse, request


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def chat_body(model: str = "openai/m", max_tokens: int | None = 10, stream: bool = False) -> bytes:
    doc: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    if max_tokens is not None:
        doc["max_tokens"] = max_tokens
    if stream:
        doc["stream"] = True
        doc["stream_options"] = {"include_usage": True}
    return orjson.dumps(doc)


async def chat(
    gw: Gateway, key: str | None, body: bytes | None = None, **kw: object
) -> RawResponse:
    headers = [] if key is None else [("authorization", f"Bearer {key}")]
    return await request(
        gw.port, "POST", "/v1/chat/completions", body or chat_body(), headers, **kw
    )  # type: ignore[arg-type]


def code_of(resp: RawResponse) -> str:
    return str(orjson.loads(resp.body)["error"]["code"])


async def gateway_with(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, text: str, **env: str
) -> Gateway:
    keys = tmp_path / "keys"
    keys.write_text(text)
    store = str(tmp_path / "usage.sqlite3")  # not the data directory's
    return await start_gateway(
        nursery,
        upstream_env(mock, EDGEGW_API_KEYS_FILE=str(keys), TENANTS_STORE_PATH=store, **env),
    )


# -- the key file's grammar --------------------------------------------------------------


def test_the_key_file_holds_plain_keys_tenants_and_hashed_keys() -> None:
    text = f"""
    # a plain key, as before: the default tenant's
    sk-plain
    tenant team-a models=openai/*,Fast rpm=60 tpm=1000 concurrency=2 expires=2027-01-01
    key ci tenant=team-a sha256={sha("sk-ci")} rpm=5 expires=2026-12-31T18:00:00+01:00
    """
    kf = parse_key_file(text, fixed=(b"sk-env",), default_tenant="everyone")
    assert kf.plain == (b"sk-env", b"sk-plain")
    team = kf.tenants["team-a"]
    assert team.scope == Scope(("openai/*", "fast"))
    assert team.limits == Limits(rpm=60, tpm=1000, concurrency=2)
    assert team.expires == 1798761600.0  # 2027-01-01T00:00:00Z
    ci = kf.keys[hashlib.sha256(b"sk-ci").digest()]
    assert (ci.tenant, ci.name, ci.limits, ci.expires) == (
        "team-a",
        "ci",
        Limits(rpm=5),
        1798736400.0,
    )
    plain = kf.keys[hashlib.sha256(b"sk-plain").digest()]
    assert (plain.tenant, plain.name) == ("everyone", plain_key_name(b"sk-plain"))
    assert not plain.limits and plain.scope.allows("anything/at-all")
    assert team.scope.allows("openai/gpt-4o") and team.scope.allows("FAST")
    assert not team.scope.allows("groq/llama") and not team.scope.allows("openai")


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("ok-key\ntenant a rpm=0\n", 2, "rpm= takes a whole number"),
        ("tenant a\ntenant a\n", 2, "defined twice"),
        ("tenant a\nkey k tenant=a\n", 2, "needs tenant= and sha256="),
        ("tenant a\nkey k tenant=a sha256=abc\n", 2, "64 hex digits"),
        (f"tenant a\n\nkey k tenant=b sha256={sha('x')}\n", 3, "tenant b is not defined"),
        (
            f"tenant a\nkey k tenant=a sha256={sha('x')}\nkey j tenant=a sha256={sha('x')}\n",
            3,
            "same key as line 2",
        ),
        (
            f"tenant a\nkey k tenant=a sha256={sha('x')}\nkey k tenant=a sha256={sha('y')}\n",
            3,
            "also on line 2",
        ),
        (f"tenant a\nkey k tenant=a sha256={sha('x')}\nx\n", 2, "also given as a plain key"),
        ("tenant a expires=tomorrow\n", 1, "expires= takes an ISO 8601"),
        ("tenant a budget=3\n", 1, "an attribute is not one of"),
        ("tenant a sk-secret-value\n", 1, "word 3 is not name=value"),
        ("tenant bad/name\n", 1, "a name is letters"),
        ("two words\n", 1, "expected a key"),
    ],
)
def test_a_bad_line_is_named_and_no_key_is_quoted(text: str, line: int, says: str) -> None:
    with pytest.raises(KeyFileError) as caught:
        parse_key_file(text)
    message = str(caught.value)
    assert f"EDGEGW_API_KEYS_FILE line {line}:" in message and says in message
    assert "secret" not in message and sha("x") not in message


def test_a_bad_key_file_refuses_the_start_naming_the_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("sk-one\n\ntenant t tpm=lots\n")
    with pytest.raises(SettingsError, match="EDGEGW_API_KEYS_FILE line 3: tpm="):
        Settings.load(environ={"EDGEGW_API_KEYS_FILE": str(keys)})
    with pytest.raises(SettingsError, match="TENANTS_DEFAULT"):
        Settings.load(environ={"TENANTS_DEFAULT": "no spaces allowed"})


def test_the_oidc_claim_without_oidc_is_named_at_start() -> None:
    warnings = Settings.load(environ={"TENANTS_OIDC_CLAIM": "team"}).start_warnings
    assert any("TENANTS_OIDC_CLAIM" in w and "AUTH_ENABLED is not true" in w for w in warnings)
    warnings = Settings.load(environ={"TENANTS_DEFALUT": "x"}).start_warnings
    assert any("did you mean TENANTS_DEFAULT" in w for w in warnings)


def test_reset_durations_are_written_as_openai_writes_them() -> None:
    assert [duration_text(s) for s in (0.0, 0.0204, 1.0, 1.2, 59.0, 360.0, 3723.0)] == [
        "0ms",
        "21ms",
        "1s",
        "2s",
        "59s",
        "6m0s",
        "1h2m3s",
    ]


# -- who calls: keys, tenants, scopes, expiry --------------------------------------------


async def test_a_hashed_key_admits_its_tenant_within_its_scope(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.access")
    text = f"""
    sk-legacy
    tenant team-a models=openai/m*,openai/exact
    key ci tenant=team-a sha256={sha("sk-team-a")} models=openai/m1,openai/m2,openai/exact
    """
    gw = await gateway_with(nursery, mock, tmp_path, text)
    assert (await chat(gw, "sk-team-a", chat_body("openai/m1"))).status == 200
    # The tenant's scope and the key's both apply: m3 is in the first, not the second.
    for model in ("openai/m3", "openai/other"):
        resp = await chat(gw, "sk-team-a", chat_body(model))
        assert (resp.status, code_of(resp)) == (403, "model_not_in_scope"), model
        assert orjson.loads(resp.body)["error"]["param"] == "model"
    # ?provider= names the same target: judged as provider/model.
    resp = await request(
        gw.port,
        "POST",
        "/v1/chat/completions?provider=openai",
        chat_body("exact"),
        [("authorization", "Bearer sk-team-a")],
    )
    assert resp.status == 200
    # A plain key is the default tenant's, with no scope; the hash of a key is not a key.
    assert (await chat(gw, "sk-legacy", chat_body("openai/other"))).status == 200
    assert (await chat(gw, sha("sk-team-a"))).status == 401
    lines = [r.getMessage() for r in caplog.records if r.name == "edgegw.access"]
    assert "tenant=team-a key=ci cost=" in lines[0]
    assert f"tenant=default key={plain_key_name(b'sk-legacy')} " in lines[-2]
    assert lines[-1].endswith("tenant=- key=- cost=-")
    assert not any("sk-team-a" in line or "sk-legacy" in line for line in lines)


async def test_an_expired_key_or_tenant_is_refused(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    text = f"""
    tenant live expires=2999-01-01
    tenant gone expires=2000-01-01T00:00:00Z
    key fresh tenant=live sha256={sha("sk-fresh")}
    key stale tenant=live sha256={sha("sk-stale")} expires=2001-02-03
    key orphan tenant=gone sha256={sha("sk-orphan")} expires=2999-01-01
    """
    gw = await gateway_with(nursery, mock, tmp_path, text)
    assert (await chat(gw, "sk-fresh")).status == 200
    for key in ("sk-stale", "sk-orphan"):
        resp = await chat(gw, key)
        assert (resp.status, code_of(resp)) == (401, "key_expired"), key
        assert resp.headers[b"www-authenticate"] == b"Bearer"
        assert orjson.loads(resp.body)["error"]["type"] == "authentication_error"


async def test_oidc_callers_map_to_a_tenant_through_a_claim(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    issuer = Issuer()
    await nursery.start(issuer.serve)
    signer = issuer.add_key("RS256")
    text = "tenant research rpm=1\ntenant ops models=openai/ops-*\ntenant fallback models=openai/none\n"
    keys = tmp_path / "keys"
    keys.write_text(text)
    env = issuer.env(
        EDGEGW_API_KEYS_FILE=str(keys),
        TENANTS_STORE_PATH=str(tmp_path / "usage.sqlite3"),
        TENANTS_OIDC_CLAIM="org.teams",
        TENANTS_DEFAULT="fallback",
    )
    gw = await start_gateway(nursery, upstream_env(mock, **env))

    async def as_token(claims: dict[str, object], model: str = "openai/m") -> RawResponse:
        token = issuer.token(signer, **claims)
        return await request(
            gw.port,
            "POST",
            "/v1/chat/completions",
            chat_body(model),
            [("authorization", f"Bearer {token}")],
        )

    # The first listed team that is a tenant: research, whose rpm is 1.
    research = {"org": {"teams": ["unknown", "research", "ops"]}}
    assert (await as_token(research)).status == 200
    assert (await as_token(research)).status == 429
    # A string claim; ops' scope.
    assert (await as_token({"org": {"teams": "ops"}}, "openai/ops-1")).status == 200
    assert (await as_token({"org": {"teams": "ops"}})).status == 403
    # No claim, or a value naming no tenant: the default tenant (whose scope is `none`).
    for claims in ({}, {"org": {"teams": ["unknown"]}}, {"org": "flat"}):
        resp = await as_token(claims)
        assert (resp.status, code_of(resp)) == (403, "model_not_in_scope"), claims
    assert (await as_token({}, "openai/none")).status == 200


# -- limits ------------------------------------------------------------------------------


async def test_requests_per_minute_with_openais_headers(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    text = f"""
    tenant team rpm=3
    key a tenant=team sha256={sha("sk-a")} rpm=2
    key b tenant=team sha256={sha("sk-b")}
    """
    gw = await gateway_with(nursery, mock, tmp_path, text)
    first = await chat(gw, "sk-a")
    assert first.status == 200
    # The key's limit is the tightest: 2, one left after this request.
    assert first.headers[b"x-ratelimit-limit-requests"] == b"2"
    assert first.headers[b"x-ratelimit-remaining-requests"] == b"1"
    assert first.headers[b"x-ratelimit-reset-requests"] == b"30s"
    assert b"x-ratelimit-limit-tokens" not in first.headers  # no token limit set
    assert (await chat(gw, "sk-a")).headers[b"x-ratelimit-remaining-requests"] == b"0"
    refused = await chat(gw, "sk-a")
    assert (refused.status, code_of(refused)) == (429, "rate_limit_exceeded")
    assert orjson.loads(refused.body)["error"]["type"] == "requests"
    assert refused.headers[b"retry-after"] == b"30"
    assert refused.headers[b"retry-after-ms"] == b"30000"
    assert refused.headers[b"x-ratelimit-remaining-requests"] == b"0"
    # Key b has no limit of its own, and the tenant's 3 has one left; then none.
    assert (await chat(gw, "sk-b")).headers[b"x-ratelimit-remaining-requests"] == b"0"
    assert (await chat(gw, "sk-b")).status == 429
    mock_clock.jump(30)  # the tenant refills one every 20 s, key a one every 30 s
    assert (await chat(gw, "sk-a")).status == 200
    assert (await chat(gw, "sk-b")).status == 429  # the tenant has half a request left
    mock_clock.jump(10)
    assert (await chat(gw, "sk-b")).status == 200
    assert len(mock.requests) == 5


async def test_tokens_per_minute_charge_an_estimate_and_settle_with_the_usage(
    nursery: trio.Nursery, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    upstream = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, tokens=250))
    await nursery.start(upstream.serve, "127.0.0.1", 0)
    text = f"tenant t tpm=2000\nkey k tenant=t sha256={sha('sk-k')}\n"
    gw = await gateway_with(nursery, upstream, tmp_path, text)
    level = 2000  # the clock stands still: nothing refills
    bodies = [chat_body(max_tokens=300), chat_body(max_tokens=300, stream=True)]
    for turn in range(12):
        body = bodies[turn % 2]
        # Charged before: the body's length (a bound of its prompt) plus max_tokens ...
        estimate = len(body) + 300
        resp = await chat(gw, "sk-k", body)
        if level < estimate:
            break
        assert resp.status == 200, turn
        assert resp.headers[b"x-ratelimit-limit-tokens"] == b"2000"
        assert resp.headers[b"x-ratelimit-remaining-tokens"] == b"%d" % (level - estimate)
        # ... and settled after with the usage, streamed (its last chunk) or not.
        level -= 1 + 250  # the mock's usage: a prompt word and 250 tokens
    assert turn > 3
    assert (resp.status, code_of(resp)) == (429, "rate_limit_exceeded")
    assert orjson.loads(resp.body)["error"]["type"] == "tokens"
    retry_s = int(resp.headers[b"retry-after"])
    assert retry_s == math.ceil((estimate - level) * 60 / 2000)
    mock_clock.jump(retry_s)
    assert (await chat(gw, "sk-k", body)).status == 200


async def test_a_request_above_the_whole_limit_waits_for_a_full_bucket(
    nursery: trio.Nursery, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    upstream = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, tokens=60))
    await nursery.start(upstream.serve, "127.0.0.1", 0)
    text = f"tenant t tpm=100\nkey k tenant=t sha256={sha('sk-k')}\n"
    gw = await gateway_with(nursery, upstream, tmp_path, text)
    assert (await chat(gw, "sk-k", chat_body(max_tokens=5000))).status == 200  # a full bucket
    # Settled at its usage (61): what is left is less than the next estimate.
    small = chat_body(max_tokens=1)
    assert 100 - 61 < len(small) + 1
    assert (await chat(gw, "sk-k", small)).status == 429
    mock_clock.jump(60)
    assert (await chat(gw, "sk-k", small)).status == 200


async def test_a_client_that_hangs_up_is_charged_what_was_generated(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    upstream = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, tokens=400, token_rate=50))
    await nursery.start(upstream.serve, "127.0.0.1", 0)
    # A small limit, so that what refills in the stream's half second (~20/s) is small.
    text = f"tenant t tpm=1200\nkey k tenant=t sha256={sha('sk-k')}\n"
    gw = await gateway_with(nursery, upstream, tmp_path, text)
    body = chat_body(max_tokens=400, stream=True)
    cut = await chat(gw, "sk-k", body, max_chunks=3)
    assert cut.status == 200
    await wait_until(lambda: upstream.stream_disconnects == 1)
    await trio.testing.wait_all_tasks_blocked(0.01)  # the gateway's request has ended
    small = chat_body(max_tokens=1)
    after = await chat(gw, "sk-k", small)
    charged = 1200 - int(after.headers[b"x-ratelimit-remaining-tokens"]) - (len(small) + 1)
    # The prompt bound and a token per event sent (less what refilled meanwhile): about
    # the prompt, far less than the 400 tokens more the estimate held.
    assert len(body) - 40 < charged < len(body) + 100


async def test_requests_at_once(nursery: trio.Nursery, tmp_path: Path) -> None:
    upstream = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, latency_s=0.5))
    await nursery.start(upstream.serve, "127.0.0.1", 0)
    text = f"tenant t concurrency=2\nkey k tenant=t sha256={sha('sk-k')}\n"
    gw = await gateway_with(nursery, upstream, tmp_path, text)
    statuses: list[int] = []

    async def one() -> None:
        resp = await chat(gw, "sk-k")
        statuses.append(resp.status)
        if resp.status == 429:
            assert code_of(resp) == "concurrency_limit_exceeded"
            assert resp.headers[b"retry-after"] == b"1"

    async with trio.open_nursery() as clients:
        for _ in range(5):
            clients.start_soon(one)
    assert sorted(statuses) == [200, 200, 429, 429, 429]
    # The slots came back when the requests ended.
    assert (await chat(gw, "sk-k")).status == 200


async def test_the_openai_sdk_sees_a_rate_limit_error_and_honours_retry_after(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    # 60 a minute: a burst of 60, then one a second.
    text = f"tenant t rpm=60\nkey k tenant=t sha256={sha('sk-k')}\n"
    gw = await gateway_with(nursery, mock, tmp_path, text)

    async def drain() -> None:
        for _ in range(10):
            assert (await chat(gw, "sk-k")).status == 200

    async with trio.open_nursery() as clients:
        for _ in range(6):
            clients.start_soon(drain)
    messages = [{"role": "user", "content": "hi"}]
    with openai_client(gw.base, api_key="sk-k") as client:
        with pytest.raises(openai.RateLimitError) as caught:
            await in_thread(client.chat.completions.create, model="openai/m", messages=messages)
        error = caught.value
        assert error.status_code == 429 and error.code == "rate_limit_exceeded"
        assert error.response.headers["retry-after"] == "1"
        assert error.response.headers["x-ratelimit-remaining-requests"] == "0"
        asked_s = int(error.response.headers["retry-after-ms"]) / 1000
        # With retries, the SDK waits what Retry-After says and then gets through.
        retrying = client.with_options(max_retries=2)
        started = trio.current_time()
        raw = await in_thread(
            retrying.chat.completions.with_raw_response.create, model="openai/m", messages=messages
        )
        waited = trio.current_time() - started
    assert raw.http_response.status_code == 200
    assert raw.retries_taken == 1
    # It slept about what the second refusal asked (a little less than the first's).
    assert asked_s - 0.2 <= waited <= asked_s + 1.0


# -- the key file re-read ------------------------------------------------------------------


def replace(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def test_tenant_lines_re_read_under_load_and_a_bad_file_keeps_the_last_good(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="edgegw.auth")
    steady = f"key steady tenant=t sha256={sha('sk-steady')}\n"
    gw = await gateway_with(nursery, mock, tmp_path, "tenant t\n" + steady)
    keys = tmp_path / "keys"
    failures: list[int] = []
    done = trio.Event()

    async def load() -> None:
        sent = 0
        while not done.is_set() and sent < 2000:
            status = (await chat(gw, "sk-steady")).status
            sent += 1
            if status != 200:
                failures.append(status)

    async def until(key: str, model: str, status: int) -> None:
        with trio.fail_after(10):
            while (await chat(gw, key, chat_body(model))).status != status:  # noqa: ASYNC110
                await trio.sleep(0.05)

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "line 5" in r.getMessage()]

    async with trio.open_nursery() as clients:
        for _ in range(4):
            clients.start_soon(load)
        new = f"tenant t\ntenant u models=openai/u\n{steady}key n tenant=u sha256={sha('sk-new')}\n"
        replace(keys, new)
        await until("sk-new", "openai/u", 200)
        assert (await chat(gw, "sk-new", chat_body("openai/m"))).status == 403
        # A bad line: the file is not taken, the log says which line, the keys stay.
        replace(keys, new + "key x tenant=nobody sha256=" + sha("sk-x") + "\n")
        await wait_until(lambda: bool(warned()), 10)
        assert (await chat(gw, "sk-new", chat_body("openai/u"))).status == 200
        assert (await chat(gw, "sk-x")).status == 401
        done.set()
    assert failures == []
    assert "tenant nobody is not defined" in warned()[0] and "keys in force stay" in warned()[0]
    assert sha("sk-x") not in warned()[0]


async def test_a_local_models_tokenizer_counts_the_prompt_of_the_estimate(
    nursery: trio.Nursery, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from .fake_sglang import FakeSGLang, Script
    from .test_local import local_gateway, profile_yaml

    worker = FakeSGLang(Script(tokens=6))
    await nursery.start(worker.serve)
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["hello there"], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    keys = tmp_path / "keys"
    keys.write_text(
        f"tenant t tpm=1000 models=qwen3-*\nkey k tenant=t sha256={sha('sk-k')}\n"
        f"tenant remote-only models=openai/*\nkey r tenant=remote-only sha256={sha('sk-r')}\n"
    )
    profile = profile_yaml([(worker.port, "default", None)], tokenizer="tokenizer.json")
    env = {"EDGEGW_API_KEYS_FILE": str(keys), "TENANTS_STORE_PATH": str(tmp_path / "usage.db")}
    gw = await local_gateway(nursery, tmp_path, profile, env)
    body = orjson.dumps(
        {
            "model": "qwen3-8b",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 16,
        }
    )
    resp = await chat(gw, "sk-k", body)
    assert resp.status == 200, resp.body
    # Two words and three tokens per message for the template, then max_tokens.
    assert resp.headers[b"x-ratelimit-remaining-tokens"] == b"%d" % (1000 - (2 + 3 + 16))
    resp = await chat(gw, "sk-r", body)
    assert (resp.status, code_of(resp)) == (403, "model_not_in_scope")


async def test_hashed_keys_alone_count_as_client_authentication_at_start(
    tmp_path: Path,
) -> None:
    """`edgegw serve` on a non-loopback address warns when nobody is asked for a key; a key
    file of tenants and hashed keys asks."""
    keys = tmp_path / "keys"
    keys.write_text(f"tenant t\nkey k tenant=t sha256={sha('sk-k')}\n")
    env = {
        "SERVER_HOST": "0.0.0.0",  # noqa: S104 (what the warning is about)
        "EDGEGW_API_KEYS_FILE": str(keys),
        "TENANTS_STORE_PATH": str(tmp_path / "usage.sqlite3"),
    }
    async with gateway_process(env, stderr=subprocess.PIPE) as (proc, _):
        pass
    assert proc.stderr is not None
    async with proc.stderr:
        stderr = (await proc.stderr.receive_some(1 << 20)).decode()
    assert "no client authentication" not in stderr
