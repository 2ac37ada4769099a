"""Connect and gRPC-Web for every agent.v1 service, on the HTTP listener.

The protocols (framing, streaming, compression, timeouts, error bodies) are connectrpc's
ASGI application; the methods are api/'s guarded ones (api/handlers.py `guarded_methods`),
the same objects the gRPC server serves, called with a context that looks to them like
grpc's: the caller from the `Authorization` header, the request's headers as metadata, and an
abort that becomes the Connect error with the same code. Messages are google.protobuf's, the
same generated types (codecs below), JSON bounded like every input.

Unary and server-streaming RPCs only: WorkerService/Connect streams both ways, which HTTP/1.1
cannot carry; workers speak gRPC.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.request import RequestContext
from connectrpc.server import ConnectASGIApplication, Endpoint
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from behest.api.auth import Authenticator
from behest.api.handlers import GuardedMethod
from behest.domain.callers import Caller
from behest.doors.callers import caller_of
from behest.doors.calls import call_stream, call_unary, refusal
from behest.errors import Unauthenticated

# JSON objects nest at most this deep in a request (json_format's own limit is 100).
MAX_JSON_DEPTH = 64


class ProtoCodec:
    """Protocol Buffers binary, google.protobuf's messages."""

    def name(self) -> str:
        return "proto"

    def encode(self, message: Message) -> bytes:
        return message.SerializeToString()

    def decode(self, data: bytes | bytearray, message_class: Any) -> Any:
        try:
            return message_class.FromString(bytes(data))
        except DecodeError as exc:
            raise _not_valid(message_class, str(exc) or "malformed bytes") from None


class JsonCodec:
    """Protocol Buffers JSON (camelCase names, as Connect clients send and read them).

    A field the message does not have is refused by name rather than dropped, so a misspelt
    field is a clear INVALID_ARGUMENT and never a request quietly run without it."""

    def name(self) -> str:
        return "json"

    def encode(self, message: Message) -> bytes:
        as_dict = json_format.MessageToDict(message)
        return json.dumps(as_dict, ensure_ascii=False, separators=(",", ":")).encode()

    def decode(self, data: bytes | bytearray, message_class: Any) -> Any:
        message = message_class()
        try:
            json_format.Parse(bytes(data), message, max_recursion_depth=MAX_JSON_DEPTH)
        except json_format.ParseError as exc:
            raise _not_valid(message_class, _plain(str(exc))) from None
        except (UnicodeDecodeError, RecursionError):
            raise _not_valid(message_class, "not UTF-8 JSON, or nested too deep") from None
        return message


def _not_valid(message_class: Any, reason: str) -> ConnectError:
    name = message_class.DESCRIPTOR.full_name
    return ConnectError(Code.INVALID_ARGUMENT, f"the request is not a valid {name} ({reason})")


def _plain(reason: str) -> str:
    """json_format's message, without the internal 'Failed to parse' chains' repeats."""
    return " ".join(reason.replace("Failed to parse ", "").split())[:500]


class ConnectDoor(ConnectASGIApplication[Mapping[str, Any]]):
    """One ASGI application for every service: `/agent.v1.Service/Method` → its endpoint."""

    def __init__(
        self,
        services: Mapping[str, list[GuardedMethod]],
        authenticator: Authenticator,
        *,
        read_max_bytes: int,
    ) -> None:
        endpoints: dict[str, Any] = {
            f"/{service}/{method.name}": endpoint
            for service, methods in services.items()
            for method in methods
            if (endpoint := _endpoint(service, method, authenticator)) is not None
        }
        super().__init__(
            service=endpoints,
            endpoints=lambda found: found,
            read_max_bytes=read_max_bytes,
            codecs=[ProtoCodec(), JsonCodec()],
        )
        self.paths = frozenset(endpoints)

    @property
    def path(self) -> str:
        return "/agent.v1."


def _endpoint(service: str, method: GuardedMethod, authenticator: Authenticator) -> Any:
    """The Connect endpoint of one guarded method (None: one streaming both ways)."""
    if method.descriptor.client_streaming:
        return None
    streaming = method.descriptor.server_streaming
    info = MethodInfo(
        name=method.name,
        service_name=service,
        input=method.request_cls,
        output=method.response_cls,
        idempotency_level=IdempotencyLevel.UNKNOWN,
        stream_type=StreamType.SERVER_STREAM if streaming else StreamType.UNARY,
    )
    if streaming:
        return Endpoint.server_stream(info, _streaming(method, authenticator))
    return Endpoint.unary(info, _unary(method, authenticator))


def _caller(authenticator: Authenticator, headers: list[tuple[str, str]]) -> Caller:
    try:
        return caller_of(authenticator, headers)
    except Unauthenticated as exc:
        raise refusal(exc) from None


def _unary(method: GuardedMethod, authenticator: Authenticator) -> Callable[..., Any]:
    async def call(request: Any, ctx: RequestContext[Any, Any]) -> Any:
        headers = list(ctx.request_headers.allitems())
        return await call_unary(method, request, _caller(authenticator, headers), headers)

    return call


def _streaming(method: GuardedMethod, authenticator: Authenticator) -> Callable[..., Any]:
    async def call(request: Any, ctx: RequestContext[Any, Any]) -> AsyncIterator[Any]:
        headers = list(ctx.request_headers.allitems())
        caller = _caller(authenticator, headers)
        async for item in call_stream(method, request, caller, headers):
            yield item

    return call
