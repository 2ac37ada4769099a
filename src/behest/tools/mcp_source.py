"""The MCP tool source the app uses: the SDK is imported only when servers are configured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from behest.tools.base import Tool
from behest.tools.mcp_config import McpServerConfig


class ToolSource(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def tools(self) -> list[Tool]: ...
    def status(self) -> dict[str, str]: ...


class _NoServers:
    """No MCP servers configured: nothing to start, no tools."""

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def tools(self) -> list[Tool]:
        return []

    def status(self) -> dict[str, str]:
        return {}


def mcp_tool_source(servers: Sequence[McpServerConfig], *, start_timeout_s: float) -> ToolSource:
    """The tools of the configured MCP servers (none configured: an empty source)."""
    if not servers:
        return _NoServers()
    from behest.tools.mcp import McpToolSource  # the SDK takes about a second to import

    return McpToolSource(servers, start_timeout_s=start_timeout_s)
