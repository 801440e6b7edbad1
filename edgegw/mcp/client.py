"""The client of the configured MCP servers, a process-lifetime resource owned by
`serve()` (started with `nursery.start(client.run)`).

Built on the official MCP Python SDK (`mcp`, anyio-based, run here on Trio). One task per
server keeps its connection: Streamable HTTP with the initialize handshake (the SDK keeps
the `mcp-session-id` it is given); a 4xx answer to initialize falls back to the SSE
transport at `<url without /mcp>/sse`, as inference-gateway does. A server that cannot be
reached is retried in the background (MCP_MAX_RETRIES attempts, back-off doubling from
MCP_INITIAL_BACKOFF up to MCP_RETRY_INTERVAL, then every MCP_RECONNECT_INTERVAL while
MCP_ENABLE_RECONNECT), so a server down at start never stops the gateway and its tools
appear when it comes back. Its tools are re-listed on a `tools/list_changed` notification
and on every poll (MCP_POLLING_INTERVAL); a failed poll marks it unavailable and
reconnects it.

The catalogue routes read is one immutable mapping, swapped whole when a server's tools
change, so a request that took it sees one consistent set.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from types import MappingProxyType
from typing import Any

import httpx2
import mcp_types as types
import orjson
import trio
from mcp.client import Client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from edgegw.mcp.settings import McpSettings, sse_url
from edgegw.mcp.tools import McpTool, Offered, ToolResult

log = logging.getLogger("edgegw.mcp")

# Pages of one tools/list walk: a server whose cursor never ends cannot hold a refresh.
MAX_LIST_PAGES = 100


class _Server:
    __slots__ = ("url", "session", "tools", "changed", "transport", "failures")

    def __init__(self, url: str) -> None:
        self.url = url
        self.session: Client | None = None
        self.tools: tuple[McpTool, ...] = ()
        self.changed = trio.Event()  # set by a tools/list_changed notification
        self.transport = "streamable_http"
        self.failures = 0


class McpClient:
    """All configured MCP servers; `tools` is the current catalogue, `call` runs one."""

    def __init__(self, settings: McpSettings) -> None:
        self.settings = settings
        self._servers = [_Server(url) for url in settings.servers]
        self._by_url = {s.url: s for s in self._servers}
        self.tools: Mapping[str, McpTool] = MappingProxyType({})
        self.offered = Offered.of(self.tools, settings.tool_mode == "selector")
        connect = settings.dial_timeout_s
        if any(url.startswith("https:") for url in settings.servers):
            connect += settings.tls_handshake_timeout_s  # httpx's connect covers the TLS handshake
        # No read bound on the connection: a server's notification stream may stay silent
        # for long; every request is bounded whole instead (request/polling timeouts).
        self._timeout = httpx2.Timeout(
            connect=connect,
            read=None,
            write=settings.client_timeout_s,
            pool=settings.client_timeout_s,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep every server connected until cancelled; started() once each server's first
        attempt is over (at most MCP_REQUEST_TIMEOUT), whatever its result."""
        async with trio.open_nursery() as nursery:
            attempted = []
            for server in self._servers:
                first = trio.Event()
                attempted.append(first)
                nursery.start_soon(self._keep, server, first)
            with trio.move_on_after(self.settings.request_timeout_s):
                for first in attempted:
                    await first.wait()
            task_status.started()

    async def call(self, exposed_name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Run one tool, bounded by MCP_REQUEST_TIMEOUT. Every failure is a result the
        model reads (`is_error`), never an exception."""
        tool = self.tools.get(exposed_name)
        if tool is None:
            return ToolResult(f"Error: no MCP tool is named {exposed_name}", True)
        session = self._by_url[tool.server].session
        if session is None:
            return ToolResult(f"Error: the MCP server of {exposed_name} is unavailable", True)
        timeout = self.settings.request_timeout_s
        with trio.move_on_after(timeout):
            try:
                result = await session.call_tool(tool.name, dict(arguments))
            except MCPError as e:
                return ToolResult(f"Error: {e.error.message}", True)
            except Exception as e:  # the connection failed under the call
                log.warning(
                    "mcp tool %s on %s failed: %s", tool.name, tool.server, type(e).__name__
                )
                return ToolResult(f"Error: the MCP tool call failed ({type(e).__name__})", True)
            doc = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            doc.pop("resultType", None)
            return ToolResult(orjson.dumps(doc).decode(), bool(result.is_error))
        return ToolResult(f"Error: the MCP tool call timed out after {timeout:g}s", True)

    async def _keep(self, server: _Server, first: trio.Event) -> None:
        s = self.settings
        while True:
            try:
                await self._serve(server, first)
            except Exception as e:  # unreachable, refused, or lost
                log.warning("mcp server %s unavailable: %s", server.url, _reason(e))
            first.set()
            if server.session is not None or server.tools:
                server.session = None
                server.tools = ()
                self._publish()
            if server.failures < s.max_retries:
                delay = min(s.initial_backoff_s * 2**server.failures, s.retry_interval_s)
            elif s.enable_reconnect:
                delay = s.reconnect_interval_s
            else:
                log.warning("mcp server %s: giving up (MCP_ENABLE_RECONNECT=false)", server.url)
                return
            server.failures += 1
            await trio.sleep(delay)

    async def _serve(self, server: _Server, first: trio.Event) -> None:
        """Connect, list, then keep the catalogue fresh until the connection fails. The
        connection (either transport) and the first listing are bounded together by
        MCP_REQUEST_TIMEOUT, and so is the closing of a failed connection."""
        s = self.settings
        with trio.CancelScope(deadline=trio.current_time() + s.request_timeout_s) as bound:
            try:
                async with self._open(server) as session:
                    await self._refresh(server, session, s.request_timeout_s)
                    bound.deadline = math.inf
                    server.session = session
                    server.failures = 0
                    log.info(
                        "mcp server %s connected (%s): %d tool(s)",
                        server.url,
                        server.transport,
                        len(server.tools),
                    )
                    first.set()
                    while True:
                        poll = s.polling_interval_s if s.polling_enabled else math.inf
                        with trio.move_on_after(poll):
                            await server.changed.wait()
                        server.changed = trio.Event()
                        await self._refresh(server, session, s.polling_timeout_s)
                        if not s.disable_healthcheck_logs:
                            log.info(
                                "mcp server %s healthy: %d tool(s)", server.url, len(server.tools)
                            )
            finally:
                bound.deadline = trio.current_time() + s.request_timeout_s
        if bound.cancelled_caught:
            raise trio.TooSlowError

    @asynccontextmanager
    async def _open(self, server: _Server) -> AsyncIterator[Client]:
        statuses: list[int] = []

        async def record(response: httpx2.Response) -> None:
            if response.request.method == "POST":
                statuses.append(response.status_code)

        async def on_message(message: IncomingMessage) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                server.changed.set()

        def options() -> dict[str, Any]:
            return {
                "mode": "legacy",  # the initialize handshake, as every 2025-era server speaks
                "read_timeout_seconds": self.settings.request_timeout_s,
                "message_handler": on_message,
                "cache": None,  # the catalogue is refreshed by notification and polling
            }

        def http_client(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(
                timeout=self._timeout,
                headers=headers,
                auth=auth,
                event_hooks={"response": [record]},
            )

        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(http_client())
            try:
                client = await stack.enter_async_context(
                    Client(streamable_http_client(server.url, http_client=http), **options())
                )
                server.transport = "streamable_http"
            except Exception:
                if not any(400 <= status < 500 for status in statuses):
                    raise
                server.transport = "sse"
                client = await stack.enter_async_context(
                    Client(
                        sse_client(sse_url(server.url), httpx_client_factory=http_client),
                        **options(),
                    )
                )
            yield client

    async def _refresh(self, server: _Server, session: Client, timeout_s: float) -> None:
        found: list[McpTool] = []
        cursor: str | None = None
        with trio.fail_after(timeout_s):
            for _ in range(MAX_LIST_PAGES):
                page = await session.list_tools(cursor=cursor)
                found += (
                    McpTool(t.name, t.description or "", server.url, t.input_schema)
                    for t in page.tools
                    if self.settings.allows(t.name)
                )
                cursor = page.next_cursor
                if not cursor:
                    break
        tools = tuple(found)
        if tools != server.tools:
            server.tools = tools
            self._publish()

    def _publish(self) -> None:
        """Swap the catalogue whole; on a name two servers share, the first in MCP_SERVERS
        wins."""
        catalogue: dict[str, McpTool] = {}
        for server in self._servers:
            for tool in server.tools:
                if tool.exposed_name in catalogue:
                    log.warning(
                        "mcp tool %s of %s hidden by %s",
                        tool.name,
                        server.url,
                        catalogue[tool.exposed_name].server,
                    )
                    continue
                catalogue[tool.exposed_name] = tool
        self.tools = MappingProxyType(catalogue)
        self.offered = Offered.of(self.tools, self.settings.tool_mode == "selector")


def _reason(e: BaseException) -> str:
    """A short, secret-free reason for a log line."""
    if isinstance(e, BaseExceptionGroup) and e.exceptions:
        return _reason(e.exceptions[0])
    if isinstance(e, MCPError):
        return f"MCP error {e.error.code}"
    if isinstance(e, trio.TooSlowError):
        return "timed out"
    return type(e).__name__
