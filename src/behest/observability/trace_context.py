"""W3C trace context in and out: a request's traceparent, the parent context it names, a
span's traceparent to continue it later (a run resumed after a restart), ids for events."""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()


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
