"""MCP tools against a real MCP server (tests/mcp_server.py, the official SDK's server side)
and the real gateway: the tool list, its refresh, a server down at start."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import orjson
import pytest
import trio

from .conftest import start_gateway
from .mcp_server import ToolServer
from .rawhttp import request

# The SDK's transports leave httpx2 async generators (and, on SSE, anyio memory streams)
# to the garbage collector when a stream ends early, which Trio and anyio report as a
# ResourceWarning; what they held is closed with them.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator .* was garbage collected:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Unclosed <MemoryObject:ResourceWarning"),
]


@pytest.fixture(autouse=True)
def _collect_sdk_garbage() -> Iterator[None]:
    """Collect the SDK's garbage while the filters above apply, not in a later test."""
    yield
    gc.collect()


def mcp_env(*urls: str, **extra: str) -> dict[str, str]:
    return {
        "MCP_ENABLED": "true",
        "MCP_EXPOSE": "true",
        "MCP_SERVERS": ",".join(urls),
        **extra,
    }


async def tool_list(port: int) -> dict:
    resp = await request(port, "GET", "/v1/mcp/tools")
    assert resp.status == 200, resp.body
    return orjson.loads(resp.body)


async def wait_for_tool(port: int, name: str, present: bool = True) -> dict:
    with trio.fail_after(10):
        while True:
            doc = await tool_list(port)
            if (name in [t["name"] for t in doc["data"]]) == present:
                return doc
            await trio.sleep(0.05)


async def test_tools_listed_in_both_shapes(nursery: trio.Nursery) -> None:
    tools = ToolServer()
    url = await nursery.start(tools.serve)
    gw = await start_gateway(nursery, mcp_env(url, MCP_POLLING_ENABLED="false"))
    doc = await tool_list(gw.port)
    assert doc["object"] == "list"
    assert doc["tools"] == doc["data"]
    by_name = {t["name"]: t for t in doc["data"]}
    assert set(by_name) == {"mcp_add", "mcp_slow", "mcp_broken", "mcp_grow"}
    add = by_name["mcp_add"]
    assert add["description"] == "Add two integers."
    assert add["server"] == url
    assert add["inputSchema"] == add["input_schema"]
    assert add["input_schema"]["type"] == "object"
    assert set(add["input_schema"]["properties"]) == {"a", "b"}


async def test_list_is_403_unless_exposed(nursery: trio.Nursery) -> None:
    tools = ToolServer()
    url = await nursery.start(tools.serve)
    env = mcp_env(url)
    del env["MCP_EXPOSE"]
    gw = await start_gateway(nursery, env)
    resp = await request(gw.port, "GET", "/v1/mcp/tools")
    assert resp.status == 403
    err = orjson.loads(resp.body)["error"]
    assert err["code"] == "mcp_tools_not_exposed"
    assert err["type"] == "permission_error"


async def test_exposed_but_disabled_is_an_empty_list(nursery: trio.Nursery) -> None:
    gw = await start_gateway(nursery, {"MCP_EXPOSE": "true"})
    assert await tool_list(gw.port) == {"object": "list", "data": [], "tools": []}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"MCP_INCLUDE_TOOLS": "MCP_ADD, slow"}, {"mcp_add", "mcp_slow"}),
        ({"MCP_EXCLUDE_TOOLS": "mcp_grow,broken"}, {"mcp_add", "mcp_slow"}),
        # An include list wins over the exclude list.
        ({"MCP_INCLUDE_TOOLS": "add", "MCP_EXCLUDE_TOOLS": "add"}, {"mcp_add"}),
    ],
)
async def test_include_and_exclude(
    nursery: trio.Nursery, env: dict[str, str], expected: set[str]
) -> None:
    tools = ToolServer()
    url = await nursery.start(tools.serve)
    gw = await start_gateway(nursery, mcp_env(url, **env))
    assert {t["name"] for t in (await tool_list(gw.port))["data"]} == expected


async def test_sse_fallback_on_4xx(nursery: trio.Nursery) -> None:
    tools = ToolServer()
    url = await nursery.start(
        lambda task_status: tools.serve(sse_only=True, task_status=task_status)
    )
    gw = await start_gateway(nursery, mcp_env(url, MCP_POLLING_ENABLED="false"))
    doc = await tool_list(gw.port)
    assert {t["name"] for t in doc["data"]} == {"mcp_add", "mcp_slow", "mcp_broken", "mcp_grow"}


async def test_server_down_at_start_appears_later(nursery: trio.Nursery) -> None:
    # A port that refuses: taken, then freed.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()
    gw = await start_gateway(
        nursery,
        mcp_env(
            f"http://127.0.0.1:{port}/mcp",
            MCP_INITIAL_BACKOFF="50ms",
            MCP_RETRY_INTERVAL="100ms",
            MCP_RECONNECT_INTERVAL="100ms",
        ),
    )
    assert (await tool_list(gw.port))["data"] == []
    tools = ToolServer()
    await nursery.start(lambda task_status: tools.serve(port, task_status=task_status))
    await wait_for_tool(gw.port, "mcp_add")


async def test_polling_refreshes_the_catalogue(nursery: trio.Nursery) -> None:
    tools = ToolServer()
    url = await nursery.start(tools.serve)
    gw = await start_gateway(nursery, mcp_env(url, MCP_POLLING_INTERVAL="50ms"))
    assert "mcp_extra" not in {t["name"] for t in (await tool_list(gw.port))["data"]}
    tools.add_extra()  # no notification: only a poll can see it
    await wait_for_tool(gw.port, "mcp_extra")


async def test_a_server_that_never_answers_does_not_hold_the_start(nursery: trio.Nursery) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    tried = trio.Event()

    async def accept_and_stay_silent(stream: trio.SocketStream) -> None:
        async with stream:
            tried.set()
            await trio.sleep_forever()

    await nursery.start(trio.serve_listeners, accept_and_stay_silent, listeners)
    gw = await start_gateway(
        nursery,
        mcp_env(f"http://127.0.0.1:{port}/mcp", MCP_REQUEST_TIMEOUT="1s"),
    )
    assert (await tool_list(gw.port))["data"] == []
    with trio.fail_after(10):  # it is tried (again, on a loaded machine)
        await tried.wait()


async def test_a_lost_server_leaves_and_comes_back(nursery: trio.Nursery) -> None:
    tools = ToolServer()

    async def serve_in(
        scope: trio.CancelScope, port: int, task_status: trio.TaskStatus[str]
    ) -> None:
        with scope:
            await tools.serve(port, task_status=task_status)

    first = trio.CancelScope()
    url = await nursery.start(serve_in, first, 0)
    port = int(url.rsplit(":", 1)[1].removesuffix("/mcp"))
    gw = await start_gateway(
        nursery,
        mcp_env(
            url,
            MCP_POLLING_INTERVAL="50ms",
            MCP_POLLING_TIMEOUT="500ms",
            MCP_INITIAL_BACKOFF="50ms",
            MCP_RETRY_INTERVAL="100ms",
        ),
    )
    await wait_for_tool(gw.port, "mcp_add")
    first.cancel()  # the server goes away: a poll fails, its tools leave the catalogue
    await wait_for_tool(gw.port, "mcp_add", present=False)
    await nursery.start(serve_in, trio.CancelScope(), port)  # back on the same port
    await wait_for_tool(gw.port, "mcp_add")
