"""The server's tools as runs and ListTools see them now: its own (built-ins and plugins, one
registry made at start) and its MCP servers' (tools/mcp.py), which come and go with them.

A run's registry is made as the run starts (runs/builder.py), once the MCP servers whose
tools it may use (those it names in CreateRunRequest.tools, else all) are through an attempt
to connect that is under way — starting or restarting — each waited for at most its
`timeout_s`; a failed server is not waited for. The tools of the servers ready then are
offered; those of a server that is down are known but unavailable — not offered to the model,
and a call of one is an error result that says why (`ToolRegistry.with_unavailable`). A tool
of a server that goes down later in the run stays offered, and its calls wait for the server
(tools/mcp.py). ListTools shows the unavailable tools with why. A server that has not
connected since behest started has told nothing of its tools: until it does, a run may name
any `<server>__<tool>` (`ToolNames`), and ListTools cannot show them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from behest.tools.mcp_source import ToolSource
from behest.tools.registry import MCP, ToolRegistry

SEPARATOR = "__"


class ToolNames(list[str]):
    """The names of the tools a run may name, sorted; `in` also takes any name of an MCP
    server whose tools are not known yet (`files__read` while `files` first starts)."""

    def __init__(self, names: Iterable[str], *, unlisted: Iterable[str] = ()) -> None:
        super().__init__(sorted(set(names)))
        self._known = frozenset(self)
        self.unlisted = tuple(f"{server}{SEPARATOR}" for server in unlisted)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return name in self._known or (len(name) > 0 and name.startswith(self.unlisted))

    def with_names(self, names: Iterable[str]) -> ToolNames:
        """These and `names` (a tenant's workers' tools)."""
        more = ToolNames([*self, *names])
        more.unlisted = self.unlisted
        return more


class ServerTools:
    """The server's registry and its MCP servers' tools, as they are now."""

    def __init__(self, registry: ToolRegistry, mcp: ToolSource) -> None:
        self.registry = registry
        self._mcp = mcp

    def now(self) -> ToolRegistry:
        """The registry a run or ListTools sees: the ready MCP servers' tools beside the
        server's own, and those of the servers that are down as unavailable."""
        servers = self._mcp.servers()
        if not servers:
            return self.registry
        ready = [t for s in servers if s.ready for t in s.tools]
        down = [(t, s.why) for s in servers if not s.ready for t in s.tools]
        return self.registry.with_tools(ready, source=MCP).with_unavailable(down, source=MCP)

    async def for_run(self, named: Sequence[str]) -> ToolRegistry:
        """`now()` for a run that may use `named` tools (() all of them), once the MCP servers
        of those tools that are starting or restarting are ready or have failed (each waited
        for at most its tools' timeout; a failed one is not waited for)."""
        servers = [s.name for s in self._mcp.servers()]
        if named:
            prefixes = {n.partition(SEPARATOR)[0] for n in named if SEPARATOR in n}
            servers = [name for name in servers if name in prefixes]
        if servers:
            await self._mcp.wait(servers)
        return self.now()

    def names(self) -> ToolNames:
        """The tools a run may name: the server's own and every MCP tool known (its server
        ready or not), and any of a server that has not listed its tools yet."""
        servers = self._mcp.servers()
        known = [t.name for s in servers for t in s.tools]
        unlisted = [s.name for s in servers if not s.listed]
        return ToolNames([*self.registry.names(), *known], unlisted=unlisted)
