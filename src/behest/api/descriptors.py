"""The proto files reflection serves: agent.v1's with their comments, health's and reflection's.

`make proto` (scripts/gen_protos.py) writes `behest/_proto/descriptors.binpb`, a
FileDescriptorSet of proto/ and its imports with source info, which is what lets `grpcurl
describe` show the protos' comments (the stubs' descriptors have none); without its source info
each file is exactly the stub's (tests/e2e/test_reflection.py). The files of grpc.health.v1
and grpc.reflection.v1alpha come from the libraries' stubs (they have no comments), and
grpc.reflection.v1's is made from v1alpha's (`reflection_v1`).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

DESCRIPTOR_SET = "descriptors.binpb"  # in the package behest._proto
REFLECTION_V1_FILE = "grpc/reflection/v1/reflection.proto"


def served_files() -> list[descriptor_pb2.FileDescriptorProto]:
    """Every file reflection serves, each after the files it imports."""
    data = resources.files("behest._proto").joinpath(DESCRIPTOR_SET).read_bytes()
    files = list(descriptor_pb2.FileDescriptorSet.FromString(data).file)
    alpha = _file_of(reflection_pb2.DESCRIPTOR)
    return [*files, _file_of(health_pb2.DESCRIPTOR), alpha, reflection_v1(alpha)]


def reflection_v1(alpha: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """grpc.reflection.v1's file, made from v1alpha's: v1 (grpc/grpc-proto) has the same
    messages with the same fields, numbers and types under another package, and a package
    never goes on the wire, so the one servicer answers both with v1alpha's messages
    (api/reflection.py). Only the names and file options change here."""
    v1 = descriptor_pb2.FileDescriptorProto()
    v1.CopyFrom(alpha)
    v1.name, v1.package = REFLECTION_V1_FILE, "grpc.reflection.v1"
    old, new = f".{alpha.package}.", ".grpc.reflection.v1."
    for message in v1.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(old, new)
    for service in v1.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    v1.options.Clear()  # v1alpha's say it is deprecated
    v1.options.java_multiple_files = True
    v1.options.java_package = "io.grpc.reflection.v1"
    v1.options.java_outer_classname = "ServerReflectionProto"
    v1.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    return v1


def _file_of(file: descriptor.FileDescriptor) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto


class Descriptors:
    """Finds files by name, symbol or extension; answers each with the file and every file it
    imports, as stored (so with their comments: the pool's own copies would drop them)."""

    def __init__(self, files: Iterable[descriptor_pb2.FileDescriptorProto]) -> None:
        self.pool = descriptor_pool.DescriptorPool()
        self._stored: dict[str, bytes] = {}
        for file in files:
            self.pool.Add(file)
            self._stored[file.name] = file.SerializeToString(deterministic=True)

    def by_filename(self, name: str) -> list[bytes] | None:
        try:
            return self._with_imports(self.pool.FindFileByName(name))
        except KeyError:
            return None

    def by_symbol(self, name: str) -> list[bytes] | None:
        """A message, enum, service, field, … by its full name, or a method: the pool knows
        no methods by name, so `pkg.Service.Method` is found through its service."""
        try:
            return self._with_imports(self.pool.FindFileContainingSymbol(name))
        except KeyError:
            pass
        service_name, _, method = name.rpartition(".")
        try:
            service = self.pool.FindServiceByName(service_name)
        except KeyError:
            return None
        if method not in service.methods_by_name:
            return None
        return self._with_imports(service.file)

    def by_extension(self, containing_type: str, number: int) -> list[bytes] | None:
        try:
            message = self.pool.FindMessageTypeByName(containing_type)
            extension = self.pool.FindExtensionByNumber(message, number)
            file = self.pool.FindFileContainingSymbol(extension.full_name)
        except KeyError:
            return None
        return self._with_imports(file)

    def extension_numbers(self, containing_type: str) -> tuple[str, list[int]] | None:
        try:
            message = self.pool.FindMessageTypeByName(containing_type)
        except KeyError:
            return None
        numbers = sorted(e.number for e in self.pool.FindAllExtensions(message))
        return message.full_name, numbers

    def _with_imports(self, file: descriptor.FileDescriptor) -> list[bytes]:
        """The file first, then each file it imports, directly or not, once."""
        seen: dict[str, bytes] = {}
        pending = [file]
        while pending:
            current = pending.pop()
            if current.name not in seen:
                seen[current.name] = self._stored[current.name]
                pending.extend(current.dependencies)
        return list(seen.values())
