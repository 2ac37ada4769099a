"""grpc.health.v1.Health: grpcio-health-checking's servicer, with List and clear answers.

The library's asyncio servicer (1.85) has Check and Watch but not List, which its service
definition has (reflection offers it, and grpc's generated base answered UNIMPLEMENTED with a
Python class name); its Check of an unknown service is NOT_FOUND with no message; and a request
that does not decode was UNKNOWN with the decoder's class name. Here List answers every known
service's status, Check names the unknown service and the known ones, and an undecodable
request is INVALID_ARGUMENT. Watch is the library's.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2

SERVICE_NAME = health.SERVICE_NAME
# The service name quoted back in an error is cut to this many characters.
MAX_QUOTED_CHARS = 200
# An error message is cut to this (it goes in a header; api/handlers.py has the same bound).
MAX_MESSAGE_CHARS = 2000


class HealthServicer(health.aio.HealthServicer):  # type: ignore[misc]
    """The one health servicer: `set` and `enter_graceful_shutdown` are the library's."""

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        # The library keeps the statuses in `_server_status` (its own Check reads it there).
        status = self._server_status.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, self._unknown(request.service))
        return health_pb2.HealthCheckResponse(status=status)

    async def List(
        self, _request: health_pb2.HealthListRequest, _context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        """Every service health knows, "" (the server as a whole) included, with its status."""
        statuses = {
            name: health_pb2.HealthCheckResponse(status=status)
            for name, status in self._server_status.items()
        }
        return health_pb2.HealthListResponse(statuses=statuses)

    def _unknown(self, service: str) -> str:
        known = ", ".join(
            '"" (the server as a whole)' if name == "" else name
            for name in sorted(self._server_status)
        )
        message = f"health knows no service {_quoted(service)}; it knows {known}"
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 1] + "…"
        return message


def _quoted(name: str) -> str:
    if len(name) > MAX_QUOTED_CHARS:
        name = name[: MAX_QUOTED_CHARS - 1] + "…"
    return json.dumps(name, ensure_ascii=False)


def health_handler(servicer: HealthServicer) -> grpc.GenericRpcHandler:
    """grpc.health.v1.Health's methods, each request decoded here (not by grpc)."""

    def unary(method: Any, request_cls: Any) -> Any:
        async def handle(data: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await method(await _decoded(request_cls, data, context), context)

        return handle

    check = unary(servicer.Check, health_pb2.HealthCheckRequest)
    listed = unary(servicer.List, health_pb2.HealthListRequest)
    watch = unary(servicer.Watch, health_pb2.HealthCheckRequest)  # it writes to the context
    response = health_pb2.HealthCheckResponse.SerializeToString
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "Check": grpc.unary_unary_rpc_method_handler(check, response_serializer=response),
            "List": grpc.unary_unary_rpc_method_handler(
                listed, response_serializer=health_pb2.HealthListResponse.SerializeToString
            ),
            "Watch": grpc.unary_stream_rpc_method_handler(watch, response_serializer=response),
        },
    )


async def _decoded(cls: Any, data: bytes, context: grpc.aio.ServicerContext) -> Any:
    try:
        return cls.FromString(data)
    except DecodeError:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the request is not a valid {cls.DESCRIPTOR.full_name} message",
        )
