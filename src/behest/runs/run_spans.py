"""A run's spans: `behest.run` from its creation to its end (under the caller's trace when it
sent one), and `behest.run.resume` for each time it is taken up again, under the trace it
started in (the stored traceparent)."""

from __future__ import annotations

from opentelemetry import trace

from behest.domain.runs import Run, RunRequest
from behest.observability.trace_context import context_from_traceparent


def run_span(
    tracer: trace.Tracer, run_id: str, request: RunRequest, tenant: str, traceparent: str
) -> trace.Span:
    """The span of a new run (`behest.run`), under the caller's trace when it sent one."""
    return tracer.start_span(
        "behest.run",
        context=context_from_traceparent(traceparent),
        attributes={
            "behest.run_id": run_id,
            "behest.tenant": tenant,
            "behest.provider": request.provider,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.request.model": request.model,
        },
    )


def resume_span(tracer: trace.Tracer, run: Run, last_sequence: int) -> trace.Span:
    """The span of a run taken up again after event `last_sequence`."""
    return tracer.start_span(
        "behest.run.resume",
        context=context_from_traceparent(run.traceparent),
        attributes={"behest.run_id": run.id, "behest.resumed_after": last_sequence},
    )
