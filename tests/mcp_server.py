"""A real MCP server for the MCP tests, built with the official SDK's server side
(MCPServer) and served on loopback port 0 by Hypercorn's Trio worker under the test's
nursery: Streamable HTTP at /mcp, or only the SSE transport at /sse (`sse_only`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp.server.mcpserver import Context, MCPServer


@dataclass
class ToolServer:
    """Tools: add(a, b); slow(seconds); grow() adds `extra` and notifies list_changed."""

    server: MCPServer = field(default_factory=lambda: MCPServer("edgegw-test"))
    calls: list[str] = field(default_factory=list)
    # Calls running at once, and the most seen together.
    running: int = 0
    most_running: int = 0
    url: str = ""

    def __post_init__(self) -> None:
        srv = self.server

        @srv.tool(description="Add two integers.")
        async def add(a: int, b: int) -> int:
            return await self._track("add", a + b)

        @srv.tool(description="Sleep, then answer.")
        async def slow(seconds: float) -> str:
            self._enter("slow")
            try:
                await trio.sleep(seconds)
            finally:
                self.running -= 1
            return f"slept {seconds}"

        @srv.tool(description="Always fails.")
        async def broken(reason: str) -> str:
            self.calls.append("broken")
            raise ValueError(f"broken on purpose: {reason}")

        @srv.tool(description="Add the tool `extra` and tell clients the list changed.")
        async def grow(ctx: Context) -> str:
            self.calls.append("grow")
            self.add_extra()
            await ctx.request_context.session.send_tool_list_changed()
            return "grown"

    def add_extra(self) -> None:
        self.server.add_tool(lambda: "extra!", name="extra", description="An added tool.")

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        self.running += 1
        self.most_running = max(self.most_running, self.running)

    async def _track(self, name: str, value: int) -> int:
        self._enter(name)
        try:
            await trio.sleep(0.05)  # long enough for concurrent calls to overlap
        finally:
            self.running -= 1
        return value

    async def serve(
        self,
        port: int = 0,
        *,
        sse_only: bool = False,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled; started(the URL to put in MCP_SERVERS)."""
        app = self.server.sse_app() if sse_only else self.server.streamable_http_app()
        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("tests.mcp_server")
        config.graceful_timeout = 0.1

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                lambda task_status: serve(app, config, task_status=task_status)
            )  # type: ignore[arg-type]
            self.url = binds[0] + "/mcp"
            task_status.started(self.url)
