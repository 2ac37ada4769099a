"""One MCP tool call on a connected client, and every way it can fail as the model sees it.

A server's own JSON-RPC errors are tool errors with its message, whatever their code: the
numbers the SDK uses for its own timeout and closed connection are ordinary ones a server may
send too, so those are told apart by how the SDK raises them (`_failure`), not by the number.
A call whose connection is lost fails at once, saying that behest restarts the server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import Client, MCPError

from behest.errors import describe
from behest.tools.base import ToolResult
from behest.tools.context import ToolContext
from behest.tools.mcp_elicit import InFlight
from behest.tools.mcp_framing import sendable
from behest.tools.mcp_progress import progress_callback
from behest.tools.mcp_tools import request_meta, result_text
from behest.tools.mcp_transport import Connection

LOST = "the connection to the server was lost"


@dataclass(frozen=True, slots=True)
class Calling:
    """What a call goes through: the server's name, its connected client and connection,
    and who asks its questions (tools/mcp_elicit.py)."""

    server: str
    timeout_s: float
    client: Client
    connection: Connection
    in_flight: InFlight


async def call_tool(
    calling: Calling,
    tool: str,
    arguments: dict[str, Any],
    context: ToolContext | None,
    remaining_s: float,
) -> ToolResult:
    """Call one MCP tool within `remaining_s`, its context in the request's `_meta`; every
    failure becomes an error result, never an exception."""
    if not sendable(arguments):
        return ToolResult(
            f"MCP tool {tool!r} was not called: its arguments hold text that is not valid "
            "Unicode (a lone surrogate escape such as \\ud800)",
            True,
        )
    connection = calling.connection
    try:
        async with asyncio.timeout(remaining_s):
            with calling.in_flight.serving(context):
                result = await calling.client.call_tool(
                    tool,
                    arguments,
                    read_timeout_seconds=remaining_s,
                    progress_callback=progress_callback(context),
                    meta=request_meta(context),
                )
    except TimeoutError:
        return timed_out(calling, tool)
    except MCPError as exc:
        return _failure(calling, tool, exc)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
        connection.end(f"the connection failed: {describe(exc)}")
        return lost(calling, tool)
    except Exception as exc:  # a bad answer is the model's to react to, not the run's
        return ToolResult(f"MCP tool {tool!r} failed: {describe(exc)}", True)
    return ToolResult(result_text(result), result.is_error)


def _failure(calling: Calling, tool: str, exc: MCPError) -> ToolResult:
    """An MCPError as the model sees it. The SDK raises its own read timeout while handling
    the TimeoutError that ended the wait, and its "connection closed" once the stream it
    reads has ended (which the connection knows) or while handling a failed write; any
    other MCPError is the server's own answer."""
    if isinstance(exc.__context__, TimeoutError):
        return timed_out(calling, tool)
    write_failed = isinstance(
        exc.__context__, anyio.ClosedResourceError | anyio.BrokenResourceError
    )
    if calling.connection.ended.is_set() or write_failed:
        calling.connection.end()  # the owner task reconnects
        return lost(calling, tool)
    return ToolResult(f"MCP tool {tool!r} failed: {exc.message}", True)


def lost(calling: Calling, tool: str) -> ToolResult:
    return ToolResult(
        f"MCP tool {tool!r} failed: {calling.connection.cause or LOST}; behest is restarting "
        f"MCP server {calling.server!r}",
        True,
    )


def timed_out(calling: Calling, tool: str) -> ToolResult:
    return ToolResult(f"MCP tool {tool!r} timed out after {calling.timeout_s:g} s", True)
