"""Traces over OTLP (gRPC and HTTP) to an in-process receiver, and metrics scraped from /metrics.

A real server runs a tool-using `script` run; its spans (behest.run with behest.model_call and
behest.tool as children) carry the GenAI attributes, share the events' trace id, and hold no
message content unless `trace_content` is on.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from behest._proto.agent.v1 import run_pb2 as pb
from behest.app import App
from behest.observability.telemetry import Exporting, Telemetry
from tests.otlp_receiver import OtlpReceiver, attributes
from tests.support import Server, collect, create_request, fast_settings, kind, start_server

CALCULATOR = {"name": "calculator", "arguments": {"expression": "2+2"}}


def tool_script(canary: str) -> str:
    """A run that calls the calculator, then answers with `canary` in its text."""
    return json.dumps({"steps": [{"tool_calls": [CALCULATOR]}, {"text": f"done {canary}"}]})


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    running = OtlpReceiver()
    try:
        yield running
    finally:
        await running.stop()


async def run_script(server: Server, text: str) -> list[pb.AgentEvent]:
    events = await collect(server.runs.CreateRunStream(create_request(text, model="script")))
    assert kind(events[-1]) == "run_completed", events[-1]
    return events


async def stop_after_runs(server: Server) -> None:
    """Stop once every run task has let go (their ends counted), then export the rest."""
    await server.app.executor.stop(10.0)
    await server.channel.close()
    await server.app.stop(0)


def by_name(receiver: OtlpReceiver) -> dict[str, list[Any]]:
    spans: dict[str, list[Any]] = {}
    for span in receiver.spans():
        spans.setdefault(span.name, []).append(span)
    return spans


async def traced_run(
    tmp_path: Path, receiver: OtlpReceiver, canary: str, **settings: object
) -> list[pb.AgentEvent]:
    endpoint = await receiver.start_grpc()
    server = await start_server(
        fast_settings(tmp_path, otlp_endpoint=endpoint, otlp_protocol="grpc", **settings)
    )
    try:
        events = await run_script(server, tool_script(canary))
    finally:
        await stop_after_runs(server)
    return events


async def test_a_run_exports_its_spans_over_otlp_grpc(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    canary = "canary-" + secrets.token_hex(8)
    events = await traced_run(tmp_path, receiver, canary)
    spans = by_name(receiver)
    (run,) = spans["behest.run"]
    calls, (tool,) = spans["behest.model_call"], spans["behest.tool"]
    assert len(calls) == 2
    assert {s.trace_id for s in receiver.spans()} == {run.trace_id}
    assert {e.trace_id for e in events} == {run.trace_id.hex()}
    assert all(s.parent_span_id == run.span_id for s in [*calls, tool])
    assert receiver.resource_attributes()["service.name"] == "behest"
    assert attributes(run)["behest.outcome"] == "completed"
    finished = next(e for e in events if kind(e) == "tool_execution_finished")
    assert finished.span_id == tool.span_id.hex()
    deltas = {e.span_id for e in events if kind(e) == "text_delta"}
    assert deltas and deltas <= {s.span_id.hex() for s in calls}
    # No message content by default: the input's (and answer's) canary is nowhere.
    assert not any(canary.encode() in r.SerializeToString() for r in receiver.traces)
    # Metrics went the same way, exported one last time at the stop.
    started_runs = receiver.metric("behest_runs_started")
    assert started_runs is not None
    assert sum(p.as_int for p in started_runs.sum.data_points) == 1
    assert not [t.name for t in threading.enumerate() if t.name.startswith("Otel")]


async def test_spans_carry_the_genai_attributes(tmp_path: Path, receiver: OtlpReceiver) -> None:
    events = await traced_run(tmp_path, receiver, "no canary")
    spans = by_name(receiver)
    first, second = (attributes(s) for s in spans["behest.model_call"])
    for call in (first, second):
        assert call["gen_ai.operation.name"] == "chat"
        assert call["gen_ai.system"] == "local"
        assert call["gen_ai.request.model"] == "script"
        assert call["gen_ai.usage.input_tokens"] > 0
        assert call["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.input.messages" not in call
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert second["gen_ai.response.finish_reasons"] == ("stop",)
    (started,) = [e.tool_execution_started for e in events if kind(e) == "tool_execution_started"]
    tool = attributes(spans["behest.tool"][0])
    assert tool["gen_ai.operation.name"] == "execute_tool"
    assert tool["gen_ai.tool.name"] == "calculator"
    assert tool["gen_ai.tool.call.id"] == started.call_id
    assert "gen_ai.tool.call.arguments" not in tool


async def test_trace_content_puts_messages_in_spans(tmp_path: Path, receiver: OtlpReceiver) -> None:
    canary = "canary-" + secrets.token_hex(8)
    await traced_run(tmp_path, receiver, canary, trace_content=True)
    spans = by_name(receiver)
    first, second = (attributes(s) for s in spans["behest.model_call"])
    assert canary in first["gen_ai.input.messages"]
    assert canary in second["gen_ai.output.messages"]
    assert json.loads(second["gen_ai.input.messages"])[-1]["role"] == "tool"
    tool = attributes(spans["behest.tool"][0])
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"expression": "2+2"}
    assert tool["gen_ai.tool.call.result"] == "4"


async def test_spans_and_metrics_go_over_otlp_http(tmp_path: Path, receiver: OtlpReceiver) -> None:
    endpoint = await receiver.start_http()
    server = await start_server(
        fast_settings(tmp_path, otlp_endpoint=endpoint, otlp_protocol="http/protobuf")
    )
    try:
        events = await collect(server.runs.CreateRunStream(create_request("over http")))
    finally:
        await stop_after_runs(server)
    (run,) = by_name(receiver)["behest.run"]
    assert events[0].trace_id == run.trace_id.hex()
    assert {"/v1/traces", "/v1/metrics"} <= set(receiver.http_paths)
    assert receiver.metric("behest_events_written") is not None


async def test_the_standard_otel_variables_configure_export(
    tmp_path: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = await receiver.start_grpc()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "behest-under-test")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    server = await start_server(fast_settings(tmp_path))
    try:
        events = await collect(server.runs.CreateRunStream(create_request("from the env")))
    finally:
        await stop_after_runs(server)
    (run,) = by_name(receiver)["behest.run"]
    assert events[-1].trace_id == run.trace_id.hex()
    assert receiver.resource_attributes()["service.name"] == "behest-under-test"
    assert receiver.metrics == []


async def test_nothing_is_exported_by_default(tmp_path: Path) -> None:
    app = App(fast_settings(tmp_path))
    assert not app.telemetry.exports
    assert not app.telemetry.metrics.enabled
    assert app.telemetry.traces_to == ""


def test_a_telemetry_without_exporters_starts_nothing() -> None:
    telemetry = Telemetry()
    telemetry.start()
    assert (telemetry.exports, telemetry.metrics_port) == (False, 0)


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics by (name, labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sample `name` whose labels include `labels` (summed if several)."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert found, f"no sample {name} {labels}: {sorted(n for n, _ in samples)}"
    return sum(found)


async def three_runs(server: Server) -> list[pb.AgentEvent]:
    """A script run with a retry and a tool call, an echo run, and a run that fails."""
    retried = {"steps": [{"error": "unavailable"}, {"tool_calls": [CALCULATOR]}, {"text": "ok"}]}
    events = await run_script(server, json.dumps(retried))
    events += await collect(server.runs.CreateRunStream(create_request("echo me")))
    failing = create_request(json.dumps({"steps": [{"error": "bad_request"}]}), model="script")
    events += await collect(server.runs.CreateRunStream(failing))
    assert kind(events[-1]) == "run_failed"
    return events


async def test_metrics_are_scraped_from_the_prometheus_endpoint(tmp_path: Path) -> None:
    server = await start_server(fast_settings(tmp_path, metrics_listen="127.0.0.1:0"))
    port = server.app.telemetry.metrics_port
    try:
        events = await three_runs(server)
        await server.app.executor.stop(10.0)  # every run's end counted
        samples = await asyncio.to_thread(scrape, port)
    finally:
        await stop_after_runs(server)
    assert port > 0
    assert sample(samples, "behest_runs_started_total") == 3
    assert sample(samples, "behest_runs_finished_total", outcome="completed") == 2
    failed = sample(
        samples, "behest_runs_finished_total", outcome="failed", failure_code="provider_error"
    )
    assert failed == 1
    assert sample(samples, "behest_events_written_total") == len(events)
    script = {"provider": "local", "model": "script"}
    assert sample(samples, "behest_model_call_duration_seconds_count", **script, outcome="ok") == 2
    errors = sample(samples, "behest_model_call_duration_seconds_count", **script, outcome="error")
    assert errors == 2
    assert sample(samples, "behest_model_retries_total", provider="local") == 1
    assert sample(samples, "behest_model_tokens_total", **script, token_type="input") > 0
    tool = {"tool": "calculator", "outcome": "ok"}
    assert sample(samples, "behest_tool_duration_seconds_count", **tool) == 1
    first = sample(samples, "behest_stream_first_event_seconds_count", method="CreateRunStream")
    assert first == 3
    assert sample(samples, "behest_open_streams", method="CreateRunStream") == 0
    assert sample(samples, "behest_commit_batch_size_count") > 0
    assert sample(samples, "behest_commit_duration_seconds_count") > 0
    assert sample(samples, "behest_active_runs") == 0


@pytest.mark.parametrize(
    ("exporting", "environ", "traces_to"),
    [
        ({}, {}, ""),
        ({"otlp_endpoint": "http://c:4317"}, {}, "grpc http://c:4317"),
        (
            {"otlp_endpoint": "http://c:4318/", "otlp_protocol": "http/protobuf"},
            {},
            "http/protobuf http://c:4318/v1/traces",
        ),
        ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, "grpc (from OTEL_* variables)"),
        (
            {},
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            "http/protobuf (from OTEL_* variables)",
        ),
        ({"otlp_endpoint": "http://c:4317"}, {"OTEL_TRACES_EXPORTER": "none"}, ""),
    ],
)
def test_where_spans_go(exporting: dict[str, str], environ: dict[str, str], traces_to: str) -> None:
    telemetry = Telemetry(Exporting(**exporting), environ)
    assert telemetry.traces_to == traces_to


def test_an_otlp_protocol_behest_does_not_speak_stops_the_start() -> None:
    with pytest.raises(ValueError, match="http/json"):
        Telemetry(
            Exporting(),
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        )


@pytest.mark.parametrize(
    "values",
    [
        {"otlp_endpoint": "collector:4317"},
        {"otlp_protocol": "http/json"},
        {"metrics_listen": "9464"},
    ],
)
def test_bad_telemetry_settings_are_refused(tmp_path: Path, values: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=next(iter(values))):
        fast_settings(tmp_path, **values)
