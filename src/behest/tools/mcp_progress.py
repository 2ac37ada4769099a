"""MCP progress: a server's progress notifications during a call, told to the call's run.

behest sends a progress token with every tools/call it makes for a run's call (the SDK's
`progress_callback`: the request's id is the token), so a server may say how far it got. Each
notification goes to the call's ToolContext.progress, which the run throttles into
tool_progress events (runs/tool_progress.py). The token names the request, so which call a
notification belongs to is never in doubt, however many calls are in flight.
"""

from __future__ import annotations

import math

from mcp.shared.dispatcher import ProgressFnT

from behest.tools.context import ToolContext


def progress_callback(context: ToolContext | None) -> ProgressFnT | None:
    """The SDK's callback for one call's progress notifications (None without a context:
    no token is sent)."""
    if context is None:
        return None

    async def told(progress: float, total: float | None, message: str | None) -> None:
        if not math.isfinite(progress) or (total is not None and not math.isfinite(total)):
            return  # a number JSON allows but progress cannot be (1e999)
        try:
            await context.progress(progress, total, message or "")
        except (RuntimeError, ValueError):
            return  # the call has ended: a late notification says nothing more

    return told
