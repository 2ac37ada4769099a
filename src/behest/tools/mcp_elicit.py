"""MCP elicitation: a server's question during a tool call, put to the run's user.

behest advertises elicitation (form mode) to every MCP server. A server's `elicitation/create`
request is answered through the ToolContext of the call that asked (its `ask`: runs/asking.py,
a durable pause). Which call asked: the one whose task the SDK runs the callback in (a
multi-round-trip answer, SEP-2322), else the server's one call in flight. JSON-RPC does not
say which request a server's request belongs to, so with several calls in flight on one
server behest cannot tell, and refuses the question saying so (the server's tool decides what
that means); URL-mode questions are refused too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
)

from behest.domain.waits import ElicitAction
from behest.tools.context import ToolContext, current_tool_context

_ACTIONS: dict[ElicitAction, Literal["accept", "decline", "cancel"]] = {
    ElicitAction.ACCEPT: "accept",
    ElicitAction.DECLINE: "decline",
    ElicitAction.CANCEL: "cancel",
}


class InFlight:
    """The calls one MCP server is serving now, by execution."""

    def __init__(self, server: str) -> None:
        self._server = server
        self._calls: dict[str, ToolContext] = {}

    @contextlib.contextmanager
    def serving(self, context: ToolContext | None) -> Iterator[None]:
        """`context`'s call is in flight on the server inside the block."""
        if context is None:
            yield
            return
        self._calls[context.execution_id] = context
        try:
            yield
        finally:
            self._calls.pop(context.execution_id, None)

    def asker(self) -> ToolContext | ErrorData:
        """The call a question of the server belongs to, or why behest cannot tell."""
        mine = current_tool_context()
        if mine is not None and mine.execution_id in self._calls:
            return mine
        if len(self._calls) == 1:
            return next(iter(self._calls.values()))
        many = f"{len(self._calls)} calls are" if self._calls else "no call is"
        return ErrorData(
            code=INVALID_REQUEST,
            message=(
                f"behest cannot tell which call asked: {many} in flight on MCP server "
                f"{self._server!r} (ask during a call that runs alone)"
            ),
        )


def elicitation_callback(in_flight: InFlight) -> ElicitationFnT:
    """The SDK's callback for a server's questions: each put to the asking call's user."""

    async def elicit(
        context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        asker = in_flight.asker()
        if isinstance(asker, ErrorData):
            return asker
        if not isinstance(params, ElicitRequestFormParams):
            return ErrorData(
                code=INVALID_REQUEST, message="behest asks its users form questions only"
            )
        try:
            reply = await asker.ask(params.message, dict(params.requested_schema))
        except (ValueError, RuntimeError) as exc:
            return ErrorData(code=INVALID_PARAMS, message=str(exc))
        return ElicitResult(action=_ACTIONS[reply.action], content=reply.content)

    return elicit
