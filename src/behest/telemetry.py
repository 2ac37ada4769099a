"""OpenTelemetry: the tracer, W3C trace-context propagation, and ids for events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from behest.errors import BehestError

_PROPAGATOR = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None


def setup() -> None:
    """Install an SDK tracer provider once, so spans get real ids (exporters: later)."""
    global _provider
    if _provider is None:
        _provider = TracerProvider()
        trace.set_tracer_provider(_provider)


def tracer() -> trace.Tracer:
    return trace.get_tracer("behest")


@contextlib.contextmanager
def span(name: str, attributes: dict[str, str | int] | None = None) -> Iterator[trace.Span]:
    """A child span of the current one. A failure is recorded by behest's own message only,
    never with a stack trace: its chained causes (an SDK's error) may quote what a provider
    echoed, a key included."""
    with tracer().start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except BehestError as exc:
            current.set_status(Status(StatusCode.ERROR, str(exc)))
            raise
        except BaseException:
            current.set_status(Status(StatusCode.ERROR, "unexpected error"))
            raise


def traceparent_in(metadata: Iterable[tuple[str, str | bytes]]) -> str:
    """The `traceparent` of request metadata: "" if none, or more than one (W3C trace
    context: several traceparent headers are invalid, so a new trace starts)."""
    sent = [value for key, value in metadata if key == "traceparent"]
    return sent[0] if len(sent) == 1 and isinstance(sent[0], str) else ""


def context_from_traceparent(traceparent: str) -> otel_context.Context | None:
    """The parent context a W3C `traceparent` header names, or None if absent or invalid."""
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def traceparent_of(span: trace.Span) -> str:
    """The W3C `traceparent` of a span, to continue its trace later (e.g. after a restart)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


def current_trace_ids() -> tuple[str, str]:
    """(trace_id, span_id) of the current span as lowercase hex, or empty strings."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return "", ""
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")
