"""The MCP tool source the app uses: the SDK is imported only when servers are configured."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from behest.tools.base import Tool
from behest.tools.mcp_config import McpServerConfig
from behest.tools.mcp_states import DEFAULT_RESTART_MAX_S, McpServerState


class ToolSource(Protocol):
    def watch(self, listener: Callable[[McpServerState], None]) -> None: ...
    async def start(self) -> None: ...
    async def settled(self, timeout_s: float | None = None) -> None: ...
    async def wait(self, names: Collection[str]) -> None: ...
    async def stop(self) -> None: ...
    def tools(self) -> list[Tool]: ...
    def servers(self) -> list[McpServerState]: ...
    def status(self) -> dict[str, str]: ...


class _NoServers:
    """No MCP servers configured: nothing to start, no tools."""

    def watch(self, listener: Callable[[McpServerState], None]) -> None:
        pass

    async def start(self) -> None:
        pass

    async def settled(self, timeout_s: float | None = None) -> None:
        pass

    async def wait(self, names: Collection[str]) -> None:
        pass

    async def stop(self) -> None:
        pass

    def tools(self) -> list[Tool]:
        return []

    def servers(self) -> list[McpServerState]:
        return []

    def status(self) -> dict[str, str]:
        return {}


def mcp_tool_source(
    servers: Sequence[McpServerConfig],
    *,
    start_timeout_s: float,
    restart_max_s: float = DEFAULT_RESTART_MAX_S,
) -> ToolSource:
    """The tools of the configured MCP servers (none configured: an empty source)."""
    if not servers:
        return _NoServers()
    from behest.tools.mcp import McpToolSource  # the SDK takes about a second to import

    return McpToolSource(servers, start_timeout_s=start_timeout_s, restart_max_s=restart_max_s)
