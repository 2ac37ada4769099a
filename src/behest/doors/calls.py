"""A guarded method (api/handlers.py) called by an HTTP door for a caller: the few parts of
grpc's ServicerContext the methods read (the caller set for the task, the request's headers as
metadata), an abort turned into the Connect error of the same code, and a domain error a door
raises itself turned by the same table (api/status.py). The Connect door and the plain-HTTP
doors (server-sent events, AG-UI) call methods only through here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from behest.api.auth import act_as
from behest.api.handlers import GuardedMethod
from behest.api.status import status_of
from behest.domain.callers import Caller
from behest.errors import BehestError


class DoorAbort(grpc.aio.AbortError):
    """A handler's `context.abort(code, message)` on an HTTP door: its status, not yet sent."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def connect_error(code: grpc.StatusCode, message: str) -> ConnectError:
    """The Connect error of a gRPC status (the codes are the same but for one spelling)."""
    name = "CANCELED" if code == grpc.StatusCode.CANCELLED else code.name
    return ConnectError(Code[name], message)


class DoorContext:
    """What a guarded method reads of its call (grpc.aio.ServicerContext's few methods)."""

    def __init__(self, headers: Iterable[tuple[str, str]]) -> None:
        self._metadata = tuple((name.lower(), value) for name, value in headers)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise DoorAbort(code, details)


def refusal(error: BehestError) -> ConnectError:
    """A domain error raised outside a guarded method (a door's own check of its caller), by
    the same table (api/status.py)."""
    return connect_error(status_of(error), str(error))


async def call_unary(
    method: GuardedMethod, request: Any, caller: Caller, headers: Iterable[tuple[str, str]]
) -> Any:
    """One guarded unary method for `caller`; a refusal raises ConnectError."""
    act_as(caller)
    try:
        return await method.handler(request, DoorContext(headers))
    except DoorAbort as abort:
        raise connect_error(abort.code, abort.message) from None


def call_stream(
    method: GuardedMethod, request: Any, caller: Caller, headers: Iterable[tuple[str, str]]
) -> AsyncIterator[Any]:
    """One guarded server-streaming method for `caller`; a refusal raises ConnectError.

    The caller is set at once, in the calling task, so that every task the stream is read in
    later (with_heartbeats' reader) starts with it."""
    act_as(caller)
    return _guarded_items(method.handler(request, DoorContext(headers)))


async def _guarded_items(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    try:
        async for item in stream:
            yield item
    except DoorAbort as abort:
        raise connect_error(abort.code, abort.message) from None
    finally:
        await close_stream(stream)


async def close_stream(stream: AsyncIterator[Any]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
