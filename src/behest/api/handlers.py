"""Builds grpc.aio method handlers from the service descriptors, around thin servicers.

Every handler gets the same edges: requests that do not decode → INVALID_ARGUMENT (not
UNKNOWN with a class name); the tenant's admission (request size, open streams:
api/admission.py); domain errors → their status (api/status.py); anything else → INTERNAL
with a trace id, logged, never with a stack trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor, message_factory
from google.protobuf.message import DecodeError

from behest.api.admission import Admission
from behest.api.auth import current_caller
from behest.api.status import status_of
from behest.errors import BehestError, InvalidArgument
from behest.observability.metrics import Attributes, Metrics
from behest.observability.telemetry import current, failed, tracer
from behest.observability.trace_context import (
    context_from_traceparent,
    current_trace_ids,
    traceparent_in,
)

log = logging.getLogger(__name__)

# Status messages are cut to this (the whole header block must stay under 8 KiB by default).
MAX_STATUS_MESSAGE_CHARS = 2000


# How long, and for how many messages, a refused stream reads what its caller still sends.
DRAIN_S, DRAIN_MESSAGES = 1.0, 1000


@dataclass(frozen=True, slots=True)
class _Undecodable:
    type_name: str
    reason: str


@dataclass(frozen=True, slots=True)
class GuardedMethod:
    """One RPC of a service with every edge applied: what each door (gRPC here, Connect and
    gRPC-Web in doors/connect.py) calls, so no door has an implementation of its own."""

    name: str
    descriptor: descriptor.MethodDescriptor
    request_cls: Any
    response_cls: Any
    handler: Callable[..., Any]  # (request or requests, context) → response or stream


def guarded_methods(
    service: descriptor.ServiceDescriptor, servicer: object, admission: Admission
) -> list[GuardedMethod]:
    """The methods of `service`, each calling the servicer method of the same name."""
    methods = []
    for method in service.methods:
        fn = getattr(servicer, method.name)
        if method.client_streaming and method.server_streaming:
            handler = _guard_bidi(fn, admission)
        elif method.server_streaming:
            handler = _guard_stream(fn, admission, method.name)
        else:
            handler = _guard_unary(fn, admission)
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        methods.append(GuardedMethod(method.name, method, request_cls, response_cls, handler))
    return methods


def generic_handler(service_name: str, methods: list[GuardedMethod]) -> grpc.GenericRpcHandler:
    """The gRPC handlers of one service's guarded methods."""
    handlers = {}
    for method in methods:
        deserialize = _lenient(method.request_cls)
        serialize = method.response_cls.SerializeToString
        if method.descriptor.client_streaming and method.descriptor.server_streaming:
            make = grpc.stream_stream_rpc_method_handler
        elif method.descriptor.server_streaming:
            make = grpc.unary_stream_rpc_method_handler
        else:
            make = grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(
            method.handler, request_deserializer=deserialize, response_serializer=serialize
        )
    return grpc.method_handlers_generic_handler(service_name, handlers)


def _lenient(cls: Any) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return _Undecodable(cls.DESCRIPTOR.full_name, str(exc) or "malformed bytes")

    return deserialize


@contextlib.asynccontextmanager
async def _status_on_error(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    """The one place errors become statuses: domain errors by the table, others INTERNAL."""
    try:
        yield
    except BehestError as exc:
        await context.abort(status_of(exc), _bounded(str(exc)))
    except grpc.aio.AbortError:
        raise
    except Exception:
        await _abort_internal(context)


def _bounded(message: str) -> str:
    """A status message short enough for its header (gRPC refuses a call whose trailers
    exceed its metadata limit, and the client would see RESOURCE_EXHAUSTED instead)."""
    if len(message) <= MAX_STATUS_MESSAGE_CHARS:
        return message
    return message[: MAX_STATUS_MESSAGE_CHARS - 1] + "…"


def _guard_unary(fn: Callable[..., Any], admission: Admission) -> Callable[..., Any]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _reject_undecodable(request, context)
        async with _status_on_error(context):
            admission.check_size(current_caller().tenant, request)
            return await fn(request, context)

    return handle


def _guard_stream(
    fn: Callable[..., AsyncIterator[Any]], admission: Admission, method: str
) -> Callable[..., Any]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        began = time.perf_counter()
        await _reject_undecodable(request, context)
        async with _status_on_error(context):
            tenant = current_caller().tenant
            admission.check_size(tenant, request)
            metrics = current().metrics
            attributes = metrics.attrs("method", method)
            with admission.stream(tenant), _open_stream(metrics, attributes):
                first = True
                async for item in fn(request, context):
                    if first:  # behest_stream_first_event: from the call's start
                        first = False
                        metrics.first_event.record(time.perf_counter() - began, attributes)
                    yield item

    return handle


def _guard_bidi(fn: Callable[..., AsyncIterator[Any]], admission: Admission) -> Callable[..., Any]:
    """A stream both ways (a worker's): each message the caller sends decoded and bounded
    like a request; its own limits (workers per tenant) instead of the stream slots.

    A refusal is sent once the caller has finished sending (or after DRAIN_S): grpc's asyncio
    client reports a status that comes while it still writes as INTERNAL "Internal error from
    Core" (grpc/grpc#36066), not as the status the server sent."""

    async def handle(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        tenant = current_caller().tenant

        async def checked() -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, _Undecodable):
                    raise InvalidArgument(
                        f"a message is not a valid {request.type_name} ({request.reason})"
                    )
                admission.check_size(tenant, request)
                yield request

        async with _status_on_error(context):
            try:
                async for item in fn(checked(), context):
                    yield item
            except BehestError:
                await _drain(requests)
                raise

    return handle


async def _drain(requests: AsyncIterator[Any]) -> None:
    """Read what the caller still sends, for at most DRAIN_S and DRAIN_MESSAGES."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_S):
            count = 0
            async for _ in requests:
                count += 1
                if count >= DRAIN_MESSAGES:
                    return


@contextlib.contextmanager
def _open_stream(metrics: Metrics, attributes: Attributes) -> Iterator[None]:
    """Count the stream in behest_open_streams while it is open."""
    metrics.open_streams.add(1, attributes)
    try:
        yield
    finally:
        metrics.open_streams.add(-1, attributes)


async def _reject_undecodable(request: Any, context: grpc.aio.ServicerContext) -> None:
    if isinstance(request, _Undecodable):
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the request is not a valid {request.type_name} message ({request.reason})",
        )


async def _abort_internal(context: grpc.aio.ServicerContext) -> None:
    """INTERNAL with the id of a trace that holds the error (the client's, if it sent one)."""
    parent = context_from_traceparent(traceparent_in(context.invocation_metadata() or ()))
    with tracer().start_as_current_span("behest.rpc.error", context=parent) as span:
        # Its type only: the exception's text or stack may quote anything (the log has them).
        failed(span, sys.exc_info()[1] or RuntimeError("unknown"))
        trace_id, _ = current_trace_ids()
        log.exception("unexpected error in RPC", extra={"trace_id": trace_id})
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error (trace id {trace_id})")
