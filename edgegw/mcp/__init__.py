"""MCP tools: the client of the configured MCP servers (`client`), their settings
(`settings`) and the agent loop that runs a chat request's MCP tool calls (`agent`)."""
