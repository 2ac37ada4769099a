"""What the AG-UI door reads through the guarded methods: the calls themselves, for one
request's caller (`Calls`), and a thread's stored messages (`History`): compared with the
input's, looked up for tool results, restated as a MESSAGES_SNAPSHOT."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    ImagePart,
    MessagesSnapshotEvent,
    TextPart,
    ToolCall,
    ToolMessage,
    UrlSource,
    UserMessage,
)
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf import json_format

from behest.api.handlers import GuardedMethod
from behest.domain.callers import Caller
from behest.doors.agui_input import Turn, stored_turn
from behest.doors.agui_wire import text_of
from behest.doors.calls import call_stream, call_unary
from behest.errors import InvalidArgument

RUNS, SESSIONS = "agent.v1.RunService", "agent.v1.SessionService"
PAGE = 1000  # ListSessionMessages' largest page


class Calls:
    """The guarded methods the door calls, each as `caller`, with the request's headers."""

    def __init__(
        self,
        services: Mapping[str, list[GuardedMethod]],
        caller: Caller,
        headers: Iterable[tuple[str, str]],
    ) -> None:
        self._methods = {
            f"{service}/{m.name}": m for service in (RUNS, SESSIONS) for m in services[service]
        }
        self._caller = caller
        self._headers = list(headers)

    async def unary(self, name: str, fields: Mapping[str, Any]) -> Any:
        method = self._methods[name]
        return await call_unary(method, _message(method, fields), self._caller, self._headers)

    def stream(self, name: str, fields: Mapping[str, Any]) -> AsyncIterator[Any]:
        method = self._methods[name]
        return call_stream(method, _message(method, fields), self._caller, self._headers)


def _message(method: GuardedMethod, fields: Mapping[str, Any]) -> Any:
    """A request from its proto JSON (a field it does not have is refused by name)."""
    try:
        return json_format.ParseDict(dict(fields), method.request_cls())
    except json_format.ParseError as exc:
        name = method.request_cls.DESCRIPTOR.full_name
        raise InvalidArgument(f"not a valid {name} (forwardedProps.behest?): {exc}") from None


class History:
    """A thread's stored messages (its session's transcript), read as far as needed."""

    def __init__(self, calls: Calls, session_id: str) -> None:
        self._calls = calls
        self.session_id = session_id
        self.exists = False
        self.messages: list[Any] = []  # agent.v1.Message, in position order
        self._next = 0

    async def load(self) -> None:
        """Everything stored so far; `exists` False when the caller has no such session."""
        try:
            await self._more()
        except ConnectError as exc:
            if exc.code != Code.NOT_FOUND:
                raise
            return
        self.exists = True

    def turns(self) -> list[Turn]:
        return [turn for m in self.messages if (turn := stored_turn(m)) is not None]

    async def find(self, message_id: str) -> Any | None:
        """A stored message by id, reading on past what was loaded if need be."""
        while True:
            for message in reversed(self.messages):
                if message.id == message_id:
                    return message
            if not await self._more():
                return None

    async def snapshot(self, kept: Sequence[Any]) -> MessagesSnapshotEvent:
        """The thread as a MESSAGES_SNAPSHOT: the client's own system and developer messages
        (`kept`) first, then the stored conversation (behest's own system messages left
        out; inline images and files are never sent back, images by URL are)."""
        await self._more()
        stored = [m for m in (restated(s) for s in self.messages) if m is not None]
        return MessagesSnapshotEvent(messages=[*kept, *stored])

    async def _more(self) -> bool:
        """Read the messages after those loaded; whether there were any."""
        found = False
        while True:
            page = await self._calls.unary(
                f"{SESSIONS}/ListSessionMessages",
                {"sessionId": self.session_id, "fromPosition": self._next, "limit": PAGE},
            )
            self.messages.extend(page.messages)
            found = found or bool(page.messages)
            self._next = page.next_position
            if not page.more:
                return found


def restated(message: Any) -> Any | None:
    """A stored message as an AG-UI message (None: behest's own system messages)."""
    text = text_of(message)
    match message.role:
        case "user":
            images = [
                ImagePart(source=UrlSource(value=p.image.url, mime_type=p.image.mime_type or None))
                for p in message.content
                if p.WhichOneof("content") == "image" and p.image.url
            ]
            content: Any = [TextPart(text=text), *images] if images else text
            return UserMessage(id=message.id, content=content)
        case "assistant":
            calls = [
                ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                for c in message.tool_calls
            ]
            return AssistantMessage(id=message.id, content=text or None, tool_calls=calls or None)
        case "tool":
            return ToolMessage(id=message.id, tool_call_id=message.tool_call_id, content=text)
        case _:
            return None
