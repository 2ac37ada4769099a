"""OpenTelemetry: each App's tracer and metrics, their exporters, trace context, ids for events.

An App has one `Telemetry`: spans go to an OTLP exporter (gRPC or HTTP, through a
BatchSpanProcessor) when an endpoint is set in the settings or by the standard
OTEL_EXPORTER_OTLP_* variables; metrics (metrics.py) to a Prometheus endpoint
(`metrics_listen`) and to OTLP when the endpoint is set. Nothing set: no exporter, no thread,
no network. The providers are the App's own, never the process-wide ones (those can be set
only once), so many servers in one process each export their own; the code below the App
finds its Telemetry in a context variable (`current`), bound for the server's RPCs and for
each run task. Spans of an App that exports nothing use the process's tracer (`setup`).

What spans carry: GenAI semantic-convention attributes, never an API key; message content
only with `trace_content`; errors by behest's own words (describe()), never a stack trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from wsgiref.simple_server import WSGIServer

from opentelemetry import trace
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Status, StatusCode

from behest import __version__
from behest.errors import BehestError, describe
from behest.observability.metrics import Metrics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from behest.observability.metrics_endpoint import Security

log = logging.getLogger(__name__)

_provider: TracerProvider | None = None
T = TypeVar("T")

GRPC = "grpc"
HTTP = "http/protobuf"
# How long stop() waits for buffered spans and metrics to be exported.
FLUSH_TIMEOUT_MS = 10_000


def setup() -> None:
    """Install a process-wide SDK tracer provider once, so spans get real ids (it exports
    nothing: an App that exports has its own provider)."""
    global _provider
    if _provider is None:
        _provider = TracerProvider()
        trace.set_tracer_provider(_provider)


@dataclass(frozen=True, slots=True, kw_only=True)
class Exporting:
    """Where an App's telemetry goes; unset values come from the OTEL_* environment."""

    otlp_endpoint: str = ""
    otlp_protocol: str = ""  # grpc | http/protobuf; "": OTEL_EXPORTER_OTLP_PROTOCOL or grpc
    metrics_listen: str = ""  # host:port of the Prometheus endpoint; "": none
    trace_content: bool = False
    instance: str = ""  # service.instance.id (the node id)


@dataclass(frozen=True, slots=True)
class _Target:
    """One signal's OTLP destination: endpoint None lets the exporter read the environment."""

    protocol: str
    endpoint: str | None


class Telemetry:
    """One App's tracer provider, meter provider, exporters and instruments."""

    def __init__(
        self, exporting: Exporting | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        """Builds providers only; `start` starts exporting (threads, sockets)."""
        self.exporting = exporting or Exporting()
        env = {} if environ is None else environ
        self.trace_content = self.exporting.trace_content
        self._traces = _target(self.exporting, env, "TRACES")
        self._metrics_otlp = _target(self.exporting, env, "METRICS")
        resource = _resource(self.exporting.instance) if self.exports else Resource.get_empty()
        self._tracer_provider: TracerProvider | None = None
        self.tracer: trace.Tracer = trace.get_tracer("behest")
        if self._traces is not None:
            self._tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            self.tracer = self._tracer_provider.get_tracer("behest", __version__)
        self._registry: CollectorRegistry | None = None
        self._meter_provider = self._meters(resource)
        meter = None if self._meter_provider is None else self._meter_provider.get_meter("behest")
        self.metrics = Metrics(meter)
        self.metrics_port = 0
        self._http: tuple[WSGIServer, threading.Thread] | None = None
        self._otlp_reader: PeriodicExportingMetricReader | None = None
        self._started = False
        self._stopped = False

    @property
    def exports(self) -> bool:
        """Whether anything leaves the process (OTLP or a Prometheus endpoint)."""
        return bool(self._traces or self._metrics_otlp or self.exporting.metrics_listen)

    @property
    def traces_to(self) -> str:
        """Where spans go, for the log: "" (nowhere), or the protocol and endpoint."""
        if self._traces is None:
            return ""
        return f"{self._traces.protocol} {self._traces.endpoint or '(from OTEL_* variables)'}"

    def _meters(self, resource: Resource) -> MeterProvider | None:
        """A meter provider when metrics go anywhere (Prometheus now, OTLP from `start`)."""
        if not (self.exporting.metrics_listen or self._metrics_otlp):
            return None
        readers = []
        if self.exporting.metrics_listen:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector

            self._registry = CollectorRegistry()
            ProcessCollector(registry=self._registry)
            GCCollector(registry=self._registry)
            readers.append(
                PrometheusMetricReader(registry=self._registry, scope_info_enabled=False)
            )
        return MeterProvider(
            readers,
            resource=resource,
            exemplar_filter=AlwaysOffExemplarFilter(),
            shutdown_on_exit=False,
        )

    def start(self, metrics_security: Security | None = None) -> None:
        """Start exporting: the OTLP span and metric exporters, the Prometheus endpoint
        (protected as `metrics_security` says: TLS, client certificates, a token check)."""
        if self._started:
            return
        self._started = True
        if self._tracer_provider is not None and self._traces is not None:
            exporter = _span_exporter(self._traces)
            self._tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        if self._meter_provider is not None and self._metrics_otlp is not None:
            reader = PeriodicExportingMetricReader(_metric_exporter(self._metrics_otlp))
            self._meter_provider.add_metric_reader(reader)
            self._otlp_reader = reader  # the provider flushes only readers it was made with
        if self._registry is not None:
            listen = self.exporting.metrics_listen
            host, port = _host_port(listen)
            from behest.observability import metrics_endpoint  # prometheus_client: on serving

            security = metrics_security or metrics_endpoint.Security()
            try:
                server, thread = metrics_endpoint.serve(self._registry, host, port, security)
            except OSError as exc:
                raise OSError(f"metrics_listen {listen!r}: {describe(exc)}") from None
            self._http = (server, thread)
            self.metrics_port = int(server.server_address[1])

    async def shutdown(self) -> None:
        """Export what is buffered and stop exporting. In a thread: an export blocks (and
        may be answered by something on this very event loop)."""
        if self._stopped:
            return
        self._stopped = True
        await asyncio.to_thread(self._shutdown_now)

    def _shutdown_now(self) -> None:
        if self._http is not None:
            server, thread = self._http
            self._http = None
            server.shutdown()
            server.server_close()
            thread.join()
        # A reader's shutdown collects and exports one last time.
        for done in (self._otlp_reader, self._tracer_provider, self._meter_provider):
            if done is None:
                continue
            try:
                if isinstance(done, TracerProvider):
                    done.force_flush(FLUSH_TIMEOUT_MS)
                done.shutdown()
            except Exception:
                log.warning("exporting the last telemetry failed", exc_info=True)

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` in a task that has this Telemetry bound, as will every task it makes
        (a gRPC server started there runs its RPCs in such tasks)."""

        async def bound() -> T:
            bind(self)
            return await work

        return await asyncio.create_task(bound())


def _target(exporting: Exporting, env: Mapping[str, str], signal: str) -> _Target | None:
    """The signal's OTLP destination: the settings' endpoint, else the OTEL_* variables."""
    if env.get(f"OTEL_{signal}_EXPORTER", "").strip().lower() == "none":
        return None
    protocol = (
        exporting.otlp_protocol
        or env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or GRPC
    ).strip()
    if protocol not in (GRPC, HTTP):
        raise ValueError(f"OTLP protocol {protocol!r}: behest speaks {GRPC} and {HTTP}")
    if exporting.otlp_endpoint:
        endpoint = exporting.otlp_endpoint
        if protocol == HTTP:  # a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is
            endpoint = f"{endpoint.rstrip('/')}/v1/{signal.lower()}"
        return _Target(protocol, endpoint)
    if env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return _Target(protocol, None)
    return None


def _span_exporter(target: _Target) -> SpanExporter:
    if target.protocol == HTTP:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=target.endpoint)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcSpanExporter,
    )

    return GrpcSpanExporter(endpoint=target.endpoint)


def _metric_exporter(target: _Target) -> MetricExporter:
    if target.protocol == HTTP:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=target.endpoint)
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter as GrpcMetricExporter,
    )

    return GrpcMetricExporter(endpoint=target.endpoint)


def _resource(instance: str) -> Resource:
    """service.name behest and service.version behest's, unless OTEL_SERVICE_NAME or
    OTEL_RESOURCE_ATTRIBUTES say otherwise; service.instance.id the node id, always: the
    SDK's own detector gives each process a random UUID, which no log line or stored run
    names (BEHEST_NODE_ID chooses it)."""
    resource = Resource({"service.version": __version__}).merge(Resource.create())
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "behest"}))
    if instance:
        resource = resource.merge(Resource({"service.instance.id": instance}))
    return resource


def _host_port(listen: str) -> tuple[str, int]:
    """("127.0.0.1", 9464) of "127.0.0.1:9464" (IPv6 hosts in brackets)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


_DEFAULT = Telemetry()
_current: contextvars.ContextVar[Telemetry] = contextvars.ContextVar("behest_telemetry")


def current() -> Telemetry:
    """The Telemetry of the App this code runs for (a no-op one outside any App)."""
    return _current.get(_DEFAULT)


def bind(telemetry: Telemetry) -> None:
    """Make `telemetry` current in this task (and the tasks it makes from now on)."""
    _current.set(telemetry)


def tracer() -> trace.Tracer:
    return current().tracer


# --- spans ---------------------------------------------------------------------------------


@contextlib.contextmanager
def span(name: str, attributes: dict[str, Any] | None = None) -> Iterator[trace.Span]:
    """A child span of the current one. A failure is recorded by behest's own message only,
    never with a stack trace: its chained causes (an SDK's error) may quote what a provider
    echoed, a key included."""
    with tracer().start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current_span:
        try:
            yield current_span
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException as exc:
            failed(current_span, exc)
            raise


def failed(on: trace.Span, exc: BaseException) -> None:
    """Mark a span failed: error.type, and behest's own description of its errors (an
    unexpected exception is described by its type alone)."""
    words = describe(exc) if isinstance(exc, BehestError) else "unexpected error"
    mark_error(on, words, type(exc).__name__)


def mark_error(on: trace.Span, description: str, error_type: str) -> None:
    """Status ERROR with `description`, and the GenAI/OTel `error.type` attribute."""
    on.set_status(Status(StatusCode.ERROR, description))
    on.set_attribute("error.type", error_type)
