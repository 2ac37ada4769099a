"""Reflection and health as outside tools use them, against a fresh server on an ephemeral port.

Two reflection versions, two kinds of client. grpcurl 1.8.6 (the pinned one) speaks reflection
v1alpha only. Reflection v1 is spoken by a Python client whose messages protoc compiles here
from the v1 proto written below (grpc/grpc-proto's, without its comments): it does not depend
on the server's own v1 descriptor, which the server derives from v1alpha's. v1alpha is also
spoken by a Python client with grpcio-reflection's messages.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection_pb2 as alpha
from grpc_tools import protoc

from behest._proto.agent.v1 import (
    agent_pb2,
    catalog_pb2,
    common_pb2,
    execution_pb2,
    run_pb2,
    session_pb2,
    worker_pb2,
)
from tests.e2e.test_grpcurl import GRPCURL, grpcurl
from tests.support import Server, fast_settings, start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
PROTOS = sorted((ROOT / "proto" / "agent" / "v1").glob("*.proto"))
STUBS = (agent_pb2, catalog_pb2, common_pb2, execution_pb2, run_pb2, session_pb2, worker_pb2)
OTHER_SERVICES = (
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
)
V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
V1ALPHA = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]
# grpcurls at once (two noisy cores).
CONCURRENT = 4

REFLECTION_V1_PROTO = """
syntax = "proto3";
package grpc.reflection.v1;
service ServerReflection {
  rpc ServerReflectionInfo(stream ServerReflectionRequest)
      returns (stream ServerReflectionResponse);
}
message ServerReflectionRequest {
  string host = 1;
  oneof message_request {
    string file_by_filename = 3;
    string file_containing_symbol = 4;
    ExtensionRequest file_containing_extension = 5;
    string all_extension_numbers_of_type = 6;
    string list_services = 7;
  }
}
message ExtensionRequest {
  string containing_type = 1;
  int32 extension_number = 2;
}
message ServerReflectionResponse {
  string valid_host = 1;
  ServerReflectionRequest original_request = 2;
  oneof message_response {
    FileDescriptorResponse file_descriptor_response = 4;
    ExtensionNumberResponse all_extension_numbers_response = 5;
    ListServiceResponse list_services_response = 6;
    ErrorResponse error_response = 7;
  }
}
message FileDescriptorResponse { repeated bytes file_descriptor_proto = 1; }
message ExtensionNumberResponse {
  string base_type_name = 1;
  repeated int32 extension_number = 2;
}
message ListServiceResponse { repeated ServiceResponse service = 1; }
message ServiceResponse { string name = 1; }
message ErrorResponse {
  int32 error_code = 1;
  string error_message = 2;
}
"""


# --- the protos' own words ---------------------------------------------------------------------


def commented(kind: str) -> Iterator[tuple[str, str, list[str]]]:
    """(service, name, comment lines) of each `service` or `rpc` in proto/agent/v1, read from
    the proto text itself: the `//` lines right above it."""
    for path in PROTOS:
        service, comment = "", []
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith("//"):
                comment.append(stripped)
                continue
            if match := re.match(r"service (\w+) \{", stripped):
                service = match.group(1)
                if kind == "service":
                    yield service, service, comment
            elif (match := re.match(r"rpc (\w+)\(", stripped)) and kind == "rpc":
                yield service, match.group(1), comment
            comment = []


def agent_services() -> list[str]:
    return sorted(f"agent.v1.{service}" for service, _, _ in commented("service"))


# --- reflection clients ------------------------------------------------------------------------


def v1_messages(directory: Path) -> tuple[Any, Any, descriptor.FileDescriptor]:
    """v1's request and response classes and file, compiled from REFLECTION_V1_PROTO."""
    directory.mkdir()
    (directory / "reflection.proto").write_text(REFLECTION_V1_PROTO)
    out = directory / "v1.binpb"
    assert (
        protoc.main(["protoc", f"-I{directory}", f"--descriptor_set_out={out}", "reflection.proto"])
        == 0
    )
    [file] = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    request = pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionRequest")
    response = pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionResponse")
    return (
        message_factory.GetMessageClass(request),
        message_factory.GetMessageClass(response),
        request.file,
    )


class Reflection:
    """One reflection version's client: sends requests on one stream, reads their answers."""

    def __init__(self, channel: grpc.aio.Channel, path: str, request: Any, response: Any) -> None:
        self._call = channel.stream_stream(
            path,
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
        self.request = request

    async def ask(self, *requests: dict[str, Any]) -> list[Any]:
        call = self._call(iter([self.request(**r) for r in requests]), timeout=30)
        answers = [answer async for answer in call]
        assert len(answers) == len(requests)
        return answers


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    running = await start_server(fast_settings(tmp_path / "data"))
    try:
        yield running
    finally:
        await stop_server(running)


@pytest.fixture
def clients(server: Server, tmp_path: Path) -> dict[str, Reflection]:
    request, response, _ = v1_messages(tmp_path / "v1")
    return {
        "v1": Reflection(server.channel, V1, request, response),
        "v1alpha": Reflection(
            server.channel, V1ALPHA, alpha.ServerReflectionRequest, alpha.ServerReflectionResponse
        ),
    }


def symbols() -> dict[str, str]:
    """Every message, enum, service and method of the stubs, with the file it is in."""
    found: dict[str, str] = {}
    for stub in STUBS:
        file = stub.DESCRIPTOR
        pending = list(file.message_types_by_name.values())
        while pending:
            message = pending.pop()
            found[message.full_name] = file.name
            pending.extend(message.nested_types)
            found.update((e.full_name, file.name) for e in message.enum_types)
        found.update((e.full_name, file.name) for e in file.enum_types_by_name.values())
        for service in file.services_by_name.values():
            found[service.full_name] = file.name
            found.update((m.full_name, file.name) for m in service.methods)
    return found


def without_comments(data: bytes) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto.FromString(data)
    file.ClearField("source_code_info")
    return file


# --- grpcurl (v1alpha) ---------------------------------------------------------------------------


async def test_grpcurl_lists_every_service(server: Server) -> None:
    result = await grpcurl([str(GRPCURL), "-plaintext", server.address, "list"])
    assert result.code == 0, result.stderr
    assert result.stdout.split() == sorted([*agent_services(), *OTHER_SERVICES])


async def test_grpcurl_describes_every_service_and_method_with_its_comment(
    server: Server,
) -> None:
    wanted = {f"agent.v1.{name}": ("service", comment) for _, name, comment in commented("service")}
    wanted.update(
        (f"agent.v1.{service}.{name}", ("method", comment))
        for service, name, comment in commented("rpc")
    )
    for name in ("grpc.health.v1.Health.Check", "grpc.health.v1.Health.List"):
        wanted[name] = ("method", [])
    for version in ("v1", "v1alpha"):
        wanted[f"grpc.reflection.{version}.ServerReflection.ServerReflectionInfo"] = ("method", [])
    wanted.update((name, ("service", [])) for name in OTHER_SERVICES)
    assert sum(kind == "method" for kind, _ in wanted.values()) > 40
    gate = asyncio.Semaphore(CONCURRENT)

    async def describe(symbol: str) -> tuple[str, Any]:
        async with gate:
            argv = [str(GRPCURL), "-plaintext", server.address, "describe", symbol]
            return symbol, await grpcurl(argv)

    for symbol, result in await asyncio.gather(*(describe(s) for s in wanted)):
        kind, comment = wanted[symbol]
        assert result.code == 0, f"{symbol}: {result.stderr}"
        assert f"{symbol} is a {kind}:" in result.stdout, result.stdout
        for line in comment:
            assert line in result.stdout, f"{symbol}: {line!r} not in\n{result.stdout}"


async def test_grpcurl_describes_a_message_and_its_fields_with_comments(server: Server) -> None:
    argv = [str(GRPCURL), "-plaintext", server.address, "describe", "agent.v1.CreateRunRequest"]
    result = await grpcurl(argv)
    assert result.code == 0, result.stderr
    assert "// Starts one turn of the agent loop on a (new or existing) session." in result.stdout
    assert re.search(
        r"// Empty: a new session is created.*\n\s*string session_id = 1;", result.stdout
    )
    field = await grpcurl([*argv[:-1], "agent.v1.AgentEvent.sequence"])
    assert field.code == 0, field.stderr
    assert "agent.v1.AgentEvent.sequence is a field:" in field.stdout


async def test_grpcurl_names_a_symbol_that_does_not_exist(server: Server) -> None:
    argv = [str(GRPCURL), "-plaintext", server.address, "describe", "agent.v1.RunService.Nope"]
    result = await grpcurl(argv)
    assert result.code == 1
    assert "Symbol not found: agent.v1.RunService.Nope" in result.stderr


# --- both versions, from Python ----------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_every_symbol_is_found_in_its_file_served_with_comments(
    clients: dict[str, Reflection], version: str
) -> None:
    found = symbols()
    answers = await clients[version].ask(*({"file_containing_symbol": s} for s in found))
    served: dict[str, bytes] = {}
    for (symbol, file_name), answer in zip(found.items(), answers, strict=True):
        assert answer.WhichOneof("message_response") == "file_descriptor_response", (symbol, answer)
        files = answer.file_descriptor_response.file_descriptor_proto
        first = descriptor_pb2.FileDescriptorProto.FromString(files[0])
        assert first.name == file_name, symbol
        served.update((descriptor_pb2.FileDescriptorProto.FromString(f).name, f) for f in files)
    for stub in STUBS:
        data = served[stub.DESCRIPTOR.name]
        # The stub's descriptor exactly, and the proto's comments besides.
        assert without_comments(data) == descriptor_pb2.FileDescriptorProto.FromString(
            stub.DESCRIPTOR.serialized_pb
        )
        locations = descriptor_pb2.FileDescriptorProto.FromString(data).source_code_info.location
        assert any(location.leading_comments for location in locations), stub.DESCRIPTOR.name


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_lists_services_and_answers_unknown_names_plainly(
    clients: dict[str, Reflection], version: str
) -> None:
    listed, symbol, file, empty = await clients[version].ask(
        {"list_services": ""},
        {"file_containing_symbol": "agent.v1.Nope"},
        {"file_by_filename": "agent/v1/nope.proto"},
        {},
    )
    names = [s.name for s in listed.list_services_response.service]
    assert names == sorted([*agent_services(), *OTHER_SERVICES])
    assert (symbol.error_response.error_code, symbol.error_response.error_message) == (
        NOT_FOUND,
        'no symbol "agent.v1.Nope"',
    )
    assert file.error_response.error_message == 'no file "agent/v1/nope.proto"'
    assert empty.error_response.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert empty.error_response.error_message.startswith("set one of file_by_filename, ")


async def test_the_served_v1_descriptor_is_v1s(
    clients: dict[str, Reflection], tmp_path: Path
) -> None:
    _, _, compiled = v1_messages(tmp_path / "again")
    [answer] = await clients["v1"].ask(
        {"file_containing_symbol": "grpc.reflection.v1.ServerReflection"}
    )
    [data] = answer.file_descriptor_response.file_descriptor_proto
    served = descriptor_pb2.FileDescriptorProto.FromString(data)
    expected = descriptor_pb2.FileDescriptorProto()
    compiled.CopyToProto(expected)
    assert served.package == expected.package == "grpc.reflection.v1"
    assert list(served.service) == list(expected.service)

    def shape(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
        return {
            m.name: [
                (f.name, f.number, f.type, f.label, f.type_name, f.HasField("oneof_index"))
                for f in m.field
            ]
            for m in file.message_type
        }

    assert shape(served) == shape(expected)
