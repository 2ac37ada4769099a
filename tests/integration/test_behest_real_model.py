"""behest's OpenAI adapter against a real model server (llama.cpp + SmolLM2-135M), offline."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict
from jsonschema import Draft202012Validator

from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    start_server,
    stop_server,
)

MODEL = "smollm2"


@pytest.fixture
async def server(tmp_path: Path, llm_server: str) -> AsyncIterator[Server]:
    settings = fast_settings(tmp_path).with_tables(
        {
            "providers": {
                "smol": {
                    "type": "openai",
                    "base_url": llm_server,
                    "timeout_s": 60,
                    "models": {MODEL: {"context_window": 8192, "max_output_tokens": 48}},
                }
            }
        },
        source="test",
    )
    running = await start_server(settings)
    try:
        yield running
    finally:
        await stop_server(running)


async def test_a_run_streams_a_real_models_answer(server: Server) -> None:
    # tool_choice none: llama.cpp's server cannot stream with tool_choice "auto".
    request = create_request(
        "Describe the ocean in one sentence.", provider="smol", model=MODEL, tool_choice="none"
    )
    events = await collect(server.runs.CreateRunStream(request))
    deltas = [e.text_delta.delta for e in events if kind(e) == "text_delta"]
    assert len(deltas) > 1  # streamed, not one block
    assert "".join(deltas).strip()
    # This server sends no usage chunk (stream_options is ignored): behest records zeros.
    assert "usage_recorded" in [kind(e) for e in events]
    assert kind(events[-1]) == "run_completed"


async def test_a_named_tool_choice_gets_the_tool_run_and_answered(server: Server) -> None:
    request = create_request(
        "What is 12 times 7?", provider="smol", model=MODEL, tool_choice="calculator"
    )
    events = await collect(server.runs.CreateRunStream(request))
    kinds = [kind(e) for e in events]
    completed = [e.tool_call_completed.call for e in events if kind(e) == "tool_call_completed"]
    assert completed and completed[0].name == "calculator"
    assert "expression" in json.loads(completed[0].arguments)
    assert "tool_execution_finished" in kinds and "tool_message_committed" in kinds
    # After the forced call the model may answer: the run ends with its text.
    assert kind(events[-1]) == "run_completed"
    assert events[-1].run_completed.iterations >= 2


SUM = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


async def test_a_structured_output_run_answers_json_that_fits_its_schema(server: Server) -> None:
    # llama-cpp-python's server refuses response_format json_schema; behest asks again with
    # its {"type": "json_object", "schema": …}, which becomes a grammar: valid JSON, first try.
    request = create_request(
        "What is 12 times 7? Answer in JSON.",
        provider="smol",
        model=MODEL,
        tool_choice="none",
        response_format=pb.ResponseFormat(name="product", json_schema=json.dumps(SUM)),
    )
    events = await collect(server.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed", events[-1]
    assert "output_rejected" not in [kind(e) for e in events]
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    answer = MessageToDict(output.output.structured_output)
    Draft202012Validator(SUM).validate(answer)
    assert isinstance(answer["answer"], int | float) and float(answer["answer"]).is_integer()
