"""gRPC server reflection, v1 and v1alpha, over the files of api/descriptors.py.

grpcio-reflection 1.85 serves v1alpha only, from a pool whose copies of the files lose their
comments, and it finds no method by name (`grpcurl describe pkg.Service.Method` said "Symbol not
found"). Its servicer is kept for what it does well (the list of services, the constructor) and
answers the file requests from `Descriptors`. Newer tools ask v1 first: v1's messages are
v1alpha's under another package (identical on the wire), so the same servicer is registered
under both service names with v1alpha's message classes. A request that does not decode, or
asks for nothing, is answered on the stream with an error (never a status with a class name).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_reflection.v1alpha import reflection_pb2 as pb
from grpc_reflection.v1alpha._base import BaseReflectionServicer

from behest.api.descriptors import Descriptors, served_files

V1ALPHA = "grpc.reflection.v1alpha.ServerReflection"
V1 = "grpc.reflection.v1.ServerReflection"
SERVICES = (V1, V1ALPHA)
# Names quoted back in errors are cut to this many characters.
MAX_QUOTED_CHARS = 200
ASKS = (
    "file_by_filename",
    "file_containing_symbol",
    "file_containing_extension",
    "all_extension_numbers_of_type",
    "list_services",
)


class _Undecodable:
    """What the deserializer gives for bytes that are not a ServerReflectionRequest."""


UNDECODABLE = _Undecodable()


class ReflectionServicer(BaseReflectionServicer):  # type: ignore[misc]
    def __init__(self, service_names: Iterable[str], descriptors: Descriptors) -> None:
        super().__init__(service_names, pool=descriptors.pool)
        self._descriptors = descriptors

    async def ServerReflectionInfo(
        self, requests: AsyncIterator[pb.ServerReflectionRequest | _Undecodable], _context: Any
    ) -> AsyncIterator[pb.ServerReflectionResponse]:
        async for request in requests:
            if isinstance(request, _Undecodable):
                yield _error(
                    pb.ServerReflectionRequest(),
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "a request is not a valid ServerReflectionRequest message",
                )
            else:
                yield self.answer(request)

    def answer(self, request: pb.ServerReflectionRequest) -> pb.ServerReflectionResponse:
        ask = request.WhichOneof("message_request")
        found: list[bytes] | None
        if ask == "list_services":
            return self._list_services(request)
        if ask == "file_by_filename":
            name = request.file_by_filename
            found, missing = self._descriptors.by_filename(name), f"no file {_quoted(name)}"
        elif ask == "file_containing_symbol":
            name = request.file_containing_symbol
            found, missing = self._descriptors.by_symbol(name), f"no symbol {_quoted(name)}"
        elif ask == "file_containing_extension":
            wanted = request.file_containing_extension
            number, of = wanted.extension_number, wanted.containing_type
            found = self._descriptors.by_extension(of, number)
            missing = f"no extension {number} of {_quoted(of)}"
        elif ask == "all_extension_numbers_of_type":
            return self._extension_numbers(request)
        else:
            return _error(
                request, grpc.StatusCode.INVALID_ARGUMENT, f"set one of {', '.join(ASKS)}"
            )
        if found is None:
            return _error(request, grpc.StatusCode.NOT_FOUND, missing)
        return pb.ServerReflectionResponse(
            original_request=request,
            file_descriptor_response=pb.FileDescriptorResponse(file_descriptor_proto=found),
        )

    def _extension_numbers(
        self, request: pb.ServerReflectionRequest
    ) -> pb.ServerReflectionResponse:
        name = request.all_extension_numbers_of_type
        found = self._descriptors.extension_numbers(name)
        if found is None:
            return _error(request, grpc.StatusCode.NOT_FOUND, f"no message {_quoted(name)}")
        full_name, numbers = found
        return pb.ServerReflectionResponse(
            original_request=request,
            all_extension_numbers_response=pb.ExtensionNumberResponse(
                base_type_name=full_name, extension_number=numbers
            ),
        )


def _error(
    request: pb.ServerReflectionRequest, code: grpc.StatusCode, message: str
) -> pb.ServerReflectionResponse:
    return pb.ServerReflectionResponse(
        original_request=request,
        error_response=pb.ErrorResponse(error_code=code.value[0], error_message=message),
    )


def _quoted(name: str) -> str:
    if len(name) > MAX_QUOTED_CHARS:
        name = name[: MAX_QUOTED_CHARS - 1] + "…"
    return json.dumps(name, ensure_ascii=False)


def _decode(data: bytes) -> pb.ServerReflectionRequest | _Undecodable:
    try:
        return pb.ServerReflectionRequest.FromString(data)
    except DecodeError:
        return UNDECODABLE


def reflection_handlers(service_names: Iterable[str]) -> list[grpc.GenericRpcHandler]:
    """Reflection v1 and v1alpha, listing `service_names` and themselves."""
    servicer = ReflectionServicer([*service_names, *SERVICES], Descriptors(served_files()))
    method = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=_decode,
        response_serializer=pb.ServerReflectionResponse.SerializeToString,
    )
    return [
        grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": method})
        for name in SERVICES
    ]
