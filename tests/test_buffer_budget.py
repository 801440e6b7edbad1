"""The process's buffer budget (EDGEGW_RESPONSE_BUFFER_BUDGET) is charged before an answer's
bytes are held: an answer with a Content-Length whole, before its body is read, so the one
that cannot fit is refused while the others' bodies are still on their way; one of unknown
length piece by piece, refused when the next piece would pass the budget; a compressed one a
decoded step at a time, so what the process allocates stays within the budget however far
one compressed piece expands. The budget's recorded peak never passes its limit."""

from __future__ import annotations

import tracemalloc
import zlib

import orjson
import trio
import trio.testing

from edgegw.answer import Outcome
from edgegw.bodies import BufferBudget, read_whole
from edgegw.errors import GatewayError
from edgegw.tap import TAP_WHOLE_MAX, tap, usage_of
from edgegw.upstream import Origin, UpstreamPool

from .bad_upstream import chunk
from .conftest import start_gateway, wait_until
from .raw_upstream import RawUpstream
from .rawhttp import request

KIB = 1024
MIB = 1024 * KIB
BUDGET = MIB  # the smallest EDGEGW_RESPONSE_BUFFER_BUDGET allowed
# Each charged twice: two fit in BUDGET, a third does not.
BODY = 200 * KIB
CHAT = orjson.dumps({"model": "openai/gpt", "messages": [{"role": "user", "content": "hi"}]})


def answer(body: bytes, *extra: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%b\r\n%b"
        % (len(body), b"".join(extra), body)
    )


def held_back(upstream: RawUpstream, body: bytes) -> None:
    """Answer with `body`, sending the head and a first KiB of it only until released."""
    upstream.answer = answer(body)
    upstream.hold_at = upstream.answer.index(b"\r\n\r\n") + 4 + KIB


async def read(
    pool: UpstreamPool,
    origin: Origin,
    budget: BufferBudget,
    bodies: list[bytes],
    refused: list[tuple[int, str]],
) -> None:
    resp = await pool.send(origin, b"GET", b"/x", [])
    try:
        body, charge = await read_whole(resp, 16 * MIB, budget)
        budget.give(charge)
        bodies.append(body)
    except GatewayError as e:
        refused.append((e.status, e.code))
    finally:
        await resp.aclose()


async def test_an_answer_that_cannot_fit_is_refused_before_its_body_is_read(
    nursery: trio.Nursery,
) -> None:
    upstream = RawUpstream()
    held_back(upstream, b"x" * BODY)
    await nursery.start(upstream.serve)
    origin = Origin.from_url(f"http://127.0.0.1:{upstream.port}")
    pool, budget = UpstreamPool(), BufferBudget(BUDGET)
    bodies: list[bytes] = []
    refused: list[tuple[int, str]] = []
    async with trio.open_nursery() as readers:
        for _ in range(3):
            readers.start_soon(read, pool, origin, budget, bodies, refused)
        # Every body is held back by the upstream: the third is refused on its head alone.
        await wait_until(lambda: bool(refused))
        assert refused == [(503, "overloaded")] and budget.held == 4 * BODY
        upstream.release.set()
    assert bodies == [b"x" * BODY] * 2
    assert (budget.peak, budget.held) == (4 * BODY, 0)
    await pool.aclose()


async def test_an_answer_of_unknown_length_is_refused_when_its_next_piece_would_not_fit(
    nursery: trio.Nursery,
) -> None:
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    first, second = RawUpstream(answer=chunked), RawUpstream(answer=chunked)
    await nursery.start(first.serve)
    await nursery.start(second.serve)
    pool, budget = UpstreamPool(), BufferBudget(BUDGET)
    bodies: list[bytes] = []
    refused: list[tuple[int, str]] = []
    async with trio.open_nursery() as readers:
        for upstream in (first, second):
            origin = Origin.from_url(f"http://127.0.0.1:{upstream.port}")
            readers.start_soon(read, pool, origin, budget, bodies, refused)
        await wait_until(lambda: first.requests == second.requests == 1)
        await trio.testing.wait_all_tasks_blocked()  # the heads are sent
        (a,), (b,) = first.streams, second.streams
        await a.send_all(chunk(b"a" * 300 * KIB))
        await wait_until(lambda: budget.held == 600 * KIB)
        await b.send_all(chunk(b"b" * 200 * KIB))
        await wait_until(lambda: budget.held == 1000 * KIB)
        await b.send_all(chunk(b"b" * 64 * KIB))  # past the budget: refused, not held
        await wait_until(lambda: bool(refused))
        assert refused == [(503, "overloaded")] and budget.held == 600 * KIB
        await a.send_all(b"0\r\n\r\n")
    assert bodies == [b"a" * 300 * KIB]
    assert 1000 * KIB <= budget.peak <= budget.limit and budget.held == 0
    await pool.aclose()


async def test_a_compressed_answer_is_decoded_within_the_budget(nursery: trio.Nursery) -> None:
    """One small compressed piece that expands to 8 MiB: decoded a step at a time, each
    charged, so it is refused at the budget having allocated about that much, not 8 MiB."""
    packed = zlib.compress(b"\0" * 8 * MIB, 9)
    upstream = RawUpstream(answer=answer(packed, b"content-encoding: deflate\r\n"))
    await nursery.start(upstream.serve)
    origin = Origin.from_url(f"http://127.0.0.1:{upstream.port}")
    pool, budget = UpstreamPool(), BufferBudget(BUDGET)
    bodies: list[bytes] = []
    refused: list[tuple[int, str]] = []
    tracing = tracemalloc.is_tracing()  # already, under PYTHONTRACEMALLOC
    if not tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        await read(pool, origin, budget, bodies, refused)
        allocated = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not tracing:
            tracemalloc.stop()
    assert refused == [(503, "overloaded")] and not bodies
    assert budget.peak <= budget.limit and budget.held == 0
    assert allocated < budget.limit + 256 * KIB
    await pool.aclose()


async def test_through_the_gateway_answers_past_the_budget_are_503_and_the_others_whole(
    nursery: trio.Nursery,
) -> None:
    padded = orjson.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * BODY}}],
        }
    )
    upstream = RawUpstream()
    held_back(upstream, padded)
    await nursery.start(upstream.serve)
    gw = await start_gateway(
        nursery,
        {
            "OPENAI_API_URL": f"http://127.0.0.1:{upstream.port}/v1",
            "OPENAI_API_KEY": "upstream-key",
            "EDGEGW_RESPONSE_BUFFER_BUDGET": str(BUDGET),
        },
    )
    answers: list[tuple[int, bytes, bytes | None]] = []

    async def chat() -> None:
        resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
        answers.append((resp.status, resp.body, resp.headers.get(b"retry-after")))

    async with trio.open_nursery() as clients:
        for _ in range(3):
            clients.start_soon(chat)
        await wait_until(lambda: bool(answers))
        ((status, body, retry_after),) = answers
        assert status == 503 and retry_after == b"1"
        assert orjson.loads(body)["error"]["code"] == "overloaded"
        upstream.release.set()
    assert sorted(a[:2] for a in answers[1:]) == [(200, padded)] * 2


def test_a_large_answers_usage_is_read_without_parsing_it_whole() -> None:
    """Past TAP_WHOLE_MAX only the usage object is parsed (the whole answer's objects
    would take many times its size); a string that holds braces does not end it early."""
    usage = {"prompt_tokens": 3, "completion_tokens": 5, "details": {"note": 'a } { b " c'}}
    answer = orjson.dumps(
        {"choices": [{"message": {"content": "x" * TAP_WHOLE_MAX}}], "usage": usage}
    )
    outcome = Outcome()
    tap(usage_of(answer), outcome, "message")
    assert outcome.usage == usage
    assert usage_of(b'{"usage": null}') == b""
    assert usage_of(b'{"choices": []}') == b""
