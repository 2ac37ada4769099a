"""An in-process OTLP receiver for tests: traces and metrics, over gRPC or HTTP, on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as metrics_pb
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as metrics_rpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as trace_rpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span


class OtlpReceiver:
    """Keeps every export request it is sent; `endpoint` is its base URL once started."""

    def __init__(self) -> None:
        self.traces: list[trace_pb.ExportTraceServiceRequest] = []
        self.metrics: list[metrics_pb.ExportMetricsServiceRequest] = []
        self.http_paths: list[str] = []
        self.endpoint = ""
        self._grpc: grpc.aio.Server | None = None
        self._http: asyncio.Server | None = None

    async def start_grpc(self) -> str:
        """Serve OTLP/gRPC (TraceService, MetricsService) on 127.0.0.1:0."""
        self._grpc = grpc.aio.server()
        trace_rpc.add_TraceServiceServicer_to_server(_Traces(self), self._grpc)
        metrics_rpc.add_MetricsServiceServicer_to_server(_Metrics(self), self._grpc)
        port = self._grpc.add_insecure_port("127.0.0.1:0")
        await self._grpc.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        return self.endpoint

    async def start_http(self) -> str:
        """Serve OTLP/HTTP with protobuf bodies (/v1/traces, /v1/metrics) on 127.0.0.1:0."""
        self._http = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        port = self._http.sockets[0].getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        return self.endpoint

    async def stop(self) -> None:
        if self._grpc is not None:
            await self._grpc.stop(0)
        if self._http is not None:
            self._http.close()
            await self._http.wait_closed()

    def spans(self) -> list[Span]:
        """Every span received, in order."""
        return [
            span
            for request in self.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def resource_attributes(self) -> dict[str, Any]:
        """The attributes of the first resource that sent spans."""
        return attributes(self.traces[0].resource_spans[0].resource)

    def metric(self, name: str) -> Metric | None:
        """The last data received of the metric `name`."""
        found = None
        for request in self.metrics:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if metric.name == name:
                            found = metric
        return found

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """HTTP/1.1 with keep-alive: one request after another until the client closes."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
                length = int({k.lower(): v for k, v in headers.items()}.get("content-length", 0))
                body = await reader.readexactly(length)
                reply = self._take(path, body)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                    + f"Content-Length: {len(reply)}\r\n\r\n".encode()
                    + reply
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _take(self, path: str, body: bytes) -> bytes:
        self.http_paths.append(path)
        if path == "/v1/traces":
            self.traces.append(trace_pb.ExportTraceServiceRequest.FromString(body))
            return trace_pb.ExportTraceServiceResponse().SerializeToString()
        self.metrics.append(metrics_pb.ExportMetricsServiceRequest.FromString(body))
        return metrics_pb.ExportMetricsServiceResponse().SerializeToString()


class _Traces(trace_rpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    async def Export(
        self, request: trace_pb.ExportTraceServiceRequest, context: Any
    ) -> trace_pb.ExportTraceServiceResponse:
        self._receiver.traces.append(request)
        return trace_pb.ExportTraceServiceResponse()


class _Metrics(metrics_rpc.MetricsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    async def Export(
        self, request: metrics_pb.ExportMetricsServiceRequest, context: Any
    ) -> metrics_pb.ExportMetricsServiceResponse:
        self._receiver.metrics.append(request)
        return metrics_pb.ExportMetricsServiceResponse()


def attributes(item: Any) -> dict[str, Any]:
    """A span's (or resource's) attributes as plain Python values."""
    return {kv.key: value(kv.value) for kv in item.attributes}


def value(any_value: AnyValue) -> Any:
    """An OTLP AnyValue as a plain Python value (arrays as tuples)."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None
